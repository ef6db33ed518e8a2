"""Import an existing series without rewriting its bytes.

Sources: a quilt `series` file (or a directory holding one, e.g. debian/patches) with its
patches, a `git format-patch` directory (*.patch in name order), or an mbox (split per message;
each message's bytes kept, `From ` line included). Each patch file is copied verbatim into the
series directory and recorded with `imported: true`; its pre/post trees come from applying it,
in order, onto the materialized upstream tree through a temporary index (strict: no fuzz, no
whitespace fixing). Headers (DEP-3, gbp-pq, mail) are only read, to fill title and provenance.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from email.header import decode_header, make_header
from itertools import pairwise
from pathlib import Path

from patchctl.errors import ConfigError, NotFound, PatchctlError
from patchctl.fsio import write_if_changed
from patchctl.git import Git, temp_index
from patchctl.patchapply import apply_to_index, conflict, drift_summary, patch_sha256
from patchctl.progress import Progress, or_null
from patchctl.series import PATCH_ID, Patch, Series
from patchctl.session import series_session
from patchctl.stack import compose, load_stack

QUILT_SERIES = "series"
# An mbox message starts at a `From ` line that looks like git's / mboxo's separator.
MBOX_FROM = re.compile(rb"^From \S+ .*\d{4}$")
NUMBER = re.compile(r"^([0-9]{4})-")
HEADER_END = re.compile(rb"^(---|diff |Index: |\+\+\+ |--- )")


@dataclass(frozen=True)
class Incoming:
    """One patch to import: its source name and exact bytes."""

    name: str
    data: bytes


# ----------------------------------------------------------------------------- reading sources


def read_source(source: Path) -> tuple[str, list[Incoming]]:
    """(kind, patches) of a quilt series, a format-patch directory or an mbox/patch file."""
    if source.is_dir():
        if (source / QUILT_SERIES).is_file():
            return "quilt", read_quilt(source / QUILT_SERIES)
        return "format-patch", read_patch_dir(source)
    if not source.is_file():
        raise NotFound(f"nothing to import at {source}")
    if source.name == QUILT_SERIES:
        return "quilt", read_quilt(source)
    return "mbox", split_mbox(source.read_bytes(), source.name)


def read_quilt(series_file: Path) -> list[Incoming]:
    """The patches a quilt series file lists, in order (only -p1, the quilt default)."""
    found = []
    for n, raw in enumerate(series_file.read_bytes().splitlines(), 1):
        words = raw.split(b"#", 1)[0].split()
        if not words:
            continue
        if any(w != b"-p1" for w in words[1:]):
            raise ConfigError(
                f"line {n}: unsupported patch options {b' '.join(words[1:])!r}",
                path=series_file,
                hint="only -p1 patches can be imported; refresh the patch with -p ab",
            )
        name = words[0].decode("utf-8")
        path = series_file.parent / name
        if not path.is_file():
            raise NotFound(f"{series_file}: line {n}: {path} does not exist")
        found.append(Incoming(name, path.read_bytes()))
    return found


def read_patch_dir(directory: Path) -> list[Incoming]:
    """The *.patch files of a format-patch directory, in name order."""
    files = sorted(p for p in directory.iterdir() if p.suffix == ".patch" and p.is_file())
    if not files:
        raise NotFound(f"no series file and no *.patch files in {directory}")
    return [Incoming(p.name, p.read_bytes()) for p in files]


def split_mbox(data: bytes, name: str) -> list[Incoming]:
    """Split an mbox into messages at `From ` separator lines; bytes kept exactly."""
    lines = data.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if MBOX_FROM.match(line.rstrip(b"\r\n"))]
    if not starts or starts[0] != 0:
        return [Incoming(name, data)]  # a single plain patch
    bounds = [*starts, len(lines)]
    messages = [b"".join(lines[a:b]) for a, b in pairwise(bounds)]
    return [Incoming(_subject_name(m) or f"{name}-{i}", m) for i, m in enumerate(messages, 1)]


# ----------------------------------------------------------------------------- metadata


def header_fields(data: bytes) -> dict[str, str]:
    """Mail / DEP-3 header fields before the diff, lowercased keys, folded lines joined.

    First occurrence wins; `<key>:first-line` holds a field's first line alone. Read-only.
    """
    fields: dict[str, str] = {}
    key: str | None = None
    for raw in data.splitlines():
        if HEADER_END.match(raw):
            break
        line = raw.decode("utf-8", "replace")
        if line[:1] in (" ", "\t") and key is not None:
            fields[key] += " " + line.strip()
            continue
        match = re.match(r"^([A-Za-z][A-Za-z0-9-]*):\s*(.*)$", line)
        key = match.group(1).lower() if match else None
        if match and key is not None and key not in fields:
            fields[key] = match.group(2).strip()
            fields[f"{key}:first-line"] = fields[key]
    return fields


def _subject(fields: dict[str, str]) -> str | None:
    # A mail Subject may be folded over lines; a DEP-3 Description's first line is the synopsis.
    raw = fields.get("subject") or fields.get("description:first-line")
    if not raw:
        return None
    text = str(make_header(decode_header(raw)))
    return re.sub(r"^\[[^\]]*\]\s*", "", text).strip() or None


def _subject_name(message: bytes) -> str | None:
    subject = _subject(header_fields(message))
    return None if subject is None else slug(subject)


def slug(text: str) -> str:
    """A file-name-safe slug (the NNNN- prefix is added by the caller)."""
    base = re.sub(r"\.(patch|diff)$", "", text.rsplit("/", 1)[-1])
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-.")
    return (base or "patch")[:63].rstrip("-.") or "patch"


def _status(fields: dict[str, str]) -> str | None:
    if "upstream-status" in fields:
        return fields["upstream-status"]
    forwarded = fields.get("forwarded")
    if forwarded is None:
        return None
    if forwarded.lower() == "no":
        return "Pending"
    if forwarded.lower() in ("not-needed", "not needed"):
        return "Inappropriate [not needed]"
    return f"Submitted [{forwarded}]"


def make_entry(incoming: Incoming, number: int, origin: str, taken: set[str]) -> Patch:
    """The series entry for one imported patch (id NNNN-slug, file <id>.patch)."""
    match = NUMBER.match(incoming.name)
    num = int(match.group(1)) if match else number
    rest = incoming.name[match.end() :] if match else incoming.name
    pid = f"{num:04d}-{slug(rest)}"
    while pid in taken:
        pid = f"{pid[:60]}-{len(taken)}"
    if not PATCH_ID.fullmatch(pid):
        raise ConfigError(f"cannot derive a valid id from {incoming.name!r} (got {pid!r})")
    fields = header_fields(incoming.data)
    return Patch(
        id=pid,
        file=f"{pid}.patch",
        title=_subject(fields) or slug(rest),
        upstream_status=_status(fields),
        origin=fields.get("origin") or f"{origin}/{incoming.name}",
        imported=True,
        sha256=patch_sha256(incoming.data),
    )


# ----------------------------------------------------------------------------- applying


@dataclass(frozen=True)
class Applied:
    """One imported patch applied in the temporary index: its trees and any offset hunks."""

    pre: str
    post: str
    drift: str | None  # git placed a hunk at an offset: strict `cleanroom apply` will refuse


def apply_chain(
    git: Git, base: str, patches: Sequence[tuple[Patch, bytes]], root: str = "."
) -> list[Applied]:
    """Apply each patch in order onto tree `base` in `git`; its trees and offset notes."""
    results = []
    with temp_index(git) as index:
        index.read_tree(base)
        current = base
        for patch, data in patches:
            outcome = apply_to_index(index, data, root)
            if not outcome.ok:
                raise conflict(
                    patch.id,
                    data,
                    outcome.stderr,
                    root,
                    onto=f" to the tree before it ({current})",
                    hint="nothing was written; fix the patch or import onto the upstream it needs",
                )
            post = index.write_tree()
            results.append(Applied(current, post, drift_summary(outcome.drift())))
            current = post
    return results


@dataclass(frozen=True)
class ImportResult:
    """The series with the imported entries appended, those entries, and offset notes."""

    series: Series
    added: tuple[Patch, ...]
    drift: dict[str, str]
    changed: tuple[Path, ...] = ()  # files whose bytes changed (import_series only)


def _last_tree(series: Series, base: str) -> str:
    if not series.patches:
        return base
    last = series.patches[-1]
    if last.post_tree is None:
        raise ConfigError(
            f"{last.id} has no post_tree: capture it before importing on top",
            path=series.path,
        )
    return last.post_tree


def _stack_base(series: Series, git: Git, upstream: str) -> str:
    """The tree imported patches go on when the series has none yet: the upstream tree, or
    for a series that extends another, the upstream with that series' patches applied."""
    composed, why = compose(load_stack(series), git, upstream)
    if composed is None:
        raise PatchctlError(why, hint="fix the extended series first (patchctl verify --all)")
    return composed


