"""At scale, CI-sized: a synthetic tree of thousands of files and dozens of drifted patches.

Behaviour: `import` takes a quilt series whose hunks sit at an offset byte for byte and notes
every offset; strict `cleanroom apply` refuses it (drift, exit 10); the same changes with
their hunks regenerated apply strictly and give the tree import computed; `verify` passes and
keeps the offset notes.

Cost is counted, never timed: every git process patchctl starts, and the index entries each
one is handed (the entry count of its index file before and after it ran: what it reads,
hashes or writes). A per-patch cost that grew with the tree (a whole index per patch) or with
the patch's place in the stack shows up as a ratio here, whatever the machine's load.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from support.repos import MakeRepo, Repo
from support.series import git_upstream, write_series

from patchctl.errors import PatchDrift
from patchctl.gitlayer import pipes as gitmod
from patchctl.gitlayer.git import Git
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.ops.import_.record import import_series
from patchctl.ops.verify import verify_series
from patchctl.series.model import Series

PATCHES = 36  # every fourth one exact, the others drifted
LINES = 40
DRIFT = 2  # drifted hunks name lines this far below where the text is


# ----------------------------------------------------------------------------- the synthetic tree


def file_name(i: int) -> str:
    return f"d{i % 23:02d}/s{i % 7}/f{i:05d}.c"


def file_line(i: int, j: int) -> bytes:
    return b"f%d line %d\n" % (i, j)


def synthetic_tree(files: int) -> dict[str, bytes]:
    return {
        file_name(i): b"".join(file_line(i, j) for j in range(1, LINES + 1)) for i in range(files)
    }


def hunk(i: int, line: int, k: int, shift: int) -> bytes:
    """One hunk changing line `line` of file i (3 lines of context), named `shift` lines off."""
    first = line - 3
    out = [b"@@ -%d,7 +%d,7 @@\n" % (first + shift, first + shift)]
    for j in range(first, first + 7):
        if j == line:
            out += [b"-" + file_line(i, j), b"+" + file_line(i, j)[:-1] + b" p%d\n" % k]
        else:
            out.append(b" " + file_line(i, j))
    return b"".join(out)


def synthetic_patch(k: int, files: int, *, drifted: bool) -> bytes:
    """Patch k, quilt style (DEP-3 header, no `diff --git`): two files changed, one with two
    hunks; every fifth patch also adds a file. Drifted: the second file's hunk is named
    DRIFT lines below where its text is (git applies it at an offset)."""
    stride = files // PATCHES
    a, b = k * stride, k * stride + 1
    shift = DRIFT if drifted else 0
    parts = [
        b"Description: synthetic change %d\nAuthor: Someone <s@example.org>\n---\n" % k,
        b"--- a/%s\n+++ b/%s\n" % (file_name(a).encode(), file_name(a).encode()),
        hunk(a, 10, k, 0),
        hunk(a, 30, k, 0),
        b"--- a/%s\n+++ b/%s\n" % (file_name(b).encode(), file_name(b).encode()),
        hunk(b, 20, k, shift),
    ]
    if k % 5 == 0:
        parts.append(b"--- /dev/null\n+++ b/added/p%d/new.c\n@@ -0,0 +1,2 @@\n+new\n+file\n" % k)
    return b"".join(parts)


def quilt_dir(root: Path, files: int) -> Path:
    """debian/patches-style directory of the synthetic series (drifted as described)."""
    root.mkdir(parents=True)
    names = []
    for k in range(PATCHES):
        name = f"synthetic-{k:02d}.patch"
        (root / name).write_bytes(synthetic_patch(k, files, drifted=k % 4 != 0))
        names.append(name)
    (root / "series").write_text("".join(f"{n}\n" for n in names))
    return root


def exact_series(directory: Path, upstream: Repo, files: int, ids: Sequence[str]) -> Path:
    """The same changes with every hunk named where its text is (what a refresh makes)."""
    patches = [(pid, synthetic_patch(k, files, drifted=False)) for k, pid in enumerate(ids)]
    return write_series(directory, git_upstream(upstream), patches)


# ----------------------------------------------------------------------------- counting cost


# Subcommands that read objects and refs only, never the repository's index (any other one
# is counted as reading it, so an unknown subcommand counts against patchctl).
OBJECTS_ONLY = frozenset(
    {
        "cat-file",
        "commit-tree",
        "diff-tree",
        "for-each-ref",
        "hash-object",
        "init",
        "log",
        "ls-tree",
        "mktree",
        "rev-list",
        "rev-parse",
        "show-ref",
        "symbolic-ref",
        "update-ref",
    }
)


@dataclass
class Cost:
    """Git processes started, and the index entries they were handed: for each one that
    reads an index, its index file's entry count before and after it ran."""

    processes: int = 0
    entries: int = 0

    def __sub__(self, other: Cost) -> Cost:
        return Cost(self.processes - other.processes, self.entries - other.entries)


