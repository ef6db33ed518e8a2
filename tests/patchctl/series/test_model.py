"""series.py: schema validation (file, key, fix), ordering, and hand-editable saving."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import paths

from patchctl.errors import ConfigError, NotFound, PatchctlError
from patchctl.series.model import Patch, dump_series, load_series, read_patch_file, save_series

REPO = paths.REPO
SHA = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
TREE = "b2da53584951ec8aa40680229509a6646a637560"

GOOD = f"""\
# header comment kept on save
version: 1
upstream:
  kind: pypi-sdist
  package: llama-cpp-python
  version: 0.3.36
  sha256: {SHA}
  subdir: vendor/llama.cpp
  tree: {TREE}
patches:
  - id: 0001-first
    file: 0001-first.patch
    title: First
    upstream_status: Pending
    origin: patchctl
    markers: ["// patchctl 0001-first"]

  - id: 0002-second
    file: sub/0002-second.patch
    title: Second
    imported: true
"""


def write_series(tmp_path: Path, text: str, files: tuple[str, ...] = ()) -> Path:
    directory = tmp_path / "series"
    directory.mkdir(exist_ok=True)
    (directory / "series.yaml").write_text(text)
    for name in files:
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(b"")
    return directory


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return write_series(tmp_path, GOOD, ("0001-first.patch", "sub/0002-second.patch"))


def test_shipped_default_series_is_valid() -> None:
    series = load_series(REPO / "patches" / "llamafile")
    assert series.name == "llamafile"
    assert series.upstream.kind == "pypi-sdist"
    assert series.upstream.package == "llama-cpp-python" and series.upstream.version == "0.3.36"
    assert series.upstream.sha256 == SHA and series.upstream.tree == TREE
    assert series.upstream.subdir == "vendor/llama.cpp"
    assert series.upstream.commit == "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


def test_load_reads_every_field(good: Path) -> None:
    series = load_series(good)
    assert series.ids() == ("0001-first", "0002-second")
    first = series.patch("0001-first")
    assert first.markers == ("// patchctl 0001-first",)
    assert first.upstream_status == "Pending" and first.origin == "patchctl"
    assert series.patch("0002-second").imported is True
    assert series.patch_path("0002-second") == good / "sub" / "0002-second.patch"
    assert series.root == "."
    assert [p.id for p in series.upto("0001-first")] == ["0001-first"]


def test_save_of_an_unchanged_series_is_byte_identical(good: Path) -> None:
    before = (good / "series.yaml").read_bytes()
    series = load_series(good)
    assert dump_series(series) == before
    assert save_series(series) is False
    assert (good / "series.yaml").read_bytes() == before


def test_save_keeps_hand_written_key_order_and_header(tmp_path: Path) -> None:
    text = f"""\
# my notes
patches:
  - file: a.patch
    id: 0001-a
    title: A
upstream:
  tree: {TREE}
  kind: archive
  sha256: {SHA}
  path: orig.tar.gz