def import_patches(
    series: Series,
    source: Path,
    git: Git,
    base: str,
    progress: Progress | None = None,
    write: Callable[[Path, bytes], bool] = write_if_changed,
) -> ImportResult:
    """Copy the patches of `source` into the series (on top of the stack); nothing is saved."""
    kind, incoming = read_source(source)
    origin = f"{kind}:{source.name}"
    taken = set(load_stack(series).ids())
    start = len(series.patches) + 1
    entries = []
    for i, item in enumerate(incoming):
        entry = make_entry(item, start + i, origin, taken)
        taken.add(entry.id)
        entries.append((entry, item.data))
    prog = or_null(progress)
    prog.start("import", len(entries))
    applied = apply_chain(git, _last_tree(series, base), entries, series.root)
    done = []
    for (entry, data), result in zip(entries, applied, strict=True):
        write(series.dir / entry.file, data)
        done.append(replace(entry, pre_tree=result.pre, post_tree=result.post))
        prog.advance("import")
    prog.done("import")
    drift = {e.id: r.drift for (e, _), r in zip(entries, applied, strict=True) if r.drift}
    return ImportResult(series.with_patches((*series.patches, *done)), tuple(done), drift)


def import_series(
    series_path: Path, source: Path, workdir: Path | None = None, progress: Progress | None = None
) -> ImportResult:
    """`patchctl import SOURCE`: the patches of `source` on top of the stack, under the series
    and clean-room locks; series.yaml and the docs saved."""
    with series_session(series_path) as session:
        room = session.cleanroom(workdir)
        base = _stack_base(session.series, room.git, room.base_tree())
        result = import_patches(
            session.series, source, room.git, base, progress, session.write_patch
        )
        changed = session.save(result.series)
    return replace(result, changed=tuple(changed))
