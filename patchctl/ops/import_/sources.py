"""What `patchctl import` reads: a quilt `series` file (or a directory holding one, e.g.
debian/patches) with its patches, a `git format-patch` directory (*.patch in name order), or an
mbox (split per message by the mboxrd rules, see `split_mbox`), each patch's exact bytes; and
what their headers say (DEP-3, gbp-pq, mail: title and provenance, decoded, control characters
removed), made into series entries with unique ids. Nothing here writes or runs git.
"""

from __future__ import annotations

import email
import email.policy
import re
from dataclasses import dataclass
from email.errors import HeaderParseError
from email.header import decode_header, make_header
from itertools import pairwise
from pathlib import Path

from patchctl import allowlists
from patchctl.allowlists import PATCH_ID
from patchctl.errors import ConfigError, NotFound
from patchctl.limits import IMPORT_BYTES, PATCH_BYTES, human, read_bounded
from patchctl.series.gitapply import (
    patch_sha256,
)
from patchctl.series.model import Patch, read_patch_file

QUILT_SERIES = "series"
# An mbox separator ("From_ line"): `From <sender> <asctime date>`, e.g. git's
# `From <sha> Mon Sep 17 00:00:00 2001`. split_mbox also wants it at the start or after a
# blank line, and followed by a header field, so a body line that starts with "From " does
# not split a message (an mboxrd writer quotes such a line as `>From `).
MBOX_FROM = re.compile(
    rb"^From \S+ +(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct"
    rb"|Nov|Dec) +\d{1,2} \d{1,2}:\d{2}(?::\d{2})?(?: [A-Z]{1,5}| [+-]\d{4})? \d{4}"
    rb"(?: [+-]\d{4})?\r?$"
)
HEADER_FIELD = re.compile(rb"^[\x21-\x39\x3b-\x7e]+:")
QUOTED_FROM = re.compile(rb"^>+From ")
NUMBER = re.compile(r"^([0-9]{4})-")
# A series-file comment, as quilt and dpkg-source read one: from a `#` that starts the line or
# follows whitespace (a `#` inside a patch name, `fix-bug#123.patch`, is part of the name).
QUILT_COMMENT = re.compile(rb"(?:^|\s)#.*$")
HEADER_END = re.compile(rb"^(---|diff |Index: |\+\+\+ |--- )")
MAX_SUFFIX = 999  # ids tried per import entry before giving up (`<id>-2` ... `<id>-999`)


@dataclass(frozen=True)
class Incoming:
    """One patch to import: its source name and exact bytes."""

    name: str
    data: bytes


# ----------------------------------------------------------------------------- reading sources


def read_source(source: Path) -> tuple[str, list[Incoming]]:
    """(kind, patches) of a quilt series, a format-patch directory or an mbox/patch file;
    each patch checked to hold its diff as git apply will read it (`check_not_encoded`)."""
    kind, found = _read_source(source)
    for item in found:
        check_not_encoded(source, item)
        check_line_ends(source, item)
    return kind, found


def _read_source(source: Path) -> tuple[str, list[Incoming]]:
    if source.is_dir():
        if (source / QUILT_SERIES).is_file():
            return "quilt", read_quilt(source / QUILT_SERIES)
        return "format-patch", read_patch_dir(source)
    if not source.is_file():
        raise NotFound(f"nothing to import at {source}")
    if source.name == QUILT_SERIES:
        return "quilt", read_quilt(source)
    return "mbox", split_mbox(read_bounded(source, PATCH_BYTES, "patch or mbox"), source.name)


def check_not_encoded(source: Path, item: Incoming) -> None:
    """Refuse a patch whose diff is in a mail part with a transfer encoding that decoding
    changes (quoted-printable, base64): patch files are stored as they are and git apply
    reads them so, which would apply the encoded text (`=3D` for `=`) or nothing. A part
    whose decoding changes nothing (plain ASCII lines in quoted-printable) is kept."""
    if not TRANSFER_ENCODING.search(item.data):
        return  # the common case: no MIME transfer encoding at all
    message = email.message_from_bytes(item.data, policy=email.policy.compat32)
    for part in message.walk():
        encoding = str(part.get("Content-Transfer-Encoding", "")).strip().lower()
        if part.is_multipart() or encoding not in ("quoted-printable", "base64"):
            continue
        raw = str(part.get_payload(decode=False)).encode("ascii", "surrogateescape")
        decoded = part.get_payload(decode=True)
        if isinstance(decoded, bytes) and DIFF_START.search(decoded) and decoded != raw:
            raise ConfigError(
                f"{allowlists.shown(item.name)}: its diff is {encoding}-encoded (a MIME part), and "
                "git apply would read the encoded text",
                path=source,
                hint="import the patch as git format-patch wrote it, or an mbox that "
                "`b4 am` decoded",
            )