version: 1
"""
    directory = write_series(tmp_path, text, ("a.patch",))
    series = load_series(directory)
    updated = series.with_patch(replace(series.patch("0001-a"), post_tree=TREE))
    save_series(updated)
    saved = (directory / "series.yaml").read_text()
    assert saved == text.replace("    title: A\n", f"    title: A\n    post_tree: {TREE}\n")
    assert load_series(directory).patch("0001-a").post_tree == TREE


def test_with_patch_appends_and_without_patch_removes(good: Path) -> None:
    series = load_series(good)
    added = series.with_patch(Patch(id="0003-third", file="0003-third.patch", title="Third"))
    assert added.ids()[-1] == "0003-third"
    assert added.without_patch("0001-first").ids() == ("0002-second", "0003-third")
    assert series.ids() == ("0001-first", "0002-second")  # frozen: the original is unchanged
    with pytest.raises(NotFound):
        series.patch("9999-nope")


def test_saved_file_is_readable_with_indented_lists_and_blank_lines(good: Path) -> None:
    series = load_series(good)
    text = dump_series(series).decode()
    assert "\npatches:\n  - id: 0001-first\n" in text
    assert "\n\n  - id: 0002-second\n" in text


def expect_config_error(directory: Path, key: str | None) -> ConfigError:
    before = (directory / "series.yaml").read_bytes()
    with pytest.raises(ConfigError) as info:
        load_series(directory)
    exc = info.value
    assert exc.exit_code == 5
    assert str(directory / "series.yaml") in str(exc)
    if key is not None:
        assert exc.key == key and f"{key}:" in str(exc)
    assert "\n" not in exc.one_line()
    assert (directory / "series.yaml").read_bytes() == before  # nothing touched
    return exc


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (("  - id: 0001-first\n", "  - id: 0001-first\n    colour: red\n"), "patches[0].colour"),
        (("  subdir:", "  flavour: x\n  subdir:"), "upstream.flavour"),
        (("version: 1\n", "version: 1\nextra: 2\n"), "extra"),
        (("version: 1\n", "version: 2\n"), "version"),
        (("kind: pypi-sdist", "kind: svn"), "upstream.kind"),
        ((f"sha256: {SHA}", "sha256: 1234"), "upstream.sha256"),
        ((f"tree: {TREE}", "tree: b2da535"), "upstream.tree"),
        (("  package: llama-cpp-python\n", ""), "upstream.package"),
        (("  version: 0.3.36\n", "  version: 1.0\n"), "upstream.version"),
        (("id: 0002-second", "id: second"), "patches[1].id"),
        (("file: sub/0002-second.patch", "file: ../escape.patch"), "patches[1].file"),
        (("file: sub/0002-second.patch", "file: /etc/passwd"), "patches[1].file"),
        (("imported: true", "imported: maybe"), "patches[1].imported"),
        (('markers: ["// patchctl 0001-first"]', "markers: 3"), "patches[0].markers"),
        (("subdir: vendor/llama.cpp", "subdir: ../up"), "upstream.subdir"),
    ],
)
def test_invalid_values_name_file_and_key(good: Path, edit: tuple[str, str], key: str) -> None:
    text = GOOD.replace(*edit)
    assert text != GOOD
    (good / "series.yaml").write_text(text)
    exc = expect_config_error(good, key)
    assert exc.hint


EXTENDS = "version: 1\nextends:\n  series: base\n  root: vendor/lib\n"


def test_extends_is_read_and_saved_byte_identically(good: Path) -> None:
    text = GOOD.replace("version: 1\n", EXTENDS)
    (good / "series.yaml").write_text(text)
    series = load_series(good)
    assert series.extends is not None
    assert (series.extends.series, series.extends.root) == ("base", "vendor/lib")
    save_series(series)
    assert (good / "series.yaml").read_text() == text
    assert load_series(REPO / "patches" / "llamafile").extends is None


@pytest.mark.parametrize(
    ("extends", "key"),
    [
        ("extends: llamafile\n", "extends"),
        ("extends:\n  series: base\n", "extends.root"),
        ("extends:\n  root: vendor\n", "extends.series"),
        ("extends:\n  series: base\n  root: vendor\n  colour: red\n", "extends.colour"),
        ("extends:\n  series: ../base\n  root: vendor\n", "extends.series"),
        ("extends:\n  series: a/b\n  root: vendor\n", "extends.series"),
        ("extends:\n  series: ..\n  root: vendor\n", "extends.series"),
        ("extends:\n  series: .hidden\n  root: vendor\n", "extends.series"),
        ("extends:\n  series: series\n  root: vendor\n", "extends.series"),  # itself
        ("extends:\n  series: 7\n  root: vendor\n", "extends.series"),
        ("extends:\n  series: base\n  root: ../up\n", "extends.root"),
        ("extends:\n  series: base\n  root: /abs\n", "extends.root"),
        ("extends:\n  series: base\n  root: vendor//lib/\n", "extends.root"),
        ("extends:\n  series: base\n  root: 'a\\\\b'\n", "extends.root"),
        ("extends:\n  series: base\n  root: vendor/lib/\n", "extends.root"),
        ("extends:\n  series: base\n  root: vendor/.git\n", "extends.root"),
    ],
)
def test_invalid_extends_names_the_key(good: Path, extends: str, key: str) -> None:
    (good / "series.yaml").write_text(GOOD.replace("version: 1\n", "version: 1\n" + extends))
    assert expect_config_error(good, key).hint


def test_duplicate_id_is_rejected(good: Path) -> None:
    (good / "series.yaml").write_text(GOOD.replace("id: 0002-second", "id: 0001-first"))
    exc = expect_config_error(good, "patches[1].id")
    assert "duplicate id '0001-first'" in str(exc)


def test_malformed_yaml_names_the_line(good: Path) -> None:
    (good / "series.yaml").write_text(GOOD.replace("  kind: pypi-sdist", "  kind: [pypi"))
    exc = expect_config_error(good, None)
    assert "malformed YAML at line" in str(exc)


def test_git_kind_requires_full_commit(tmp_path: Path) -> None:
    text = "version: 1\nupstream:\n  kind: git\n  url: ../up\n  commit: 0c1e570\n"
    exc = expect_config_error(write_series(tmp_path, text), "upstream.commit")
    assert exc.hint == "use the full 40-hex lowercase object id"


def test_missing_patch_file_is_not_found(tmp_path: Path) -> None:
    directory = write_series(tmp_path, GOOD, ("0001-first.patch",))
    with pytest.raises(NotFound) as info:
        load_series(directory)
    assert info.value.exit_code == 15
    assert "patches[1].file: sub/0002-second.patch does not exist" in str(info.value)
    assert load_series(directory, check_files=False).ids()[1] == "0002-second"


def test_missing_series_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        load_series(tmp_path)


# Any one-line text: control characters, line separators and bidi overrides are refused on load.
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters=BIDI)
    | st.sampled_from([" ", "#", "'", '"', "*", "&", "!", "[", "/", "]"]),
    max_size=40,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    title=TEXT,
    status=st.none() | TEXT.filter(bool),
    markers=st.lists(TEXT.filter(str.strip), max_size=3),
    imported=st.booleans(),
)
def test_save_then_load_round_trips_any_text(
    good: Path, title: str, status: str | None, markers: list[str], imported: bool
) -> None:
    series = load_series(good)
    patch = replace(
        series.patch("0001-first"),
        title=title,
        upstream_status=status,
        markers=tuple(markers),
        imported=imported,
    )
    save_series(series.with_patch(patch))
    again = load_series(good).patch("0001-first")
    assert (again.title, again.upstream_status, again.markers, again.imported) == (
        title,
        status,
        tuple(markers),
        imported,
    )


def test_a_series_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    """A read error (here EIO: /proc/self/mem opens but cannot be read, even by root) names
    the series file and the fix (exit 1), rather than a bare operating-system error."""
    unreadable = Path("/proc/self/mem")
    if not unreadable.is_file():
        pytest.skip("no /proc/self/mem here")
    directory = tmp_path / "series"
    directory.mkdir()
    (directory / "series.yaml").symlink_to(unreadable)
    with pytest.raises(PatchctlError) as info:
        load_series(directory)
    assert info.value.exit_code == 1
    assert f"cannot read the series file {directory / 'series.yaml'}: " in str(info.value)
    assert info.value.hint is not None and "regular file you can read" in info.value.hint


def test_a_patch_file_that_is_a_directory_now_is_named(good: Path) -> None:
    series = load_series(good)
    path = series.patch_path(series.patches[0])
    path.unlink()
    path.mkdir()  # after load_series checked it: a reader must still name it
    with pytest.raises(PatchctlError) as info:
        read_patch_file(path)
    assert info.value.exit_code == 1
    assert str(info.value).startswith(f"cannot read the patch file {path}: ")


DESCRIBED = GOOD.replace(
    "    title: First\n",
    "    title: First\n    description: |\n      Why it is made.\n\n      Second paragraph.\n",
)


def test_description_loads_and_saves_as_a_block(tmp_path: Path) -> None:
    directory = write_series(tmp_path, DESCRIBED, ("0001-first.patch", "sub/0002-second.patch"))
    series = load_series(directory)
    assert series.patch("0001-first").description == "Why it is made.\n\nSecond paragraph."
    assert series.patch("0002-second").description == ""
    save_series(series)
    text = (directory / "series.yaml").read_text()
    assert "    description: |\n      Why it is made.\n\n      Second paragraph.\n" in text
    assert load_series(directory) == series


@pytest.mark.parametrize(
    ("body", "found"),
    [
        ("ok\n---\nmore", "line 2 looks like a patch header"),
        ("diff --git a/x b/x", "line 1 looks like a patch header"),
        ("From 123 Mon", "line 1 looks like a patch header"),
        ("Patchctl-Id: 0001-x", "line 1 looks like a patch header"),
        ("trailing \nx", "line 1 ends in whitespace"),
        ("bell \a", "line 1 contains control characters"),
        ("x" * 9000, "at most 8000"),
    ],
)
def test_description_refuses_what_would_change_the_header(
    tmp_path: Path, body: str, found: str
) -> None:
    text = DESCRIBED.replace(
        "    description: |\n      Why it is made.\n\n      Second paragraph.\n",
        f"    description: {json.dumps(body)}\n",  # a JSON string is a YAML double-quoted one
    )
    directory = write_series(tmp_path, text, ("0001-first.patch", "sub/0002-second.patch"))
    with pytest.raises(ConfigError, match=found) as info:
        load_series(directory)
    assert "patches[0].description" in str(info.value)


def test_description_must_be_text(tmp_path: Path) -> None:
    text = GOOD.replace("    title: First\n", "    title: First\n    description: [1]\n")
    directory = write_series(tmp_path, text, ("0001-first.patch", "sub/0002-second.patch"))
    with pytest.raises(ConfigError, match="expected text") as info:
        load_series(directory)
    assert "patches[0].description" in str(info.value)