def index_entries(path: Path) -> int:
    """The entry count in an index file's header (0 when there is none)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(12)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    return int.from_bytes(head[8:12], "big") if head[:4] == b"DIRC" else 0


@contextmanager
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cost]:
    """Count every git process patchctl starts while the block runs."""
    cost = Cost()
    run_full = Git.run_full
    pipe_init = gitmod.Pipe.__init__

    def counted_run(
        self: Git, *args: str, stdin: bytes | None = None, env: Mapping[str, str] | None = None
    ) -> tuple[int, bytes, bytes]:
        own = (env or {}).get("GIT_INDEX_FILE")
        index = Path(own) if own else self.repo / ".git" / "index"
        reads = own is not None or args[0] not in OBJECTS_ONLY
        before = index_entries(index) if reads else 0
        result = run_full(self, *args, stdin=stdin, env=env)
        cost.processes += 1
        cost.entries += before + index_entries(index) if reads else 0
        return result

    def counted_pipe(self: gitmod.Pipe, git: Git, *args: str) -> None:
        cost.processes += 1
        pipe_init(self, git, *args)

    monkeypatch.setattr(Git, "run_full", counted_run)
    monkeypatch.setattr(gitmod.Pipe, "__init__", counted_pipe)
    try:
        yield cost
    finally:
        monkeypatch.undo()


def marginal(
    monkeypatch: pytest.MonkeyPatch, steps: Sequence[Callable[[], object]], patches: Sequence[int]
) -> Cost:
    """The cost of one more patch: (cost of the larger step - the smaller) / extra patches."""
    costs = []
    for step in steps:
        with counting(monkeypatch) as cost:
            step()
        costs.append(cost)
    extra = patches[1] - patches[0]
    diff = costs[1] - costs[0]
    return Cost(round(diff.processes / extra), round(diff.entries / extra))


# ----------------------------------------------------------------------------- the tests

SMALL, LARGE = 1000, 4000


@pytest.fixture(scope="module")
def trees() -> dict[int, dict[str, bytes]]:
    return {size: synthetic_tree(size) for size in (SMALL, LARGE)}


def _import(tmp_path: Path, upstream: Repo, files: int) -> Series:
    """`patchctl import` of the drifted quilt series into a new series (clean room `room`)."""
    directory = write_series(tmp_path / "imported", git_upstream(upstream))
    source = quilt_dir(tmp_path / "debian-patches", files)
    cleanroom_apply(directory, workdir=tmp_path / "room")  # the clean room import reads
    result = import_series(directory, source, workdir=tmp_path / "room")
    drifted = {p.id for k, p in enumerate(result.added) if k % 4 != 0}
    assert len(result.added) == PATCHES
    assert set(result.drift) == drifted, "every drifted patch (and no other) has offset notes"
    assert all(f"offset -{DRIFT} lines" in result.drift[pid] for pid in drifted)
    for k, patch in enumerate(result.added):
        assert result.series.patch_path(patch).read_bytes() == (
            source / f"synthetic-{k:02d}.patch"
        ).read_bytes()
    return result.series


def test_a_drifted_series_imports_is_refused_strictly_and_applies_once_refreshed(
    tmp_path: Path, make_repo: MakeRepo, trees: dict[int, dict[str, bytes]]
) -> None:
    upstream = make_repo(trees[LARGE], name="upstream")
    imported = _import(tmp_path, upstream, LARGE)
    with pytest.raises(PatchDrift) as refused:
        cleanroom_apply(imported.dir, workdir=tmp_path / "room")
    assert refused.value.exit_code == 10 and imported.patches[1].id in str(refused.value)
    ids = [p.id for p in imported.patches]
    exact = exact_series(tmp_path / "exact", upstream, LARGE, ids)
    report = cleanroom_apply(exact, workdir=tmp_path / "room")
    assert report.tree == imported.patches[-1].post_tree, "refreshed = what import computed"
    assert [a.id for a in report.applied] == ids
    verified = verify_series(imported, [tmp_path / "room"])
    assert verified.ok, verified.failures()
    notes = [r for r in verified.patches if any("offset" in s.detail for s in r.steps)]
    assert len(notes) == PATCHES - PATCHES // 4


def test_apply_cost_per_patch_does_not_grow_with_the_tree_or_the_stack(
    tmp_path: Path,
    make_repo: MakeRepo,
    trees: dict[int, dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    per_patch: dict[int, Cost] = {}
    ids = [f"{k + 1:04d}-synthetic-{k}" for k in range(PATCHES)]
    for size in (SMALL, LARGE):
        upstream = make_repo(trees[size], name=f"upstream-{size}")
        series = exact_series(tmp_path / f"s{size}", upstream, size, ids)
        room = tmp_path / f"room{size}"
        cleanroom_apply(series, workdir=room, upto=ids[0])  # the clean room made: not counted
        steps = [
            partial(cleanroom_apply, series, workdir=room, upto=ids[9]),  # 9 patches
            partial(cleanroom_apply, series, workdir=room),  # 26 more, from the 10th
        ]
        per_patch[size] = marginal(monkeypatch, steps, (9, PATCHES - 10))
    small, large = per_patch[SMALL], per_patch[LARGE]
    # A whole index per patch would hand git >= LARGE entries per patch, and 4x as many on
    # the large tree as on the small one.
    assert large.entries < LARGE // 20, per_patch
    assert large.entries <= 1.5 * max(small.entries, 1), per_patch
    assert large.processes <= small.processes + 1 and large.processes <= 8, per_patch


def test_verify_cost_is_the_patches_checked_not_their_place_in_the_stack(
    tmp_path: Path,
    make_repo: MakeRepo,
    trees: dict[int, dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    upstream = make_repo(trees[SMALL], name="upstream")
    imported = _import(tmp_path, upstream, SMALL)
    ids = [p.id for p in imported.patches]
    costs = []
    for chosen in ([ids[0]], [ids[-1]], ids[:4], ids[-4:]):
        with counting(monkeypatch) as cost:
            assert verify_series(imported, [tmp_path / "room"], chosen).ok
        costs.append(cost)
    first, top, first4, top4 = costs
    assert top.processes <= first.processes * 1.25 + 2, costs  # not a walk of the stack
    assert top4.processes <= first4.processes * 1.25 + 2, costs
    assert top4.entries <= 1.5 * max(first4.entries, 1) + 50, costs
    assert first4.processes - first.processes <= 3 * 8, costs  # a few processes per patch