def check_line_ends(source: Path, item: Incoming) -> None:
    """Refuse a patch whose diff header lines end in CRLF: git writes them with LF whatever
    the files hold, so the whole text was converted on the way (a CRLF mbox, a Windows
    checkout), and git apply would write the CR bytes into the files it creates (git am
    strips them; a file's own CRLF lines stay CRLF inside an LF patch)."""
    found = DIFF_HEADER_CRLF.search(item.data)
    if found is not None:
        line = item.data.count(b"\n", 0, found.start()) + 1
        raise ConfigError(
            f"{allowlists.shown(item.name)}: its line ends were converted to CRLF (line {line} "
            "is a diff header ending in CR LF), and git apply would write the CR bytes into "
            "the files",
            path=source,
            hint="convert it back to LF line ends (e.g. `dos2unix`), or import the patch as "
            "git format-patch wrote it",
        )


# `diff --git` and `@@` lines: never a hunk's content line, and git ends them with LF (a
# CR at the end of a file name is quoted; one after a hunk's function context is trimmed).
DIFF_HEADER_CRLF = re.compile(rb"^(?:diff --git |@@ -)[^\n]*\r\n", re.MULTILINE)
TRANSFER_ENCODING = re.compile(rb"^content-transfer-encoding:", re.IGNORECASE | re.MULTILINE)
DIFF_START = re.compile(rb"^(?:diff --git |--- |@@ -)", re.MULTILINE)


def _read_all(source: Path, paths: list[tuple[str, Path]]) -> list[Incoming]:
    """Each (name, path) read within the patch limit, and all of them within the import limit
    (a series of many files, each under the patch limit, can still be too much): checked as
    the files are read, so memory stays bounded."""
    limit = IMPORT_BYTES.value()
    found: list[Incoming] = []
    total = 0
    for name, path in paths:
        found.append(Incoming(name, read_patch_file(path)))
        total += len(found[-1].data)
        if total > limit:
            raise ConfigError(
                f"its first {len(found)} patch files hold {human(total)}, more than one import "
                f"reads ({human(limit)})",
                path=source,
                hint=IMPORT_BYTES.hint(),
            )
    return found


def read_quilt(series_file: Path) -> list[Incoming]:
    """The patches a quilt series file lists, in order (only -p1, the quilt default); `#`
    starts a comment at the start of a line or after whitespace (QUILT_COMMENT)."""
    found: list[tuple[str, Path]] = []
    folder = series_file.parent.resolve()
    listing = read_bounded(series_file, PATCH_BYTES, "quilt series file")
    for n, raw in enumerate(listing.splitlines(), 1):
        words = QUILT_COMMENT.sub(b"", raw.strip()).split()
        if not words:
            continue
        if any(w != b"-p1" for w in words[1:]):
            name, options = (_shown(w) for w in (words[0], b" ".join(words[1:])))
            raise ConfigError(
                f"line {n}: {name}: unsupported patch options {options}",
                path=series_file,
                hint=(
                    "patchctl imports -p1 patches only (quilt's default: paths under one leading "
                    "directory, a/ and b/); rewrite the patch as -p1 (with quilt: `quilt push` "
                    "to it, then `quilt refresh -p ab`) and drop the options from its line"
                ),
            )
        name = _quilt_name(series_file, n, words[0])
        path = series_file.parent / name
        if not path.resolve().is_relative_to(folder):
            raise ConfigError(
                f"line {n}: {allowlists.shown(name)} lies outside {folder}",
                path=series_file,
                hint="a quilt series names patches inside its own directory",
            )
        if not path.is_file():
            what = "is not a regular file" if path.exists() else "does not exist"
            raise NotFound(f"{series_file}: line {n}: {path} {what}")
        found.append((name, path))
    return _read_all(series_file, found)


def _shown(word: bytes) -> str:
    """A series-file word for a message: decoded, unsafe characters made visible, bounded."""
    return allowlists.printable(word.decode("utf-8", "replace")[:200])


def _quilt_name(series_file: Path, n: int, word: bytes) -> str:
    try:
        name = word.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(
            f"line {n}: the patch name is not UTF-8", path=series_file, hint="rename the patch"
        ) from None
    if name.startswith("/") or ".." in name.split("/") or allowlists.unsafe_chars(name):
        raise ConfigError(
            f"line {n}: {allowlists.shown(name)} is not a relative name inside the series "
            "directory",
            path=series_file,
            hint="name patches relative to the quilt series file, without '..'",
        )
    return name


