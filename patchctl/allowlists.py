"""The allow-lists for user values: what a URL, a path, a name, an id or a title may look like.

Every value that reaches a command line, a file name, a URL, a commit message or the terminal
is checked against one of these rules when it is read (series.yaml, the command line, an
imported mail header). Each `*_problem` function returns None for an acceptable value, else a
short description of what is wrong; the caller names the file and key (ConfigError, exit 5).
The rules are allow-lists: a form not described here is refused, so a value can never be read
as an option (`-...`), a remote helper (`ext::...`) or a second line.
"""

from __future__ import annotations

import re
from pathlib import Path

# Characters never accepted in a value and never printed raw: C0 and C1 controls and DEL
# (newline, CR, ESC, NUL...), Unicode line/paragraph separators (str.splitlines splits on them),
# bidirectional overrides (they reorder what a terminal shows), and lone surrogates (the
# stand-ins for undecodable bytes, which cannot be written to a UTF-8 terminal).
UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
HEX40 = re.compile(r"[0-9a-f]{40}")
HEX64 = re.compile(r"[0-9a-f]{64}")
OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256 git object ids
# NNNN-slug with the slug capped at 63 characters (gbp pq's limit).
PATCH_ID = re.compile(r"[0-9]{4}-[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# PEP 508 distribution names.
PACKAGE = re.compile(r"[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]")
# PEP 440 versions (public part, optional local label), as `packaging` accepts them.
VERSION = re.compile(
    r"v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*"
    r"(?:[-_.]?(?:alpha|a|beta|b|preview|pre|c|rc)[-_.]?[0-9]*)?"
    r"(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?"
    r"(?:[-_.]?dev[-_.]?[0-9]*)?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?",
    re.IGNORECASE,
)
GIT_SCHEMES = ("https", "http", "ssh", "git", "file")
# The archive file names patchctl extracts (archive.py reads each of these formats).
ZSTD_SUFFIX = ".tar.zst"
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ZSTD_SUFFIX)
# git's `<transport>::<address>` syntax (transport.c): runs git-remote-<transport>.
REMOTE_HELPER = re.compile(r"[A-Za-z0-9+.-]*::")
SCHEME_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(.*)", re.DOTALL)
# A host name or an IP literal; never starting with '-' (ssh would read it as an option).
HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*)|\[[0-9A-Fa-f:.]+\]")
USER = re.compile(r"[A-Za-z0-9._~+%!$&'()*,;=][A-Za-z0-9._~+%!$&'()*,;=:-]*")
PORT = re.compile(r"[0-9]{1,5}")
PATCH_SUFFIXES = (".patch", ".diff")
MAX_URL = 4096
MAX_PATH = 1024
MAX_TEXT = 500
MAX_MARKER = 200


def unsafe_chars(text: str) -> list[str]:
    """The distinct unsafe characters in `text`, as escapes (`\\n`, `\\x1b`, `\\u202e`)."""
    return list(dict.fromkeys(_escape(m.group()) for m in UNSAFE.finditer(text)))


def _escape(char: str) -> str:
    code = ord(char)
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if char in named:
        return named[char]
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"  # an undecodable byte kept by surrogateescape
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str, *, keep: str = "") -> str:
    """`text` with every unsafe character (except those in `keep`) shown as an escape, and
    the secrets of URLs in it redacted (`redacted`)."""
    text = redacted(text)
    return UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape(m.group()), text)


# The user information of a URL (`scheme://userinfo@`): up to the first '/', '@' or space.
USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://([^/@\s'\"`]+)@")


def redacted(text: str) -> str:
    """`text` with the password of every URL in it shown as `***`, and for http(s) the whole
    user information (a token is often passed as the user name): a URL with credentials
    may be used, but is never printed or written into a generated file."""

    def hide(match: re.Match[str]) -> str:
        scheme, info = match.group(1), match.group(2)
        user, colon, _password = info.partition(":")
        if scheme.lower() in ("http", "https"):
            return f"{scheme}://***@"
        return f"{scheme}://{user}:***@" if colon else match.group()

    return USERINFO.sub(hide, text) if "@" in text else text


