"""ops/rebase/train.py: resolutions learned from a move already made, then replayed by a rebase
of the series onto the same upstream; on a synthetic project and on the real llamafile series
(its five-patch state on llama-cpp-python 0.3.36 and its copy moved to 0.3.35)."""

from __future__ import annotations

import io
import json
import os
import pwd
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from support.drift import edit, rebase_ready, resolve_conflicts
from support.repos import diff_files

from patchctl.cli.main import main
from patchctl.errors import ChecksumMismatch, NotFound
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.ops.rebase.rebase import rebase, rebase_continue
from patchctl.ops.rebase.train import list_records, train
from patchctl.ops.verify import store_problems
from patchctl.series.model import Extends, Patch, Series, Upstream, load_series, save_series

PATCH = "0004-c-10"


def test_train_learns_a_moved_copy_and_the_rebase_replays_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    series_dir, onto = rebase_ready(tmp_path)
    moved = series_dir.parent / "demo-moved"
    shutil.copytree(series_dir, moved)
    room = tmp_path / "rooms" / "moved"
    assert rebase(moved, onto, workdir=room).state == "stopped"
    resolve_conflicts(room / "src" / "c.c", "C 10, moved by hand")
    assert rebase_continue(moved, workdir=room).state == "done"
    assert len(list((moved / "resolutions" / PATCH).iterdir())) == 1  # the copy's own record

    dry = train(series_dir, moved, dry_run=True)
    assert dry.totals() == {"blocks": 1, "recorded": 1, "unclear": 0} and dry.written == ()
    assert not (series_dir / "resolutions").exists()
    code = main(["resolutions", "train", "--series", str(series_dir), "--moved", str(moved),
                 "--json"])  # fmt: skip
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["blocks"], data["recorded"], len(data["written"])) == (1, 1, 1)
    [(path, record)] = list_records(series_dir)
    assert record.patch == PATCH and record.resolved == b"C 10, moved by hand\n"
    assert path.is_file() and store_problems(load_series(series_dir)) == []
    # training again writes nothing new (the same bytes)
    assert train(series_dir, moved).written == ()

    report = rebase(series_dir, onto)
    assert report.state == "done"
    assert {d.id: d.how for d in report.patches}[PATCH] == "replayed"
    new = (series_dir / f"{PATCH}.patch").read_bytes()
    assert new == (moved / f"{PATCH}.patch").read_bytes()
    assert main(["resolutions", "list", "--series", str(series_dir)]) == 0
    assert "1 record(s)" in capsys.readouterr().out


CHILD = "0005-child-c-11"


def _child_series(directory: Path, upstream: Upstream, patch: bytes) -> Path:
    """A series `child` in `directory` that extends its sibling `demo` at the top of the same
    upstream and holds one patch of its own."""
    directory.mkdir()
    (directory / f"{CHILD}.patch").write_bytes(patch)
    save_series(
        Series(
            directory / "series.yaml",
            upstream,
            (Patch(CHILD, f"{CHILD}.patch", "child: c line 11"),),
            extends=Extends("demo", "."),
        )
    )
    return directory