def read_patch_dir(directory: Path) -> list[Incoming]:
    """The *.patch files of a format-patch directory, in name order."""
    files = sorted(p for p in directory.iterdir() if p.suffix == ".patch" and p.is_file())
    if not files:
        raise NotFound(f"no series file and no *.patch files in {directory}")
    folder = directory.resolve()
    for path in files:
        if not path.resolve().is_relative_to(folder):
            raise ConfigError(
                f"{allowlists.shown(path.name)} is a symlink to {path.resolve()}, outside {folder}",
                hint="import only patches that live in the directory",
            )
    return _read_all(directory, [(p.name, p) for p in files])


def split_mbox(data: bytes, name: str) -> list[Incoming]:
    """Split an mbox into messages by the mboxrd rules.

    A message starts at a From_ line (MBOX_FROM) that opens the file or follows a blank line,
    and is followed by a header field. Each message keeps its bytes (its From_ line included)
    with one change, mboxrd's unquoting: a line `>From `, `>>From `, ... loses one `>`. That
    line was quoted by whoever wrote the mbox; a diff never contains one (hunk lines start
    with ' ', '+', '-' or '\\'), so the bytes `git apply` reads are never changed. A file
    that does not start with a From_ line is one plain patch, kept byte for byte.
    """
    lines = data.splitlines(keepends=True)
    starts = [i for i in range(len(lines)) if _is_separator(lines, i)]
    if not starts or starts[0] != 0:
        return [Incoming(name, data)]  # a single plain patch
    bounds = [*starts, len(lines)]
    messages = [_unquote_from(lines[a:b]) for a, b in pairwise(bounds)]
    return [Incoming(_subject_name(m) or f"{name}-{i}", m) for i, m in enumerate(messages, 1)]


def _is_separator(lines: list[bytes], i: int) -> bool:
    if not MBOX_FROM.match(lines[i].rstrip(b"\r\n")):
        return False
    after_blank = i == 0 or lines[i - 1].strip(b"\r\n") == b""
    header_next = i + 1 < len(lines) and bool(HEADER_FIELD.match(lines[i + 1]))
    return after_blank and header_next


def _unquote_from(lines: list[bytes]) -> bytes:
    return b"".join(
        line[1:] if n > 0 and QUOTED_FROM.match(line) else line for n, line in enumerate(lines)
    )


# ----------------------------------------------------------------------------- metadata


def header_fields(data: bytes) -> dict[str, str]:
    """Mail / DEP-3 header fields before the diff, lowercased keys, folded lines joined.

    First occurrence wins; `<key>:first-line` holds a field's first line alone. Read-only.
    """
    parts: dict[str, list[str]] = {}  # a field's lines, joined once at the end (linear)
    firsts: dict[str, str] = {}
    key: str | None = None
    for raw in data.splitlines():
        if HEADER_END.match(raw):
            break
        line = raw.decode("utf-8", "replace")
        if line[:1] in (" ", "\t") and key is not None:
            parts[key].append(line.strip())
            continue
        match = FIELD.match(line)
        key = match.group(1).lower() if match else None
        if match and key is not None and key not in firsts:
            firsts[key] = match.group(2).strip()
            parts[key] = [firsts[key]]
    fields: dict[str, str] = {}
    for name, first in firsts.items():
        fields[name] = " ".join(parts[name])
        fields[f"{name}:first-line"] = first
    return fields


FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):\s*(.*)$")


def _subject(fields: dict[str, str]) -> str | None:
    # A mail Subject may be folded over lines; a DEP-3 Description's first line is the synopsis.
    raw = fields.get("subject") or fields.get("description:first-line")
    if not raw:
        return None
    text = allowlists.one_line(_decode_words(raw), limit=1 << 16)
    return allowlists.one_line(re.sub(r"^\[[^\]]*\]\s*", "", text)) or None


def _decode_words(raw: str) -> str:
    """RFC 2047 encoded words decoded (`=?UTF-8?q?Caf=C3=A9?=`); the raw text if malformed."""
    try:
        return str(make_header(decode_header(raw)))
    except (HeaderParseError, LookupError, UnicodeError, ValueError):
        return raw


def _subject_name(message: bytes) -> str | None:
    subject = _subject(header_fields(message))
    return None if subject is None else slug(subject)


