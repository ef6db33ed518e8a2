"""Import an existing series without rewriting its bytes: the recording half (sources.py reads
the source and its headers).

Each patch file is copied verbatim into the series directory and recorded with `imported:
true`; its pre/post trees come from applying it, in order, onto the materialized upstream tree
as tree objects (gitapply.replay_tree on a TreePatcher: no clean room, no whole index), as
quilt would: exactly, else at an offset, else with fuzz (never whitespace fixing). A patch that
drifted is reported per hunk (fuzz named as fuzz), or with `--refresh` regenerated to apply
exactly (series/parts.py: its header kept); only a conflict stops the import. Everything is
checked before the first write, and an existing file is never overwritten (exit 8).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from patchctl.errors import ConfigError, PatchctlError
from patchctl.fsio import check_writable, refuse_overwrite, write_new
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.objects import scratch_repo
from patchctl.ops.import_.sources import make_entry, read_source
from patchctl.progress import Progress, or_null
from patchctl.series.docs import render_docs
from patchctl.series.gitapply import (
    Drift,
    TreePatcher,
    is_fuzz,
    patch_sha256,
    replay_tree,
    warn_ambiguous_names,
)
from patchctl.series.model import Patch, Series, check_savable
from patchctl.series.parts import regenerated
from patchctl.series.stack import compose, load_stack
from patchctl.txn.session import series_session

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
    git: Git,
    base: str,
    patches: Sequence[tuple[Patch, bytes]],
    root: str = ".",
    sources: Mapping[str, str] | None = None,
) -> list[Applied]:
    """Apply each patch in order onto tree `base` in `git`, as quilt would (exactly, else at an
    offset, else with fuzz: series.gitapply.replay_tree); its trees and drifted hunks. A patch
    that does not apply even with fuzz is a conflict (exit 3) naming the patch (and its source
    file, from `sources`: id -> where it was read), file and hunk."""
    results = []
    named = sources or {}
    with TreePatcher(git) as patcher:
        current = base
        for patch, data in patches:
            source = f" ({named[patch.id]})" if patch.id in named else ""
            replayed = replay_tree(
                patcher,
                current,
                data,
                root,
                patch.id,
                onto=f"{source} to the tree before it ({current})",
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


def _stack_base(series: Series, git: Git, upstream: str) -> str:
    """The tree imported patches go on when the series has none yet: the upstream tree, or
    for a series that extends another, the upstream with that series' patches applied."""
    composed, why = compose(load_stack(series), git, upstream)
    if composed is None:
        raise PatchctlError(why, hint="fix the extended series first (patchctl verify --all)")
    return composed


def _create(path: Path, data: bytes) -> bool:
    write_new(path, data)
    return True


def import_patches(
    series: Series,
    source: Path,
    git: Git,
    base: str,
    progress: Progress | None = None,
    write: Callable[[Path, bytes], bool] = _create,
    *,
    refresh: bool = False,
) -> ImportResult:
    """Copy the patches of `source` into the series (on top of the stack) through `write`,
    which never replaces a file; series.yaml is not saved.

    Drifted patches (offset, fuzz) are copied as they are and reported, or with `refresh`
    regenerated so that they apply exactly (their header kept)."""
    kind, incoming = read_source(source)
    origin = f"{kind}:{source.name}"
    taken = set(load_stack(series).ids())
    start = len(series.patches) + 1
    entries, sources = [], {}
    for i, item in enumerate(incoming):
        entry = make_entry(item, start + i, origin, taken)
        warn_ambiguous_names(entry.id, item.data)
        taken.add(entry.id)
        entries.append((entry, item.data))
        sources[entry.id] = f"{item.name} in {source}"
    prog = or_null(progress)
    prog.start("import", len(entries))
    applied = apply_chain(git, _last_tree(series, base), entries, series.root, sources)
    if refresh:
        entries = _refreshed(git, entries, applied, series.root)
    done = [
        replace(entry, pre_tree=result.pre, post_tree=result.post)
        for (entry, _), result in zip(entries, applied, strict=True)
    ]
    updated = series.with_patches((*series.patches, *done))
    _check_before_writing(updated, entries)
    for entry, data in entries:
        write(series.dir / entry.file, data)
        prog.advance("import")
    prog.done("import")
    pairs = [(e.id, r) for (e, _), r in zip(entries, applied, strict=True) if r.hunks]
    return ImportResult(
        updated,
        tuple(done),
        {pid: str(r.drift) for pid, r in pairs},
        hunks={pid: r.hunks for pid, r in pairs},
        refreshed=tuple(pid for pid, _ in pairs) if refresh else (),
    )


def _refreshed(
    git: Git, entries: list[tuple[Patch, bytes]], applied: list[Applied], root: str
) -> list[tuple[Patch, bytes]]:
    """`import --refresh`: each drifted patch with its diff regenerated from the trees it
    produced (header and trailer kept, series.parts.regenerated) and the sha256 of those bytes."""
    out = []
    with scratch_repo([git.repo]) as scratch:
        for (entry, data), result in zip(entries, applied, strict=True):
            if result.hunks:
                data = regenerated(scratch, entry, data, result.pre, result.post, root)
                entry = replace(entry, sha256=patch_sha256(data))
            out.append((entry, data))
    return out


def _check_before_writing(updated: Series, entries: list[tuple[Patch, bytes]]) -> None:
    """Everything an import writes, checked before its first write: no file is overwritten,
    each entry is a valid series entry, the docs render, every target is writable."""
    check_savable(updated)
    for entry, _ in entries:
        target = updated.dir / entry.file
        if target.exists() or target.is_symlink():
            raise refuse_overwrite(target)
    docs = render_docs(updated, {entry.id: data for entry, data in entries})
    check_writable([updated.path, *(updated.dir / e.file for e, _ in entries), *docs])


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
    with series_session(series_path, op="import") as session:
        room = session.cleanroom(workdir)
        base = _stack_base(session.series, room.git, room.base_tree())
        result = import_patches(
            session.series,
            source,
            room.git,
            base,
            progress,
            session.write_new_patch,
            refresh=refresh,
        )
        changed = session.save(result.series)
    return replace(result, changed=tuple(changed))
