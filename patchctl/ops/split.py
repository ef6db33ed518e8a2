"""`patchctl split ID --part NEW_ID=PATTERN[,PATTERN...] ...`: one patch becomes several
consecutive patches, by the files it touches and, within a file, by hunks.

The split works on trees, not on text: the patch's recorded `pre_tree` and `post_tree` (the
patch file must turn the one into the other exactly, as `verify` checks) and the files that
differ between them. Each part claims files by glob patterns over their paths (relative to
the series root) or hunks of one file by number (`PATH:N` or `PATH:N-M`, numbered as the
canonical diff of that file shows them: `patchctl split ID --list`). Part k's post-tree is the
pre-tree with the files and hunks of parts 1..k applied; the last one must be the original
`post_tree`, checked before anything is written. Each part's bytes are then made from its two
trees the way capture makes them (patchfile.py), and each part must apply strictly to its
pre-tree giving its post-tree. An imported patch keeps its own header and trailer (the
subject gets the part's suffix or title) with its diff regenerated, as `refresh` does.

Rules: every file and hunk goes to exactly one part. A part given without patterns
(`--part NEW_ID`) takes everything the others do not claim (at most one such part); without
one, anything unclaimed is refused. A pattern that matches nothing, a file or hunk claimed by
two parts, a part left empty, an id that is taken (here or in a series that extends this
one): all refused before any write (SplitRefused, exit 5, naming the input); so is a part
file that exists already (DirtyTree, exit 8), as `new` refuses one.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from patchctl import allowlists
from patchctl.errors import SplitRefused
from patchctl.fsio import check_writable, refuse_overwrite
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.index import temp_index
from patchctl.gitlayer.objects import scratch_repo
from patchctl.limits import SERIES_BYTES, read_bounded
from patchctl.progress import notice
from patchctl.room.cleanroom import Cleanroom, default_workdir, load_cleanroom
from patchctl.series.docs import render_docs
from patchctl.series.gitapply import TreePatcher, patch_sha256, strict_apply
from patchctl.series.model import (
    Patch,
    Series,
    check_savable,
    load_series,
    read_patch_file,
)
from patchctl.series.parts import split_patch
from patchctl.series.patchfile import diff_trees, render_patch
from patchctl.series.stack import extending, load_stack
from patchctl.txn.session import SeriesSession, series_session

HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
HUNK_SELECTOR = re.compile(r"(?P<path>.+):(?P<first>[1-9][0-9]*)(?:-(?P<last>[1-9][0-9]*))?")
SUBJECT = re.compile(rb"^Subject:[ \t]*((?:\[[^\]\r\n]*\][ \t]*)*)")
TEXT_MODES = ("100644", "100755")
K = TypeVar("K")


@dataclass(frozen=True)
class PartSpec:
    """One part as given: its new id, its patterns (none: the rest) and an optional title."""

    id: str
    patterns: tuple[str, ...] = ()
    title: str | None = None


@dataclass(frozen=True)
class Hunk:
    """One hunk of a file's canonical diff: where its old lines start in the pre-file."""

    number: int
    header: str
    start: int  # index of its first old line in the pre-file's lines
    old: bytes
    new: bytes


@dataclass(frozen=True)
class Change:
    """One file the patch changes: its entries before and after, and its hunks when it is a
    text file modified in place (same mode), which alone can be split by hunk."""

    path: str  # relative to the series root
    tree_path: str
    pre: tuple[str, str] | None  # (mode, object id)
    post: tuple[str, str] | None
    hunks: tuple[Hunk, ...] = ()


@dataclass(frozen=True)
class Part:
    """A planned part: what it claims, its trees and its bytes."""

    patch: Patch
    files: tuple[str, ...]  # whole files (root-relative paths)
    hunks: tuple[tuple[str, int], ...]  # (path, hunk number)
    data: bytes


@dataclass(frozen=True)
class SplitResult:
    """What `patchctl split` did (or, with `dry_run`, would do)."""

    original: Patch
    parts: tuple[Part, ...]
    removed: Path | None
    changed: tuple[Path, ...]
    dry_run: bool = False


