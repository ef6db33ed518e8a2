"""Import an existing series without rewriting its bytes.

Sources: a quilt `series` file (or a directory holding one, e.g. debian/patches) with its
patches, a `git format-patch` directory (*.patch in name order), or an mbox (split per message;
each message's bytes kept, `From ` line included). Each patch file is copied verbatim into the
series directory and recorded with `imported: true`; its pre/post trees come from applying it,
in order, onto the materialized upstream tree as tree objects (patchapply.replay_tree on a
TreePatcher: no clean room, no whole index), as quilt would: exactly, else at an offset, else
with fuzz (never whitespace fixing). A patch that drifted is reported per hunk (fuzz named as
fuzz), or with `--refresh` regenerated to apply exactly (patchparts.py: its header kept); only
a conflict stops the import, and then nothing is written. Headers (DEP-3, gbp-pq, mail) are
only read, to fill title and provenance.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from email.header import decode_header, make_header
from itertools import pairwise
from pathlib import Path

from patchctl.errors import ConfigError, NotFound
from patchctl.fsio import write_if_changed
from patchctl.git import Git, scratch_repo
from patchctl.patchapply import Drift, TreePatcher, is_fuzz, patch_sha256, replay_tree
from patchctl.patchparts import regenerated
from patchctl.progress import Progress, or_null
from patchctl.series import PATCH_ID, Patch, Series
from patchctl.session import series_session

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
    """One imported patch applied to the tree before it: its trees and drifted hunks."""

    pre: str
    post: str
    hunks: tuple[Drift, ...] = ()  # offset / fuzz / mode: strict `cleanroom apply` will refuse

    @property
    def drift(self) -> str | None:
        """A one-line summary of the drift (fuzz named as fuzz), or None."""
        return drift_note(self.hunks)


def drift_note(hunks: Sequence[Drift]) -> str | None:
    """`fuzz in N hunk(s), offset in M hunk(s); first: hunk #K in FILE: WHY`, or None."""
    if not hunks:
        return None
    fuzz = sum(is_fuzz(d) for d in hunks)
    kinds = [f"fuzz in {fuzz} hunk(s)"] if fuzz else []
    if len(hunks) > fuzz:
        kinds.append(f"offset in {len(hunks) - fuzz} hunk(s)")
    first = next((d for d in hunks if is_fuzz(d)), hunks[0])
    at = f"hunk #{first.hunk} in " if first.hunk is not None else ""
    return f"{', '.join(kinds)}; first: {at}{first.file}: {first.why}"


def apply_chain(
    git: Git, base: str, patches: Sequence[tuple[Patch, bytes]], root: str = "."
) -> list[Applied]:
    """Apply each patch in order onto tree `base` in `git`, as quilt would (exactly, else at an
    offset, else with fuzz: patchapply.replay_tree); its trees and drifted hunks. A patch that does
    not apply even with fuzz is a conflict (exit 3) naming the patch, file and hunk."""
    results = []
    with TreePatcher(git) as patcher:
        current = base
        for patch, data in patches:
            replayed = replay_tree(
                patcher,
                current,
                data,
                root,
                patch.id,
                onto=f" to the tree before it ({current})",
                hint="nothing was written; fix the patch or import onto the upstream it needs",
            )
            results.append(Applied(current, replayed.post, replayed.drift))
            current = replayed.post
    return results


@dataclass(frozen=True)
class ImportResult:
    """The series with the imported entries appended, those entries, and offset notes."""

    series: Series
    added: tuple[Patch, ...]
    drift: dict[str, str]  # id -> drift_note (fuzz named as fuzz)
    changed: tuple[Path, ...] = ()  # files whose bytes changed (import_series only)
    hunks: dict[str, tuple[Drift, ...]] = field(default_factory=dict)  # id -> drifted hunks
    refreshed: tuple[str, ...] = ()  # ids whose diff was regenerated (`--refresh`)


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


def import_patches(
    series: Series,
    source: Path,
    git: Git,
    base: str,
    progress: Progress | None = None,
    write: Callable[[Path, bytes], bool] = write_if_changed,
    *,
    refresh: bool = False,
) -> ImportResult:
    """Copy the patches of `source` into the series (on top of the stack); nothing is saved.

    Drifted patches (offset, fuzz) are copied as they are and reported, or with `refresh`
    regenerated so that they apply exactly (their header kept)."""
    kind, incoming = read_source(source)
    origin = f"{kind}:{source.name}"
    taken = set(series.ids())
    start = len(series.patches) + 1
    entries = []
    for i, item in enumerate(incoming):
        entry = make_entry(item, start + i, origin, taken)
        taken.add(entry.id)
        entries.append((entry, item.data))
    prog = or_null(progress)
    prog.start("import", len(entries))
    applied = apply_chain(git, _last_tree(series, base), entries, series.root)
    if refresh:
        entries = _refreshed(git, entries, applied, series.root)
    done = []
    for (entry, data), result in zip(entries, applied, strict=True):
        write(series.dir / entry.file, data)
        done.append(replace(entry, pre_tree=result.pre, post_tree=result.post))
        prog.advance("import")
    prog.done("import")
    pairs = [(e.id, r) for (e, _), r in zip(entries, applied, strict=True) if r.hunks]
    return ImportResult(
        series.with_patches((*series.patches, *done)),
        tuple(done),
        {pid: str(r.drift) for pid, r in pairs},
        hunks={pid: r.hunks for pid, r in pairs},
        refreshed=tuple(pid for pid, _ in pairs) if refresh else (),
    )


def _refreshed(
    git: Git, entries: list[tuple[Patch, bytes]], applied: list[Applied], root: str
) -> list[tuple[Patch, bytes]]:
    """`import --refresh`: each drifted patch with its diff regenerated from the trees it
    produced (header and trailer kept, patchparts.regenerated) and the sha256 of those bytes."""
    out = []
    with scratch_repo([git.repo]) as scratch:
        for (entry, data), result in zip(entries, applied, strict=True):
            if result.hunks:
                data = regenerated(scratch, entry, data, result.pre, result.post, root)
                entry = replace(entry, sha256=patch_sha256(data))
            out.append((entry, data))
    return out


def import_series(
    series_path: Path,
    source: Path,
    workdir: Path | None = None,
    progress: Progress | None = None,
    *,
    refresh: bool = False,
) -> ImportResult:
    """`patchctl import SOURCE [--refresh]`: the patches of `source` on top of the stack, under
    the series and clean-room locks; series.yaml and the docs saved."""
    with series_session(series_path) as session:
        room = session.cleanroom(workdir)
        base = room.base_tree()
        result = import_patches(
            session.series, source, room.git, base, progress, session.write_patch, refresh=refresh
        )
        changed = session.save(result.series)
    return replace(result, changed=tuple(changed))