def shown(value: object, limit: int = 60) -> str:
    """A short, printable repr of a value for an error message."""
    text = repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return printable(text)


def one_line(text: str, limit: int = MAX_TEXT) -> str:
    """Text from an untrusted source made acceptable: unsafe characters and runs of
    whitespace become one space, and it is cut to `limit` characters."""
    text = " ".join(UNSAFE.sub(" ", text).split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def text_problem(text: str, limit: int = MAX_TEXT) -> str | None:
    """One line of free text (title, origin, status): no control characters, bounded."""
    if len(text) > limit:
        return f"is {len(text)} characters long (at most {limit})"
    bad = unsafe_chars(text)
    if bad:
        return f"contains control characters ({', '.join(bad)})"
    return None


# A patch description: the body of a patch header, in git's commit-message sense. Its lines
# must not look like the header's own structure, or the patch file would read back as
# something else: the `---` that ends the header, a diff or mbox line, a trailer patchctl writes.
MAX_DESCRIPTION = 8000
DESCRIPTION_FIX = "write plain lines (no trailing spaces, no `---`, diff, `From ` or trailer lines)"
_HEADER_LIKE = re.compile(
    r"---|(diff --git |Index: |--- |\+\+\+ |From |Patchctl-Id:|Upstream-Status:|Origin:).*"
)


def description_problem(text: str) -> str | None:
    """The multi-line body of a patch header."""
    if len(text) > MAX_DESCRIPTION:
        return f"is {len(text)} characters long (at most {MAX_DESCRIPTION})"
    for n, line in enumerate(text.strip("\n").split("\n"), 1):
        problem = text_problem(line)
        if problem is None and line != line.rstrip():
            problem = "ends in whitespace"
        if problem is None and _HEADER_LIKE.fullmatch(line):
            problem = "looks like a patch header or diff line"
        if problem is not None:
            return f"line {n} {problem}"
    return None


def marker_problem(marker: str) -> str | None:
    """An in-tree marker: a non-blank single line, at most MAX_MARKER characters."""
    if not marker.strip():
        return "is empty or blank"
    return text_problem(marker, MAX_MARKER)


def _value_problem(value: str, limit: int) -> str | None:
    """A non-empty `text_problem`-clean value."""
    return "is empty" if not value else text_problem(value, limit)


def relpath_problem(value: str) -> str | None:
    """A relative path inside a tree: no `..`, `.`, empty or `.git` components, no leading '-'."""
    problem = _value_problem(value, MAX_PATH)
    if problem is not None:
        return problem
    if value.startswith("/") or "\\" in value:
        return "must be a relative path with '/' separators"
    if value.startswith("-"):
        return "must not start with '-'"
    parts = value.removesuffix("/").split("/")
    for part in parts:
        if part in ("", ".", ".."):
            return "must not contain '..', '.' or empty components"
        if part.lower() == ".git":
            return "must not contain a '.git' component"
    return None


def patch_file_problem(value: str) -> str | None:
    """A patch file name: a relative, non-hidden path ending in .patch or .diff."""
    problem = relpath_problem(value)
    if problem is not None:
        return problem
    if value.endswith("/"):
        return "names a directory"
    if any(part.startswith(".") for part in value.split("/")):
        return "must not be or be inside a hidden name (starting with '.')"
    if not value.endswith(PATCH_SUFFIXES):
        return "must end in .patch or .diff (other names are reserved for generated files)"
    return None


def root_problem(value: str) -> str | None:
    """`root:` is '.' (the whole tree) or a relative path inside it."""
    return None if value == "." else relpath_problem(value)


def package_problem(name: str) -> str | None:
    """A PEP 508 distribution name."""
    return None if PACKAGE.fullmatch(name) and len(name) <= 200 else "is not a PEP 508 name"


def version_problem(version: str) -> str | None:
    """A PEP 440 version."""
    ok = VERSION.fullmatch(version) and len(version) <= 100
    return None if ok else "is not a PEP 440 version"


def object_id_problem(oid: str) -> str | None:
    """A full git object id: 40 (SHA-1) or 64 (SHA-256) lowercase hex digits."""
    return None if OBJECT_ID.fullmatch(oid) else "is not a full 40- or 64-hex lowercase object id"


def sha256_problem(digest: str) -> str | None:
    """A sha256 digest: 64 lowercase hex digits."""
    return None if HEX64.fullmatch(digest) else "is not a 64-hex lowercase sha256"


def patch_id_problem(pid: str) -> str | None:
    """A patch id: NNNN-slug."""
    return None if PATCH_ID.fullmatch(pid) else "is not NNNN-slug (e.g. 0079-my-fix)"


# A build target as cmake --target and make take it: a name or a path-like name (make's
# `o//llama.cpp/main/main`). No `-` first (an option), no `=` (a make variable assignment
# such as CC=...), no space, `$`, quote or control character.
BUILD_TARGET = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+/-]{0,199}")