def refused(message: str, hint: str | None = None) -> SplitRefused:
    """The error of an invalid split: names the input (`--part`)."""
    return SplitRefused(message, key="--part", hint=hint)


# ----------------------------------------------------------------------------- the input


def parse_part(text: str) -> PartSpec:
    """`NEW_ID=PATTERN[,PATTERN...]`, or `NEW_ID` alone (the part that takes the rest)."""
    pid, sep, rest = text.partition("=")
    patterns = tuple(p.strip() for p in rest.split(",")) if sep else ()
    if sep and (not patterns or any(not p for p in patterns)):
        raise refused(f"{allowlists.shown(text)}: an empty pattern", hint="NEW_ID=GLOB[,GLOB...]")
    return PartSpec(pid.strip(), patterns)


def read_parts(path: Path) -> list[PartSpec]:
    """`--parts-from FILE`: one `--part` value per line (blank lines and `#` lines skipped),
    so a long split (many hunks) can be kept, reviewed and rerun."""
    raw = read_bounded(path, SERIES_BYTES, "parts file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SplitRefused("is not UTF-8 text", path=path, key="--parts-from") from None
    lines = [line.strip() for line in text.splitlines()]
    return [parse_part(line) for line in lines if line and not line.startswith("#")]


def with_titles(specs: Sequence[PartSpec], titles: Sequence[str]) -> list[PartSpec]:
    """The parts with the titles `--title NEW_ID=TEXT` gives them (each id must be a part)."""
    given: dict[str, str] = {}
    for item in titles:
        pid, sep, title = item.partition("=")
        if not sep or pid not in {s.id for s in specs}:
            raise SplitRefused(
                f"{allowlists.shown(item)} names no part", key="--title", hint="--title NEW_ID=TEXT"
            )
        given[pid] = title.strip()
    return [replace(s, title=given.get(s.id)) for s in specs]


def check_specs(series: Series, original: Patch, specs: Sequence[PartSpec]) -> None:
    """Ids, titles and part files valid and free, at least two parts, one rest part at most."""
    if len(specs) < 2:
        raise refused("a split needs at least two parts", hint="give --part twice or more")
    ids = [s.id for s in specs]
    taken = set(load_stack(series).ids()) - {original.id}
    for spec in specs:
        problem = allowlists.patch_id_problem(spec.id)
        if problem is not None:
            raise refused(f"{allowlists.shown(spec.id)} {problem}", hint="e.g. 0079-fix")
        if spec.id in taken or ids.count(spec.id) > 1:
            raise refused(f"patch id {spec.id!r} is already taken")
        if spec.title is not None and (spec.title == "" or allowlists.text_problem(spec.title)):
            title = allowlists.shown(spec.title)
            raise SplitRefused(f"{title} is not a one-line title", key="--title")
        target = series.dir / f"{spec.id}.patch"
        if spec.id != original.id and (target.exists() or target.is_symlink()):
            raise refuse_overwrite(target)
    if sum(1 for s in specs if not s.patterns) > 1:
        raise refused("only one part may take the rest (a part without patterns)")
    for other in extending(series):
        clash = sorted(set(ids) & set(other.ids()))
        if clash:
            raise refused(
                f"patch id {clash[0]!r} is taken in series {other.name}, which extends "
                f"{series.name}: its stack would hold the id twice",
                hint="choose ids that are free in both series",
            )


# ----------------------------------------------------------------------------- the changes


def lines_of(data: bytes) -> list[bytes]:
    """`data` cut after each LF only (a CR or form feed inside a line stays in it)."""
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    return lines + ([parts[-1]] if parts[-1] else [])


def parse_hunks(diff: bytes) -> tuple[Hunk, ...]:
    """The hunks of one file's canonical diff (a binary diff has none)."""
    hunks: list[Hunk] = []
    lines = lines_of(diff)
    i = 0
    while i < len(lines):
        m = HUNK_HEADER.match(lines[i])
        if m is None:
            i += 1
            continue
        old_start, old_count = int(m[1]), 1 if m[2] is None else int(m[2])
        old: list[bytes] = []
        new: list[bytes] = []
        i += 1
        last: list[list[bytes]] = []
        while i < len(lines) and lines[i][:1] in (b" ", b"-", b"+", b"\\"):
            line, kind = lines[i], lines[i][:1]
            if kind == b"\\":
                for side in last:
                    side[-1] = side[-1].removesuffix(b"\n")
            else:
                last = [old, new] if kind == b" " else [old] if kind == b"-" else [new]
                for side in last:
                    side.append(line[1:])
            i += 1
        start = old_start - 1 if old_count > 0 else old_start
        header = m[0].decode("ascii")
        hunks.append(Hunk(len(hunks) + 1, header, start, b"".join(old), b"".join(new)))
    return tuple(hunks)


def with_hunks(pre: bytes, hunks: Sequence[Hunk]) -> bytes:
    """The pre-file with `hunks` applied (each at its own place in the pre-file)."""
    lines = lines_of(pre)
    for hunk in sorted(hunks, key=lambda h: h.start, reverse=True):
        count = len(lines_of(hunk.old))
        if b"".join(lines[hunk.start : hunk.start + count]) != hunk.old:
            raise refused(f"hunk {hunk.header} does not match its file; run `patchctl verify`")
        lines[hunk.start : hunk.start + count] = lines_of(hunk.new)
    return b"".join(lines)


def load_changes(git: Git, series: Series, pre: str, post: str) -> list[Change]:
    """The files that differ between `pre` and `post`, with hunks for in-place text edits."""
    prefix = "" if series.root in (".", "") else series.root.strip("/") + "/"
    before, after = git.tree_entries(pre), git.tree_entries(post)
    changes = []
    for name in git.changed_paths(pre, post):
        a, b = before.get(name), after.get(name)
        old = None if a is None else (a.split()[0], a.split()[1])
        new = None if b is None else (b.split()[0], b.split()[1])
        hunks: tuple[Hunk, ...] = ()
        if old and new and old[0] == new[0] and old[0] in TEXT_MODES:
            hunks = parse_hunks(diff_trees(git, pre, post, series.root, (name,)))
        changes.append(Change(name.removeprefix(prefix), name, old, new, hunks))
    return changes


# ----------------------------------------------------------------------------- the claims


@dataclass
class Claims:
    """Which part claims each whole file and each hunk (by part index)."""

    files: dict[str, int]
    hunks: dict[tuple[str, int], int]


def matches(pattern: str, path: str) -> bool:
    """A glob over the whole path (`*` crosses `/`), or a directory and all below it."""
    return fnmatch.fnmatchcase(path, pattern) or path.startswith(pattern.rstrip("/") + "/")


def claim(specs: Sequence[PartSpec], changes: Sequence[Change]) -> Claims:
    """Each part's files and hunks; the rest to the part without patterns (if any)."""
    by_path = {c.path: c for c in changes}
    claims = Claims({}, {})
    for index, spec in enumerate(specs):
        for pattern in spec.patterns:
            selector = HUNK_SELECTOR.fullmatch(pattern)
            if selector is not None and selector["path"] in by_path:
                _claim_hunks(claims, index, spec, by_path[selector["path"]], selector)
                continue
            found = [c.path for c in changes if matches(pattern, c.path)]
            if not found:
                raise refused(
                    f"{spec.id}: pattern {allowlists.shown(pattern)} matches no file of the patch",
                    hint="`patchctl split ID --list` shows its files and hunks",
                )
            for path in found:
                _take(claims.files, path, index, path)
    _check_overlap(claims, specs)
    _claim_rest(claims, specs, changes)
    return claims


def _claim_hunks(
    claims: Claims, index: int, spec: PartSpec, change: Change, selector: re.Match[str]
) -> None:
    first = int(selector["first"])
    last = int(selector["last"] or first)
    if not change.hunks:
        raise refused(
            f"{spec.id}: {change.path} cannot be split by hunks (new, deleted, binary or a "
            "mode change)",
            hint=f"claim the whole file: {change.path}",
        )
    if last < first or last > len(change.hunks):
        raise refused(
            f"{spec.id}: {allowlists.shown(selector[0])}: {change.path} "
            f"has hunks 1-{len(change.hunks)}"
        )
    for number in range(first, last + 1):
        _take(claims.hunks, (change.path, number), index, selector[0])


def _take(table: dict[K, int], key: K, index: int, what: str) -> None:
    held = table.get(key)
    if held is not None and held != index:
        raise refused(f"{what} is claimed by two parts (#{held + 1} and #{index + 1})")
    table[key] = index


def _check_overlap(claims: Claims, specs: Sequence[PartSpec]) -> None:
    """A file claimed whole by one part and by hunks in another is claimed twice."""
    for (path, _number), index in claims.hunks.items():
        whole = claims.files.get(path)
        if whole is not None and whole != index:
            raise refused(
                f"{path} is claimed by two parts ({specs[whole].id} and {specs[index].id})"
            )


def _claim_rest(claims: Claims, specs: Sequence[PartSpec], changes: Sequence[Change]) -> None:
    rest = next((i for i, s in enumerate(specs) if not s.patterns), None)
    left: list[str] = []
    for change in changes:
        numbers = [n for (p, n) in claims.hunks if p == change.path]
        if change.path in claims.files:
            continue
        if not numbers:
            left.append(change.path)
            if rest is not None:
                claims.files[change.path] = rest
            continue
        for hunk in change.hunks:
            if hunk.number not in numbers:
                left.append(f"{change.path}:{hunk.number}")
                if rest is not None:
                    claims.hunks[(change.path, hunk.number)] = rest
    if left and rest is None:
        shown = ", ".join(left[:8]) + (" ..." if len(left) > 8 else "")
        raise refused(
            f"no part claims {shown}",
            hint="add them to a part, or add a part without patterns (--part NEW_ID) for the rest",
        )
    for index, spec in enumerate(specs):
        if index not in claims.files.values() and index not in claims.hunks.values():
            raise refused(f"part {spec.id} would be empty")


# ----------------------------------------------------------------------------- trees and bytes


def part_trees(
    git: Git, pre: str, changes: Sequence[Change], claims: Claims, count: int
) -> list[str]:
    """The post-tree of each part: `pre` with the files and hunks of parts 1..k applied."""
    split = _split_files(changes, claims)
    blobs = dict(
        zip([c.path for c in split], git.cat_blobs([c.pre[1] for c in split if c.pre]), strict=True)
    )
    trees = []
    with temp_index(git) as index:
        index.read_tree(pre)
        for k in range(count):
            entries: dict[bytes, tuple[str, str]] = {}
            gone: list[bytes] = []
            for change in changes:
                entry = _entry_at(git, change, claims, k, blobs.get(change.path))
                if entry is None:
                    gone.append(change.tree_path.encode("utf-8", "surrogateescape"))
                else:
                    entries[change.tree_path.encode("utf-8", "surrogateescape")] = entry
            index.remove_entries(gone, len(pre))
            index.add_entries(entries)
            trees.append(index.write_tree())
    return trees


def _split_files(changes: Sequence[Change], claims: Claims) -> list[Change]:
    """The files whose hunks go to more than one part, in order."""
    return [
        c
        for c in changes
        if c.pre is not None and len({i for (p, _), i in claims.hunks.items() if p == c.path}) > 1
    ]


def _entry_at(
    git: Git, change: Change, claims: Claims, k: int, pre_bytes: bytes | None
) -> tuple[str, str] | None:
    """The file's entry after parts 0..k (None: absent)."""
    owner = claims.files.get(change.path)
    if owner is not None:
        return change.post if owner <= k else change.pre
    mine = [(n, i) for (p, n), i in claims.hunks.items() if p == change.path]
    done = [h for h in change.hunks if any(n == h.number and i <= k for n, i in mine)]
    if len(done) == len(change.hunks):
        return change.post
    if not done or pre_bytes is None or change.pre is None:
        return change.pre
    return change.pre[0], git.write_blob(with_hunks(pre_bytes, done))


def subject_with(header: bytes, suffix: str, title: str | None) -> bytes:
    """A kept header whose `Subject:` line gets `suffix`, or `title` after its [tags]."""
    lines = header.splitlines(keepends=True)
    for i, line in enumerate(lines):
        m = SUBJECT.match(line)
        if m is None:
            continue
        end = i
        while end + 1 < len(lines) and lines[end + 1][:1] in (b" ", b"\t"):
            end += 1
        if title is not None:
            eol = b"\r\n" if lines[end].endswith(b"\r\n") else b"\n"
            lines[i : end + 1] = [m[0] + title.encode("utf-8") + eol]
        else:
            body = lines[end].rstrip(b"\r\n")
            lines[end] = body + suffix.encode("utf-8") + lines[end][len(body) :]
        return b"".join(lines)
    return header


def part_bytes(
    scratch: Git, series: Series, part: Patch, original: bytes, trees: tuple[str, str]
) -> bytes:
    """A part's file bytes: capture's for a patch patchctl wrote; for an imported one, its
    own header (subject marked) and trailer around the regenerated diff."""
    diff = diff_trees(scratch, trees[0], trees[1], series.root)
    if not part.imported:
        return render_patch(part, diff)
    parts = split_patch(original)
    return parts.header + diff + parts.trailer


def markers_of(patch: Patch, datas: Sequence[bytes]) -> list[tuple[str, ...]]:
    """Each marker goes to the first part whose diff adds a line holding it (else the last)."""
    owned: list[list[str]] = [[] for _ in datas]
    for marker in patch.markers:
        needle = marker.encode("utf-8")
        hits = [
            k
            for k, data in enumerate(datas)
            if any(
                line.startswith(b"+") and not line.startswith(b"+++ ") and needle in line
                for line in split_patch(data).diff.splitlines()
            )
        ]
        owned[hits[0] if hits else len(datas) - 1].append(marker)
    return [tuple(m) for m in owned]


# ----------------------------------------------------------------------------- the plan


def checked_trees(room: Cleanroom, series: Series, patch: Patch) -> tuple[str, str, bytes]:
    """(pre_tree, post_tree, file bytes) of `patch`: recorded, readable, and the file turns
    the one into the other exactly; else refused before any work."""
    pre, post = patch.pre_tree, patch.post_tree
    if pre is None or post is None or not (room.git.has_tree(pre) and room.git.has_tree(post)):
        raise refused(
            f"{patch.id} has no recorded pre_tree/post_tree that {room.path} can read",
            hint=f"run `patchctl cleanroom apply` and `patchctl capture {patch.id}` (or verify)",
        )
    data = read_patch_file(series.patch_path(patch))
    with TreePatcher(room.git) as patcher:
        made = strict_apply(patcher, patch, data, series.root, pre)
    if made != post:
        raise refused(
            f"{patch.id}.patch does not turn its pre_tree into its post_tree ({made[:12]} is "
            f"not {post[:12]})",
            hint="run `patchctl verify` and fix the patch before splitting it",
        )
    return pre, post, data


def plan_split(
    room: Cleanroom, series: Series, patch_id: str, specs: Sequence[PartSpec]
) -> list[Part]:
    """Every part's entry and bytes, checked: the last post-tree is the original's and each
    part applies strictly to the tree before it. Writes only git objects."""
    original = load_stack(series).own_entry(patch_id).patch
    check_specs(series, original, specs)
    pre, post, data = checked_trees(room, series, original)
    changes = load_changes(room.git, series, pre, post)
    claims = claim(specs, changes)
    trees = [pre, *part_trees(room.git, pre, changes, claims, len(specs))]
    if trees[-1] != post:
        raise refused(f"the parts give tree {trees[-1][:12]}, not {post[:12]} (a bug)")
    for k, spec in enumerate(specs):
        if trees[k] == trees[k + 1]:
            raise refused(f"part {spec.id} would be empty")
    entries = [_entry(original, spec, k, len(specs), trees) for k, spec in enumerate(specs)]
    with scratch_repo([room.path]) as scratch:
        datas = [
            _bytes(scratch, series, entry, data, specs[k], k, len(specs))
            for k, entry in enumerate(entries)
        ]
    markers = markers_of(original, datas)
    parts = []
    with TreePatcher(room.git) as patcher:
        for k, entry in enumerate(entries):
            sha = patch_sha256(datas[k]) if entry.imported else None
            entry = replace(entry, markers=markers[k], sha256=sha)
            made = strict_apply(patcher, entry, datas[k], series.root, trees[k])
            assert made == trees[k + 1], (entry.id, made, trees[k + 1])
            files, hunks = _claimed(claims, k)
            parts.append(Part(entry, files, hunks, datas[k]))
    return parts


def _entry(original: Patch, spec: PartSpec, k: int, n: int, trees: list[str]) -> Patch:
    title = spec.title or f"{original.title or original.id} ({k + 1}/{n})"
    return replace(
        original,
        id=spec.id,
        file=original.file if spec.id == original.id else f"{spec.id}.patch",
        title=title,
        pre_tree=trees[k],
        post_tree=trees[k + 1],
    )


def _bytes(
    scratch: Git, series: Series, entry: Patch, data: bytes, spec: PartSpec, k: int, n: int
) -> bytes:
    out = part_bytes(scratch, series, entry, data, (entry.pre_tree or "", entry.post_tree or ""))
    if not entry.imported:
        return out
    parts = split_patch(out)
    return subject_with(parts.header, f" ({k + 1}/{n})", spec.title) + parts.diff + parts.trailer


def _claimed(claims: Claims, k: int) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
    files = tuple(sorted(p for p, i in claims.files.items() if i == k))
    hunks = tuple(sorted(h for h, i in claims.hunks.items() if i == k))
    return files, hunks


# ----------------------------------------------------------------------------- the command


def split(
    series_path: Path,
    patch_id: str,
    specs: Sequence[PartSpec],
    workdir: Path | None = None,
    *,
    dry_run: bool = False,
) -> SplitResult:
    """`patchctl split ID --part ...`: replace patch ID by its parts, in place, under the
    series and clean-room locks; every write lands together through the journal."""
    with series_session(series_path, op="split") as session:
        room = session.cleanroom(workdir)
        series = session.series
        parts = plan_split(room, series, patch_id, specs)
        original = series.patch(patch_id)
        updated = _replaced(series, patch_id, [p.patch for p in parts])
        check_savable(updated)
        old_path = series.patch_path(original)
        removed = None if patch_id in {p.patch.id for p in parts} else old_path
        pending = {p.patch.id: p.data for p in parts}
        docs = render_docs(updated, pending)
        targets = [updated.patch_path(p.patch) for p in parts]
        check_writable([*targets, old_path, series.path, *docs])
        if dry_run:
            return SplitResult(original, tuple(parts), removed, (), dry_run=True)
        changed = _write(session, updated, parts, removed)
    for other in extending(series):
        notice(
            f"note: series {other.name} extends {series.name}; its README counts the patches "
            f"it extends: run `patchctl docs --series {other.dir}`"
        )
    return SplitResult(original, tuple(parts), removed, tuple(changed))


def _replaced(series: Series, patch_id: str, parts: Sequence[Patch]) -> Series:
    out: list[Patch] = []
    for patch in series.patches:
        out.extend(parts if patch.id == patch_id else [patch])
    return series.with_patches(out)


def _write(
    session: SeriesSession, updated: Series, parts: Sequence[Part], removed: Path | None
) -> list[Path]:
    """Stage the part files (new ones must not exist), the removal, series.yaml and docs."""
    changed: list[Path] = []
    for part in parts:
        path = updated.patch_path(part.patch)
        if removed is None and part.patch.id in session.series.ids():
            wrote = session.write_patch(path, part.data)  # the part that keeps the id
        else:
            wrote = session.write_new_patch(path, part.data)
        if wrote:
            changed.append(path)
    if removed is not None:
        session.remove_patch(removed)
    return changed + session.save(updated)


def list_changes(series_path: Path, patch_id: str, workdir: Path | None = None) -> list[Change]:
    """`patchctl split ID --list`: the files of patch ID and the hunks each can be split at
    (read-only: no lock, as verify)."""
    series = load_series(series_path)
    patch = load_stack(series).own_entry(patch_id).patch
    room = load_cleanroom(workdir if workdir is not None else default_workdir(series.dir))
    pre, post, _data = checked_trees(room, series, patch)
    return load_changes(room.git, series, pre, post)