def slug(text: str) -> str:
    """A file-name-safe slug (the NNNN- prefix is added by the caller)."""
    base = re.sub(r"\.(patch|diff)$", "", text.rsplit("/", 1)[-1])
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-.")
    return (base or "patch")[:63].rstrip("-.") or "patch"


# DEP-3's fields, to tell a DEP-3 header from a plain mail header (which says nothing of
# the patch's upstream status).
DEP3_FIELDS = ("description", "origin", "forwarded", "bug", "applied-upstream", "author")


def _status(fields: dict[str, str]) -> str | None:
    """Upstream-Status (OE's vocabulary) from an explicit field or DEP-3, as DEP-3 defines it.

    - `Origin: upstream, <where>` (cherry-picked from upstream) and `Origin: backport, <where>`
      (an upstream change adapted to this version), and `Applied-Upstream: <where>`, say the
      change is upstream's already: `Backport [<where>]`;
    - `Forwarded: no` is `Pending`, `Forwarded: not-needed` (vendor specific) is
      `Inappropriate [not needed]`, any other value (a URL, "yes") is `Submitted [<value>]`;
    - without `Forwarded:`, DEP-3 implies "yes" when a `Bug:` field is present
      (`Submitted [<bug>]`) and "no" otherwise (`Pending`);
    - a header with no DEP-3 field at all (a plain mail header) has no status (None).
    """
    if "upstream-status" in fields:
        return fields["upstream-status"]
    category, _, where = fields.get("origin", "").partition(",")
    if category.strip().lower() in ("upstream", "backport"):
        return _bracketed("Backport", where.strip())
    if fields.get("applied-upstream"):
        return _bracketed("Backport", fields["applied-upstream"])
    forwarded = fields.get("forwarded")
    if forwarded is None:
        if not any(key in fields for key in DEP3_FIELDS if key != "author"):
            return None
        return _bracketed("Submitted", fields["bug"]) if fields.get("bug") else "Pending"
    if forwarded.lower() == "no":
        return "Pending"
    if forwarded.lower() in ("not-needed", "not needed"):
        return "Inappropriate [not needed]"
    return _bracketed("Submitted", forwarded)


def _bracketed(status: str, where: str) -> str:
    return f"{status} [{where}]" if where else status


def unique_id(base: str, taken: set[str]) -> str:
    """`base`, else `base-2`, `base-3`, ... (cut to fit NNNN-slug): the first id not in `taken`
    (compared case-insensitively, as the file names they become). Gives up after MAX_SUFFIX."""
    folded = {t.casefold() for t in taken}
    if base.casefold() not in folded:
        return base
    for n in range(2, MAX_SUFFIX + 1):
        suffix = f"-{n}"
        candidate = base[: 68 - len(suffix)] + suffix  # NNNN- plus at most 63
        if candidate.casefold() not in folded:
            return candidate
    raise ConfigError(
        f"no free id for {base!r}: {base}-2 ... {base}-{MAX_SUFFIX} are all taken",
        hint="rename the patches to import",
    )


def make_entry(incoming: Incoming, number: int, origin: str, taken: set[str]) -> Patch:
    """The series entry for one imported patch (id NNNN-slug, file <id>.patch).

    NNNN is the number a top-level name starts with (`0007-fix.patch`: a format-patch
    directory, a flat quilt series) when that is not below the patch's place in the stack
    (`number`), else that place: a second numbered series imported on top continues the
    numbering instead of restarting it. A number inside a nested name
    (`features/all/lockdown/0001-x.patch`: numbered within its own folder) is dropped, so ids
    never nest numbers (`0121-x`, not `0121-0001-x`).
    """
    match = NUMBER.match(incoming.name)
    num = int(match.group(1)) if match and int(match.group(1)) >= number else number
    rest = NUMBER.sub("", incoming.name.rsplit("/", 1)[-1], count=1)
    pid = unique_id(f"{num:04d}-{slug(rest)}", taken)
    if not PATCH_ID.fullmatch(pid):
        raise ConfigError(
            f"cannot derive a valid id from {allowlists.shown(incoming.name)} (got {pid!r})",
            hint="the series holds at most 9999 patches; renumber the patches to import",
        )
    fields = header_fields(incoming.data)
    return Patch(
        id=pid,
        file=f"{pid}.patch",
        title=_subject(fields) or slug(rest),
        upstream_status=allowlists.one_line(_status(fields) or "") or None,
        origin=allowlists.one_line(fields.get("origin") or f"{origin}/{incoming.name}"),
        imported=True,
        sha256=patch_sha256(incoming.data),
    )