def test_train_learns_a_series_that_extends_another(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `child` extends `demo`; its own patch edits c.c's line 11, next to the line 10 that
    # demo's 0004 edits and the next upstream rewrites: moved onto that upstream, the child's
    # merge conflicts only on the tree where demo's moved patches are applied first.
    series_dir, onto = rebase_ready(tmp_path)
    old_room = tmp_path / "project" / "cleanroom" / "demo"
    assert old_room.is_dir()
    old_c = (old_room / "src" / "c.c").read_bytes()
    assert b"C 10\n" in old_c
    child_patch = diff_files(
        tmp_path / "scratch-child", {"src/c.c": old_c},
        {"src/c.c": edit(old_c, "c line 11", "C 11 child")},
    )  # fmt: skip
    child = _child_series(
        series_dir.parent / "child", load_series(series_dir).upstream, child_patch
    )

    moved_parent = tmp_path / "moved" / "patches"
    moved_parent.mkdir(parents=True)
    moved = moved_parent / "demo"
    shutil.copytree(series_dir, moved)
    room = tmp_path / "rooms" / "moved"
    assert rebase(moved, onto, workdir=room).state == "stopped"
    resolve_conflicts(room / "src" / "c.c", "C 10, moved by hand")
    assert rebase_continue(moved, workdir=room).state == "done"
    moved_c = (room / "src" / "c.c").read_bytes()
    resolved = edit(moved_c, "c line 11", "C 11 child, moved")
    moved_patch = diff_files(
        tmp_path / "scratch-moved", {"src/c.c": moved_c}, {"src/c.c": resolved}
    )
    moved_child = _child_series(moved_parent / "child", load_series(moved).upstream, moved_patch)

    dry = train(child, moved_child, dry_run=True)
    assert [(p.id, p.blocks, p.missing) for p in dry.patches] == [(CHILD, 1, False)]
    assert dry.totals() == {"blocks": 1, "recorded": 1, "unclear": 0} and dry.written == ()
    code = main(["resolutions", "train", "--series", str(child), "--moved", str(moved_child),
                 "--json"])  # fmt: skip
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["blocks"], data["recorded"], len(data["written"])) == (1, 1, 1)
    [(path, record)] = list_records(child)
    assert path.parent == child / "resolutions" / CHILD and record.patch == CHILD
    # the block is the child's own line against the moved demo's line 10: the record holds
    # both as the moved child has them; nothing of demo is recorded in the child's store
    assert record.resolved == b"C 10, moved by hand\nC 11 child, moved\n"
    assert b"C 10, moved by hand" in record.ours and b"C 11 child" in record.theirs
    assert not (series_dir / "resolutions").exists()
    assert store_problems(load_series(child)) == []


def test_train_names_an_extended_series_that_is_missing(tmp_path: Path) -> None:
    series_dir, _onto = rebase_ready(tmp_path)
    child = _child_series(series_dir.parent / "child", load_series(series_dir).upstream, b"")
    moved = tmp_path / "elsewhere" / "child"
    moved.parent.mkdir()
    shutil.copytree(child, moved)  # no `demo` next to it
    with pytest.raises(NotFound, match=r"extends\.series: no series 'demo' next to it"):
        train(child, moved)
    assert not (child / "resolutions").exists()


# ----------------------------------------------------------------------------- the real series

REPO = Path(__file__).resolve().parents[4]
FIVE_PATCHES = "9604bfd"  # patches/llamafile split into five patches, on 0.3.36
MOVED_FIVE = "04ddcab"  # patches/llamafile-0.3.35: those five patches moved by hand onto 0.3.35
REAL_HOME = Path(pwd.getpwuid(os.getuid()).pw_dir)
TEST_CACHE = Path(os.environ.get("PATCHCTL_TEST_CACHE", REAL_HOME / ".cache" / "patchctl-test"))


def old_series(commit: str, into: Path, name: str = "llamafile") -> None:
    """patches/<name> as it was at `commit` (read from the repository's history)."""
    raw = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit, f"patches/{name}"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                data = tar.extractfile(member)
                assert data is not None
                target = into / Path(member.name).relative_to(f"patches/{name}")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data.read())


