"""allowlists.py: the allow-lists for user values and the printable form of text."""

from __future__ import annotations

import pytest

from patchctl import allowlists
from patchctl.allowlists import (
    git_url_problem,
    is_remote_url,
    marker_problem,
    one_line,
    package_problem,
    patch_file_problem,
    printable,
    relpath_problem,
    text_problem,
    url_kind,
    version_problem,
)

GOOD_URLS = [
    "https://github.com/ggml-org/llama.cpp.git",
    "http://user:token@host.example:8080/x.git",
    "ssh://git@host.example:2222/x.git",
    "ssh://[::1]/x.git",
    "git://host.example/x",
    "file:///srv/git/x.git",
    "file://localhost/srv/x",
    "git@github.com:org/repo.git",
    "host.example:path/repo",
    "../llamafile",
    "/home/me/src/llamafile",
    "./odd:name",
]
BAD_URLS = {
    "--upload-pack=touch /tmp/x;://x": "starts with '-'",
    "ext::sh -c touch% /tmp/x": "remote helper",
    "fd::7": "remote helper",
    "git+ext::x": "remote helper",
    "./a::b": "remote helper",
    "ftp://host/x": "scheme 'ftp'",
    "ssh://-oProxyCommand=x/y": "invalid host",
    "ssh://-u@host/y": "invalid user",
    "-oProxyCommand=x:y": "starts with '-'",
    "user@-host:x": "invalid host",
    "host:-x": "path starting with '-'",
    "https://host/a b": "whitespace",
    "https://host/\x1b[31m": "control characters",
    "https://host:port/x": "invalid port",
    "file://remote/x": "must be local",
    "": "is empty",
}


@pytest.mark.parametrize("url", GOOD_URLS)
def test_allowed_urls(url: str) -> None:
    assert git_url_problem(url) is None


@pytest.mark.parametrize("url", sorted(BAD_URLS))
def test_refused_urls(url: str) -> None:
    problem = git_url_problem(url)
    assert problem is not None and BAD_URLS[url] in problem


def test_url_kinds_follow_gits_rule() -> None:
    assert url_kind("https://h/x") == "scheme"
    assert url_kind("git@h:x") == "scp" and url_kind("h:x") == "scp"
    assert url_kind("./h:x") == "local" and url_kind("/a:b") == "local"
    assert is_remote_url("git@h:x") and not is_remote_url("../x")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("vendor/llama.cpp", None),
        ("vendor/llama.cpp/", None),
        ("a b/c", None),
        ("../x", "'..'"),
        ("a/./b", "'..', '.'"),
        ("a//b", "empty"),
        ("/abs", "relative"),
        ("a\\b", "relative"),
        ("-x", "'-'"),
        ("a/.GIT/b", ".git"),
        ("a\nb", "control"),
        ("", "empty"),
    ],
)
def test_relative_paths(value: str, problem: str | None) -> None:
    got = relpath_problem(value)
    assert (got is None) if problem is None else (got is not None and problem in got)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("0001-x.patch", True),
        ("sub/0001-x.diff", True),
        ("README.md", False),
        ("series.yaml", False),
        (".x.patch", False),
        ("a/.b/c.patch", False),
        ("x.patch/", False),
    ],
)
def test_patch_file_names(name: str, ok: bool) -> None:
    assert (patch_file_problem(name) is None) is ok


def test_text_rules_refuse_every_control_and_bidi_character() -> None:
    for char in ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\u202e", "\u2066"]:
        assert text_problem(f"a{char}b") is not None, repr(char)
    assert text_problem("Café [/] ✓ 日本") is None
    assert text_problem("x" * 501) is not None
    assert marker_problem("  ") is not None and marker_problem("// patchctl") is None


def test_printable_escapes_and_one_line_cleans() -> None:
    assert printable("a\x1b[31mb\u202ec") == "a\\x1b[31mb\\u202ec"
    assert printable("a\nb", keep="\n") == "a\nb" and printable("a\nb") == "a\\nb"
    assert printable("caf\udce9") == "caf\\xe9"  # a surrogate-escaped byte
    assert one_line("a\r\n\x1bb\u2028c  d") == "a b c d"
    assert one_line("x" * 600) == "x" * 497 + "..."


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("from https://u:pw@h/x.git: failed", "from https://***@h/x.git: failed"),
        ("'https://ghp_tok@github.com/o/r/'", "'https://***@github.com/o/r/'"),
        (
            "ssh://git:pw@h:22/x and http://a:b@[::1]/y",
            "ssh://git:***@h:22/x and http://***@[::1]/y",
        ),
        ("ssh://git@host/x, git@host:x, a@b.org", "ssh://git@host/x, git@host:x, a@b.org"),
        ("https://host/x@y", "https://host/x@y"),  # '@' after the host: a path, kept
    ],
)
def test_redacted_hides_url_passwords_and_http_tokens(text: str, shown: str) -> None:
    assert allowlists.redacted(text) == shown
    assert allowlists.printable(text) == shown


@pytest.mark.parametrize("version", ["0.3.36", "1.0rc1", "2!1.0.post2.dev3", "1.0+local.7"])
def test_pep440_versions(version: str) -> None:
    assert version_problem(version) is None


@pytest.mark.parametrize("version", ["1.0; rm", "../1", "latest", "1.0 x", ""])
def test_not_versions(version: str) -> None:
    assert version_problem(version) is not None


def test_package_names() -> None:
    assert package_problem("llama-cpp-python") is None and package_problem("a") is None
    for bad in ["../x", "-x", "x?y", "a b", "x-"]:
        assert package_problem(bad) is not None


@pytest.mark.parametrize("target", ["llama-cli", "ggml", "o//llama.cpp/main/main", "a.b+c_d"])
def test_build_targets(target: str) -> None:
    assert allowlists.build_target_problem(target) is None


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("-f/tmp/evil.mk", "starts with '-'"),
        ("--target=x", "starts with '-'"),
        ("CC=touch /tmp/x", "not a build target"),
        ("a b", "not a build target"),
        ("$(shell id)", "not a build target"),
        ("x\ny", "not a build target"),
        ("", "not a build target"),
        ("t" * 201, "not a build target"),
    ],
)
def test_not_build_targets(target: str, problem: str) -> None:
    assert problem in (allowlists.build_target_problem(target) or "")
