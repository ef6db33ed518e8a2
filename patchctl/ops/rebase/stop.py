"""A rebase's stop as a maintainer works in it: a real git conflict state, and what to say.

At a conflict the clean room's work tree holds the merged files (diff3 conflict markers
included) and HEAD the rebased tip before the patch (rebase.py). This module makes the index
what `git cherry-pick` would leave there, so git's own tools work on it:
- every conflicted path gets unmerged entries: stage 1 the file before the patch on the old
  upstream, stage 2 the file on the new tip (ours), stage 3 the file the patch made on the old
  upstream (theirs) — `git status` says "both modified", `git diff --diff-filter=U` and
  `git mergetool` find them, and an editor's merge view reads the three sides;
- every file the patch adds that the new tip lacks is intent-to-add (`git add -N`), so the
  "`git diff` shows the patch as it would be" of the report holds for new files too.
`--continue` takes the work tree as it is, whether or not the user ran `git add`.

It also says what the stop is, as text: per conflicted file the hunks that no longer apply and
the conflict blocks; then the hunks git placed on its own (they did not apply as written, and
the three-way merge put them somewhere without a conflict: the ones a reviewer most needs).
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path

from patchctl.errors import ConflictsLeft
from patchctl.gitlayer.git import Git
from patchctl.room.rebasestate import Done, Journal, Stop

BLOCK_START = re.compile(rb"<{7}(?=[ \t\r\n\v\f]|\Z)")
BLOCK_END = re.compile(rb">{7}(?=[ \t\r\n\v\f]|\Z)")


def blocks(stop: Stop) -> int:
    """The conflict blocks a hand resolution of `stop` settles: one per `<<<<<<<` marker, and
    one per conflicted file that has none (a file deleted on one side)."""
    marked = {path for path, _line in stop.markers}
    return len(stop.markers) + sum(1 for path in stop.files if path not in marked)


def stamped(stop: Stop) -> Stop:
    """The stop with the time it is handed to the user (kept when a killed hand-over is
    redone)."""
    return stop if stop.at else replace(stop, at=round(time.time(), 3))


def resolved(done: Done, stop: Stop) -> Done:
    """A hand-resolved patch's Done with the blocks the user settled, the time the user took
    and the time the rebase spent moving it up to the stop."""
    waited = max(0.0, round(time.time() - stop.at, 1)) if stop.at else 0.0
    return replace(done, blocks=blocks(stop), waited=waited, seconds=stop.seconds)


def old_trees(git: Git, journal: Journal, pid: str) -> tuple[str, str]:
    """The trees before and after patch `pid` on the old upstream."""
    i = journal.ids.index(pid)
    before = journal.old_commits[i - 1] if i else journal.old_base
    return git.tree_of(before), git.tree_of(journal.old_commits[i])


def conflict_state(git: Git, journal: Journal, stop: Stop) -> None:
    """The index of a stopped rebase made a real conflict state (module docstring). The index
    holds the tree before the patch when this is called."""
    if stop.reason != "conflict":
        return
    pre = git.tree_of(journal.head)
    base, theirs = old_trees(git, journal, stop.id)
    files = list(stop.files)
    sides = [git.entries_at(tree, files) for tree in (base, pre, theirs)]
    unmerged = {
        path: [(n, *side[path]) for n, side in enumerate(sides, 1) if path in side]
        for path in files
    }
    git.set_unmerged({path: stages for path, stages in unmerged.items() if stages})
    added = [p for p in git.changed_paths(pre, stop.merged) if p not in stop.files]
    present = git.entries_at(pre, added)
    git.intent_to_add([p for p in added if p not in present])


def stop_lines(stop: Stop, cleanroom: Path) -> list[str]:
    """What the user must resolve, where, what git placed on its own, and how to go on."""
    if stop.reason == "empty":
        lines = [f"stopped at {stop.id}: the new upstream has its changes already (empty patch)"]
    else:
        lines = [
            f"stopped at {stop.id}: conflict in {len(stop.files)} file(s), {blocks(stop)} block(s)"
        ]
    if stop.replayed:
        lines.append(
            f"  {len(stop.replayed)} conflict block(s) replayed from resolutions/; what is"
            " listed below is left to you (`--no-replay` with --onto declines replays)"
        )
    for path in stop.files:
        hunks = [f"#{h}" for f, h in stop.hunks if f == path and h is not None]
        marks = [str(n) for f, n in stop.markers if f == path]
        what = f"hunks {', '.join(hunks)} no longer apply" if hunks else "conflict"
        at = f"; conflict markers at line(s) {', '.join(marks)}" if marks else ""
        lines.append(f"  {path}: {what}{at}")
    placed = placed_by_git(stop)
    if placed:
        lines.append(
            "placed by git on its own (did not apply as written; merged three-way without a"
            " conflict; review them):"
        )
        for path, hunks in placed:
            lines.append(f"  {path}: " + (f"hunks {', '.join(hunks)}" if hunks else "whole file"))
    lines += [f"  {'git: ' if m.startswith('CONFLICT') else ''}{m}" for m in stop.messages]
    if stop.files:
        lines.append(
            "the conflicted files are unmerged in the clean room's index: `git status`,"
            " `git diff --diff-filter=U` and `git mergetool` there work on them"
        )
    lines.append(
        f"edit the files in {cleanroom} (`git diff` there shows the patch as it would be, new"
        " files included), then `patchctl rebase --continue` (`git add` is optional); `--skip`"
        " drops the patch, `--abort` puts everything back"
    )
    return lines


def placed_by_git(stop: Stop) -> list[tuple[str, list[str]]]:
    """The patch's hunks that did not apply as written in files without a conflict: git's
    three-way merge placed them on its own. (file, ["#n", ...]); an empty list for a file
    whose patch git could not apply at all (missing or moved)."""
    found: dict[str, list[str]] = {}
    for path, hunk in stop.hunks:
        if path in stop.files:
            continue
        found.setdefault(path, [])
        if hunk is not None:
            found[path].append(f"#{hunk}")
    return list(found.items())


def block_ranges(text: bytes) -> list[tuple[int, int | None]]:
    """The (first, last) line of each conflict block in `text`: a `<<<<<<<` line to the next
    `>>>>>>>` line (last None for a block left open)."""
    found: list[tuple[int, int | None]] = []
    start = None
    for number, line in enumerate(text.splitlines(), 1):
        if BLOCK_START.match(line):
            if start is not None:
                found.append((start, None))
            start = number
        elif BLOCK_END.match(line) and start is not None:
            found.append((start, number))
            start = None
    if start is not None:
        found.append((start, None))
    return found


def left_error(
    git: Git, pid: str, post: str, left: list[tuple[str, tuple[int, ...]]]
) -> ConflictsLeft:
    """The refusal of a `--continue` while conflict markers are left: every file, its marker
    lines (`left`: the lines beyond those the file had before the patch) and the conflict
    blocks they make (text, and `left` in --json)."""
    entries: list[dict[str, object]] = []
    parts = []
    for path, lines in left:
        blob = git.maybe_rev(f"{post}:{path}")
        text = git.cat_file("blob", blob) if blob else b""
        spans = [(a, b) for a, b in block_ranges(text) if a in lines]
        shown = ", ".join(f"{a}-{b}" if b is not None else f"{a}-(open)" for a, b in spans)
        parts.append(
            f"{path} (line {', '.join(map(str, lines))})" + (f" blocks {shown}" if spans else "")
        )
        entries.append({"file": path, "lines": list(lines), "blocks": [[a, b] for a, b in spans]})
    count = sum(len(e["lines"]) for e in entries if isinstance(e["lines"], list))
    return ConflictsLeft(
        f"{pid}: conflict markers are still in {'; '.join(parts)}"
        f" ({count} marker line(s) in {len(entries)} file(s))",
        patch=pid,
        left=entries,
        hint="resolve every block (no `<<<<<<<`, `|||||||`, `=======` or `>>>>>>>` line may"
        " stay), then `patchctl rebase --continue` (or --skip / --abort); `git diff"
        " --diff-filter=U` in the clean room shows the files still unmerged",
    )