def build_target_problem(target: str) -> str | None:
    """A target for `patchctl build -t`."""
    if target.startswith("-"):
        return "starts with '-' (it would be read as an option)"
    if BUILD_TARGET.fullmatch(target) is None:
        return "is not a build target name (letters, digits, _ . + / -; at most 200)"
    return None


# ----------------------------------------------------------------------------- git urls


def url_kind(url: str) -> str:
    """How git reads `url`: "scheme" (`proto://...`), "scp" (`[user@]host:path`) or "local".

    git's own rule (connect.c): a colon before any slash makes `host:path` an ssh address.
    """
    if SCHEME_URL.fullmatch(url):
        return "scheme"
    colon, slash = url.find(":"), url.find("/")
    if colon > 0 and (slash < 0 or colon < slash):
        return "scp"
    return "local"


def git_url_problem(url: str) -> str | None:
    """An upstream git URL: https, http, ssh, git or file URL, scp-like ssh, or a local path."""
    problem = _value_problem(url, MAX_URL)
    if problem is not None:
        return problem
    if url.startswith("-"):
        return "starts with '-' (git would read it as an option)"
    kind = url_kind(url)
    if REMOTE_HELPER.match(url) or (kind != "scheme" and "::" in url):
        return "uses a remote helper (`<transport>::`), which can run commands"
    if kind == "scheme":
        return _scheme_url_problem(url)
    if kind == "scp":
        return _scp_problem(url)
    return None


def _scheme_url_problem(url: str) -> str | None:
    match = SCHEME_URL.fullmatch(url)
    assert match is not None
    scheme, rest = match.group(1).lower(), match.group(2)
    if scheme not in GIT_SCHEMES:
        return f"uses scheme {scheme!r} (allowed: {', '.join(GIT_SCHEMES)})"
    if any(c.isspace() for c in url):
        return "contains whitespace (percent-encode it)"
    authority = rest.split("/", 1)[0]
    if scheme == "file":
        return None if authority in ("", "localhost") else "file:// URLs must be local"
    return _authority_problem(authority)


def _authority_problem(authority: str) -> str | None:
    user, _, hostport = authority.rpartition("@")
    if user and not USER.fullmatch(user):
        return f"has an invalid user name {shown(user)}"
    host, port = hostport, ""
    if not hostport.endswith("]") and ":" in hostport:
        host, _, port = hostport.rpartition(":")
    if not HOST.fullmatch(host):
        return f"has an invalid host {shown(host)} (a host starts with a letter or digit)"
    if port and not PORT.fullmatch(port):
        return f"has an invalid port {shown(port)}"
    return None


def _scp_problem(url: str) -> str | None:
    address, _, path = url.partition(":")
    if any(c.isspace() for c in address):
        return "contains whitespace in the host part"
    problem = _authority_problem(address)
    if problem is not None:
        return problem
    if path.startswith("-"):
        return "has a path starting with '-'"
    return None


def is_remote_url(url: str) -> bool:
    """True for a URL git fetches over a transport; False for a local path."""
    return url_kind(url) != "local"


def is_archive(path: Path) -> bool:
    """True for a file name patchctl knows how to extract."""
    name = path.name.lower()
    return name.endswith(".zip") or any(name.endswith(s) for s in TAR_SUFFIXES)