@pytest.mark.integration
def test_the_real_move_to_0335_is_learned_and_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATCHCTL_CACHE_DIR", str(TEST_CACHE))
    patches = tmp_path / "proj" / "patches"
    old = patches / "llamafile"
    old.mkdir(parents=True)
    old_series(FIVE_PATCHES, old)
    moved = patches / "llamafile-0.3.35"
    moved.mkdir()
    old_series(MOVED_FIVE, moved, "llamafile-0.3.35")
    assert load_series(old).ids() == load_series(moved).ids()

    learned = train(old, moved)
    assert learned.totals() == {"blocks": 23, "recorded": 22, "unclear": 0}
    per_patch = {p.id: p.blocks for p in learned.patches}
    assert per_patch == {
        "0078-cuda-graph-structure": 0,
        "0079-ggml-flash-attn-lse": 4,
        "0080-cuda-flash-attn-lse": 13,
        "0082-llama-dca": 2,
        "0083-dca-tools": 4,
    }
    assert store_problems(load_series(old)) == []

    room = tmp_path / "room"
    cleanroom_apply(old, room)
    report = rebase(old, "llama-cpp-python==0.3.35", workdir=room)
    # Every conflict block is replayed. A file the moved copy also edited far (more than
    # resolutions.REACH lines) from its blocks is left to the user, with no marker in it and
    # the reason: here taken from the moved copy at that patch, as a maintainer would.
    moved_room = tmp_path / "moved-room"
    stops = []
    while report.state == "stopped":
        stop = report.stop
        assert stop is not None and stop.markers == ()
        assert any("outside its blocks" in m for m in stop.messages)
        stops.append((stop.id, stop.files, len(stop.replayed)))
        cleanroom_apply(moved, moved_room, stop.id, True)
        for path in stop.files:
            shutil.copyfile(moved_room / path, room / path)
        report = rebase_continue(old, workdir=room)
    assert stops == [
        ("0079-ggml-flash-attn-lse", ("tests/test-backend-ops.cpp",), 4),
        ("0080-cuda-flash-attn-lse", ("ggml/src/ggml-cuda/fattn-common.cuh",), 13),
    ]
    hows = {d.id: (d.how, len(d.replayed)) for d in report.patches}
    assert hows == {
        "0078-cuda-graph-structure": ("merged", 0),
        "0079-ggml-flash-attn-lse": ("resolved", 4),
        "0080-cuda-flash-attn-lse": ("resolved", 13),
        "0082-llama-dca": ("replayed", 2),  # its src/CMakeLists.txt edit near the block too
        "0083-dca-tools": ("replayed", 4),
    }
    # every file that conflicted ends as in the moved copy, also where the moved copy edited it
    # outside its conflict blocks (src/CMakeLists.txt lists the DCA sources in add_library);
    # the moved copy also changed files that merged without a conflict, which no record covers
    cleanroom_apply(moved, moved_room, None, True)
    conflicted = {record.file for _path, record in list_records(old)}
    assert len(conflicted) == 10  # 23 blocks in 10 files, as when the move was made by hand
    for path in sorted(conflicted):
        assert (room / path).read_bytes() == (moved_room / path).read_bytes(), path
    for pid in ("0078-cuda-graph-structure", "0083-dca-tools"):
        assert (old / f"{pid}.patch").read_bytes() == (moved / f"{pid}.patch").read_bytes()
    assert store_problems(load_series(old)) == []


@pytest.mark.integration
def test_the_real_python_series_trains_on_its_sdist_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # patches/llama-cpp-python (extends patches/llamafile, on the 0.3.36 sdist) against a copy
    # pinned to the 0.3.35 sdist whose sibling `llamafile` is patches/llamafile-0.3.35: each
    # side's own patches are merged on its sdist with its llamafile series composed under
    # vendor/llama.cpp (the 0.3.35 sdist must hold llamafile-0.3.35's pinned tree there, or
    # compose refuses). The Python patches up to 0087 merge onto 0.3.35 without a conflict.
    import re

    monkeypatch.setenv("PATCHCTL_CACHE_DIR", str(TEST_CACHE))
    old = tmp_path / "old" / "patches"
    moved = tmp_path / "moved" / "patches"
    for name in ("llamafile", "llama-cpp-python"):
        shutil.copytree(REPO / "patches" / name, old / name)
    shutil.copytree(REPO / "patches" / "llamafile-0.3.35", moved / "llamafile")
    shutil.copytree(REPO / "patches" / "llama-cpp-python", moved / "llama-cpp-python")
    pin = moved / "llama-cpp-python" / "series.yaml"
    text = pin.read_text().replace("version: 0.3.36", "version: 0.3.35")
    text = text.replace(
        "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
        "1139dbb54509074b70893fab8554e3b079aa9f4d312058ce4018ef0019e3de12",
    )
    pin.write_text(re.sub(r"\n  tree: [0-9a-f]+", "", text, count=1))

    learned = train(old / "llama-cpp-python", moved / "llama-cpp-python", dry_run=True)
    # the sparse-prefill binding (0092) meets 0.3.35's own llama_cpp.py where it adds its
    # functions: one block, which the copy (the same bytes, never resolved) cannot teach
    assert [(p.id, p.blocks, p.missing) for p in learned.patches] == [
        (pid, 1 if pid == "0092-python-sparse-prefill" else 0, False)
        for pid in load_series(old / "llama-cpp-python").ids()
    ]
    totals = learned.totals()
    assert totals["blocks"] == 1 and totals["recorded"] + totals["unclear"] <= 1
    # the composed base is checked: a sibling pinned to another tree is refused by name
    (moved / "llamafile").rename(moved / "other")
    shutil.copytree(REPO / "patches" / "llamafile", moved / "llamafile")
    with pytest.raises(ChecksumMismatch, match="pins upstream tree"):
        train(old / "llama-cpp-python", moved / "llama-cpp-python", dry_run=True)
