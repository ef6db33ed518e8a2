"""Which patches of a series a new upstream already has: `merged`, `partly merged` or `needed`.

Three kinds of evidence, each named in the result:
- patch-id: for a git upstream, `git patch-id --stable` of the patch equals that of an upstream
  commit between the old and the new pin (the same change, whatever its line numbers);
- trailer: the patch header names its upstream change (DEP-3 `Applied-Upstream:` or
  `Forwarded:`, or an `Upstream-PR:` trailer, with a pull request number or a commit id) and an
  upstream commit between the two pins is that change (a squash merge's subject ends in
  `(#NNNN)`; a commit id is matched by its prefix);
- reverse: the patch (each of its file sections on its own) reverse-applies cleanly to the new
  upstream tree: the new upstream holds what the patch makes (any upstream kind).

A patch is `merged` when a patch-id or a trailer matches, or every file section reverses;
`partly merged` when some file sections reverse and others do not (`left`: the files still
needed); `needed` otherwise. Nothing here drops a patch: `rebase --drop-merged` does, and says
so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from patchctl.errors import NotFound
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.index import Index, temp_index
from patchctl.progress import Progress
from patchctl.room.cleanroom import is_cleanroom, load_cleanroom
from patchctl.series.gitapply import apply_flags
from patchctl.series.model import Series, Upstream, read_patch_file
from patchctl.series.parts import diff_sections, split_patch
from patchctl.txn.session import series_session
from patchctl.upstream.pinning import Where, parse_upstream, pin
from patchctl.upstream.sources import fetch_git

MERGED, PARTLY, NEEDED = "merged", "partly merged", "needed"
TRAILERS = (b"applied-upstream", b"forwarded", b"upstream-pr")
TRAILER_LINE = re.compile(rb"^([A-Za-z][A-Za-z0-9-]*):[ \t]*(.*?)\s*$", re.MULTILINE)
PR_NUMBER = re.compile(r"(?:#|/pull/|/pulls/|/merge_requests/|^)(\d{1,9})\b")
COMMIT_ID = re.compile(r"(?<![0-9a-f])([0-9a-f]{7,64})(?![0-9a-f])")
SUBJECT_PR = re.compile(r"\(#(\d{1,9})\)\s*$")


@dataclass(frozen=True)
class UpstreamCommit:
    """One upstream commit between the two pins: id, subject, patch-id (may be empty)."""

    commit: str
    subject: str
    patch_id: str = ""


@dataclass(frozen=True)
class Upstreamed:
    """Whether the new upstream already has one patch, and why it is thought so."""

    id: str
    state: str  # MERGED | PARTLY | NEEDED
    evidence: tuple[str, ...] = ()
    left: tuple[str, ...] = ()  # partly merged: the files the new upstream still lacks

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return {
            "patch": self.id,
            "state": self.state,
            "evidence": list(self.evidence),
            "left": list(self.left),
        }


# ----------------------------------------------------------------------------- evidence


def trailer_refs(data: bytes) -> tuple[tuple[str, str], ...]:
    """The upstream changes a patch header names: (kind, value) with kind "pr" (a pull
    request number) or "commit" (a commit id prefix), from `Applied-Upstream:`, `Forwarded:`
    and `Upstream-PR:` lines (`Forwarded: no` / `not-needed` names nothing)."""
    header = split_patch(data).header
    found: dict[tuple[str, str], None] = {}
    for m in TRAILER_LINE.finditer(header):
        if m.group(1).lower() not in TRAILERS:
            continue
        value = m.group(2).decode("utf-8", "replace").strip()
        if value.lower() in ("", "no", "not-needed", "n/a"):
            continue
        for number in PR_NUMBER.findall(value):
            found[("pr", number)] = None
        if m.group(1).lower() != b"upstream-pr":
            for oid in COMMIT_ID.findall(value.lower()):
                if not oid.isdigit():
                    found[("commit", oid)] = None
    return tuple(found)


def upstream_commits(
    git: Git, old: str, new: str, prefix: str = "", *, patch_ids: bool = True
) -> list[UpstreamCommit]:
    """The commits of `git` in `old..new` (no merges), oldest first, each with its subject and
    (`patch_ids`) its stable patch-id over the paths under `prefix` (relative to it, as the
    series' patches name them)."""
    records = git.log_records("%H%x09%s", f"{old}..{new}")
    commits = []
    for record in records:
        oid, _tab, subject = record.strip("\n").partition("\t")
        if oid:
            commits.append(UpstreamCommit(oid, subject))
    if not patch_ids or not commits:
        return commits
    ids = git.patch_ids(f"{old}..{new}", prefix)
    return [UpstreamCommit(c.commit, c.subject, ids.get(c.commit, "")) for c in commits]


def detect(
    index: Index,
    patches: Sequence[tuple[str, bytes]],
    new_tree: str,
    root: str,
    commits: Sequence[UpstreamCommit] = (),
    *,
    reverse: bool = True,
) -> list[Upstreamed]:
    """The state of each (id, bytes) patch against the new upstream: tree `new_tree` (in
    `index`'s repository) and, for a git upstream, `commits` between the two pins. `reverse`
    False skips the reverse-apply check (patch-id and trailers only)."""
    own_ids = index.git.patch_ids_of([data for _pid, data in patches]) if commits else []
    by_patch_id = {c.patch_id: c for c in commits if c.patch_id}
    by_pr: dict[str, UpstreamCommit] = {}
    for c in commits:
        if m := SUBJECT_PR.search(c.subject):
            by_pr.setdefault(m.group(1), c)
    results = []
    if reverse:
        index.read_tree(new_tree)
    for n, (pid, data) in enumerate(patches):
        evidence: list[str] = []
        own = own_ids[n] if n < len(own_ids) else ""
        if own and own in by_patch_id:
            c = by_patch_id[own]
            evidence.append(
                f"patch-id {own[:12]} equals upstream commit {c.commit[:12]} {c.subject}"
            )
        evidence += _trailer_evidence(data, by_pr, commits)
        left: tuple[str, ...] = ()
        sections_total = 0
        if reverse:
            reversed_files, left, sections_total = _reverse_check(index, data, root)
            if sections_total and not left:
                evidence.append(f"reverse-applies cleanly to the new upstream tree {new_tree[:12]}")
            elif reversed_files:
                evidence.append(
                    "the new upstream already has its changes to " + ", ".join(reversed_files)
                )
        full = any(not e.startswith("the new upstream already has") for e in evidence)
        if full:
            state, left = MERGED, ()
        elif left and len(left) < sections_total:
            state = PARTLY
        else:
            state, left = NEEDED, ()
        results.append(Upstreamed(pid, state, tuple(evidence), left))
    return results


def _trailer_evidence(
    data: bytes, by_pr: Mapping[str, UpstreamCommit], commits: Sequence[UpstreamCommit]
) -> list[str]:
    found = []
    for kind, value in trailer_refs(data):
        if kind == "pr" and value in by_pr:
            c = by_pr[value]
            found.append(f"its header names #{value}: upstream commit {c.commit[:12]} {c.subject}")
        elif kind == "commit":
            hit = next((c for c in commits if c.commit.startswith(value)), None)
            if hit is not None:
                found.append(f"its header names upstream commit {hit.commit[:12]} {hit.subject}")
    return found


def _reverse_check(index: Index, data: bytes, root: str) -> tuple[list[str], tuple[str, ...], int]:
    """(files whose section reverse-applies, files whose section does not, sections): each
    file section of the patch checked on its own with `git apply -R --check`."""
    sections = diff_sections(split_patch(data).diff)
    done: list[str] = []
    left: list[str] = []
    for header, hunks in sections:
        section = header + hunks
        name = _section_file(header.splitlines(keepends=True))
        code, _err = index.apply(section, apply_flags(root, reverse=True, check=True, data=section))
        (done if code == 0 else left).append(name)
    return done, tuple(left), len(sections)


def _section_file(header: Sequence[bytes]) -> str:
    for line in header:
        if line.startswith(b"+++ ") and not line.startswith(b"+++ /dev/null"):
            name = line[4:].rstrip(b"\r\n").decode("utf-8", "backslashreplace")
            return name[2:] if name.startswith("b/") else name
    for line in header:
        if line.startswith(b"--- ") and not line.startswith(b"--- /dev/null"):
            name = line[4:].rstrip(b"\r\n").decode("utf-8", "backslashreplace")
            return name[2:] if name.startswith("a/") else name
    first = header[0].decode("utf-8", "backslashreplace").strip() if header else "?"
    return first.rsplit(" b/", 1)[-1] if " b/" in first else first


def summary(results: Sequence[Upstreamed]) -> dict[str, int]:
    """How many patches are in each state."""
    counts = {MERGED: 0, PARTLY: 0, NEEDED: 0}
    for r in results:
        counts[r.state] += 1
    return counts


def report_lines(results: Sequence[Upstreamed]) -> list[str]:
    """The human form: one line per patch, then its evidence and what is left."""
    lines = []
    for r in results:
        lines.append(f"  {r.state:13} {r.id}")
        lines += [f"                  {e}" for e in r.evidence]
        if r.left:
            lines.append(f"                  still needed: {', '.join(r.left)}")
    return lines


# ----------------------------------------------------------------------------- a series


@dataclass(frozen=True)
class UpstreamedReport:
    """`patchctl status --upstreamed`: every patch of a series against another upstream."""

    series: Path
    old: str
    new: str
    results: tuple[Upstreamed, ...]
    history: bool  # whether upstream commits between the pins were compared (git upstreams)

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return {
            "series": str(self.series),
            "old": self.old,
            "new": self.new,
            "history": self.history,
            "summary": summary(self.results),
            "patches": [r.to_json() for r in self.results],
        }


def history_between(series: Series, new: Upstream) -> list[UpstreamCommit]:
    """The upstream commits from the series' pin to `new` when both are commits of one git
    repository (fetched into patchctl's git cache); [] for any other upstream kind."""
    old = series.upstream
    if old.kind != "git" or new.kind != "git" or not old.commit or not new.commit:
        return []
    cache = fetch_git(series.with_upstream(new))
    if cache.maybe_rev(f"{old.commit}^{{commit}}") is None:
        cache = fetch_git(series)
    if cache.maybe_rev(f"{old.commit}^{{commit}}") is None:
        return []  # another repository: nothing to compare
    prefix = "/".join(p.strip("/") for p in (new.subdir or "", series.root) if p.strip("/."))
    return upstream_commits(cache, old.commit, new.commit, prefix)


def series_upstreamed(
    series_path: Path,
    onto: str,
    *,
    commit: str | None = None,
    subdir: str | None = None,
    workdir: Path | None = None,
    progress: Progress | None = None,
) -> UpstreamedReport:
    """Every patch of the series against the upstream `onto` (written as for `rebase
    --onto`): pinned and brought into the clean room's repository as objects (nothing else
    there changes), then `detect`."""
    from patchctl.ops.rebase.rebase import new_base  # the rebase's own way to bring an upstream in

    with series_session(series_path, op="status --upstreamed") as session:
        series = session.series
        path = session.lock_cleanroom(workdir)
        if not is_cleanroom(path):
            raise NotFound(f"no clean room at {path}", hint="run `patchctl cleanroom apply` first")
        room = load_cleanroom(path)
        where = Where(series_dir=series.dir, cwd=Path.cwd())
        wanted = parse_upstream(onto, where, commit=commit, subdir=subdir, current=series.upstream)
        pinned = pin(wanted, series.dir, progress)
        _base, tree, _dropped = new_base(room, series, pinned, progress)
        commits = history_between(series, pinned)
        patches = [(p.id, read_patch_file(series.patch_path(p))) for p in series.patches]
        with temp_index(room.git) as index:
            results = detect(index, patches, tree, series.root, commits)
        return UpstreamedReport(
            series.path,
            series.upstream.describe(),
            pinned.describe(),
            tuple(results),
            bool(commits) or (series.upstream.kind == pinned.kind == "git"),
        )
