"""The kill test: SIGKILL a patchctl command at a seeded random point, then check that nothing
was lost and that the next run recovers.

Each scenario builds a small world once (an upstream repository with two pins, a project
with a three-patch series, its clean room in the state the command expects) and keeps it as a
template. One trial restores the world from the template, runs the command as a real process
and kills it, in one of two ways:
- `hook`: `PATCHCTL_TEST_KILL_AT=N` makes the process SIGKILL itself at its Nth write or git
  call (patchctl/killpoint.py; while a git child runs, the child dies first), N drawn from the
  points an uninterrupted run passes;
- `delay`: the whole process group gets SIGKILL after a random delay within the time an
  uninterrupted run takes.

Then it checks, right after the kill: series.yaml parses and holds its old or its new bytes,
every patch file and generated doc holds its old or new bytes, the user's edits, ignored
files and branches are all still somewhere (`lost` counts what is not). It runs the next
command (a run that only takes the locks, as every writing command does first), checks the
series files are all old or all new and the clean room has no unsaved work patchctl made,
repeats the command when it had not finished, and checks the end state equals that of an
uninterrupted run, with no journal, staged copy, temporary file, partial clean room or git
lock left. A backup recovery made (unsaved work it could not tell from patchctl's own) is
counted in `saved`, never as a difference. tests/test_kill.py runs a bounded number of trials;
scripts/kill_test.py the long run.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from patchctl.gitlayer.git import Git
from patchctl.ops.capture import add_patch, capture
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.series.model import Patch, Series, Upstream, load_series, save_series
from support.files import Exe, Files, write_files
from support.repos import diff_files, new_repo

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
SERIES = Path("project/patches/demo")
ROOM = Path("project/cleanroom/demo")
DOCS = Path("project/docs/UPSTREAM_SYNC.md")
# Names patchctl's temporary things have: a leftover one after recovery is a violation.
LEFTOVER = re.compile(
    r"\.patchctl-journal\.json|\.patchctl-[0-9a-f]{12}-\d+$|\.tmp\d+-[0-9a-f]{8}$|\.partial-"
)

BASE: dict[str, bytes] = {
    ".gitignore": b"build/\n",
    "README": b"demo upstream\n",
    **{f"src/m{i}.c": b"".join(b"int m%d_%d;\n" % (i, j) for j in range(30)) for i in range(8)},
    "include/api.h": b"".join(b"#define API_%d %d\n" % (j, j) for j in range(20)),
    "docs/old.txt": b"to be removed\n",
    "docs/notes.txt": b"notes\n",
}


def _edit(data: bytes, old: bytes, new: bytes) -> bytes:
    assert old in data, old
    return data.replace(old, new, 1)


def _stages() -> list[dict[str, bytes | Exe | None]]:
    """The file maps of the upstream and after each of the three patches."""
    one = {
        **BASE,
        "src/m0.c": _edit(BASE["src/m0.c"], b"int m0_5;\n", b"int m0_5; // patchctl 0001-one\n"),
        "src/added.c": b"int added;\n",
    }
    two = {
        **one,
        "src/m1.c": _edit(BASE["src/m1.c"], b"int m1_9;\n", b"long m1_9;\n"),
        "include/api.h": _edit(BASE["include/api.h"], b"API_3 3", b"API_3 33"),
    }
    three: dict[str, bytes | Exe | None] = {
        **two,
        "docs/old.txt": None,
        "src/m0.c": _edit(one["src/m0.c"], b"int m0_20;\n", b"int m0_20 = 1;\n"),
    }
    return [dict(BASE), dict(one), dict(two), three]


# ----------------------------------------------------------------------------- the world


@dataclass
class World:
    """Where a scenario runs: a fixed directory (absolute paths in it must not change)."""

    root: Path

    @property
    def series(self) -> Path:
        return self.root / SERIES

    @property
    def room(self) -> Path:
        return self.root / ROOM

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a patchctl process in this world."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHCTL_TEST_")}
        env.update(
            HOME=str(self.root / "home"),
            PATCHCTL_CACHE_DIR=str(self.root / "cache"),
            TMPDIR=str(self.root / "tmp"),
            PYTHONPATH=str(REPO_ROOT),
        )
        env.update(extra)
        return env

    @contextmanager
    def inside(self) -> Iterator[None]:
        """Run core functions in this process as a patchctl process of this world would."""
        saved = dict(os.environ)
        os.environ.update(self.env())
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)


@dataclass(frozen=True)
class Scenario:
    """One command to kill: how to build its world, its argv, how the next run goes."""

    name: str
    build: Callable[[World], None]
    argv: Callable[[World], list[str]]
    rerun_after_recovery: bool = True  # False: a repeated command would do it twice (import, new)
    exact_refs: bool = True  # False: a repeated `--force` may save unsaved work again


def _upstream(world: World, files: Files, pin: str = "a") -> Upstream:
    repo = new_repo(world.root / "upstream", files, message=f"pin {pin}\n".encode())
    return Upstream(kind="git", url="../../../upstream", commit=repo.commit, tree=repo.tree)


def _patches(world: World) -> list[bytes]:
    stages = _stages()
    scratch = world.root / "scratch"
    found = []
    for n in range(3):
        found.append(diff_files(scratch / str(n), stages[n], stages[n + 1]))
    shutil.rmtree(scratch)
    return found


def _series(world: World, upstream: Upstream, patches: list[bytes], count: int = 3) -> None:
    world.series.mkdir(parents=True, exist_ok=True)
    entries = []
    for n, data in enumerate(patches[:count], 1):
        pid = ["0001-one", "0002-two", "0003-three"][n - 1]
        (world.series / f"{pid}.patch").write_bytes(data)
        markers = ("// patchctl 0001-one",) if n == 1 else ()
        entries.append(Patch(id=pid, file=f"{pid}.patch", title=f"Patch {n}", markers=markers))
    save_series(Series(world.series / "series.yaml", upstream, tuple(entries)))


def _base(world: World) -> Upstream:
    (world.root / "home").mkdir(parents=True)
    (world.root / "tmp").mkdir()
    return _upstream(world, BASE)


def build_apply_create(world: World) -> None:
    """No clean room yet: apply creates it and applies three patches."""
    _series(world, _base(world), _patches(world))
    with world.inside():
        from patchctl.ops.docs import update_docs

        update_docs(world.series)


def build_apply_update(world: World) -> None:
    """The clean room holds 0001 and an older 0002; apply resets to 0001 and applies the
    current 0002 and 0003."""
    upstream = _base(world)
    patches = _patches(world)
    stages = _stages()
    older = dict(stages[2])
    older["src/m1.c"] = _edit(BASE["src/m1.c"], b"int m1_9;\n", b"short m1_9;\n")
    old_two = diff_files(world.root / "scratch", stages[1], older)
    shutil.rmtree(world.root / "scratch")
    _series(world, upstream, [patches[0], old_two], count=2)
    with world.inside():
        cleanroom_apply(world.series)
    _series(world, upstream, patches)


def build_apply_repin(world: World) -> None:
    """The upstream pin moved; the clean room holds an unsaved edit, an ignored build output
    and a branch of the user's: `apply --force` keeps them all and builds the new one."""
    _series(world, _base(world), _patches(world))
    with world.inside():
        cleanroom_apply(world.series)
    moved = new_repo(world.root / "upstream", {"docs/notes.txt": b"notes, pin b\n"}, b"pin b\n")
    series = load_series(world.series)
    from dataclasses import replace

    save_series(
        replace(series, upstream=replace(series.upstream, commit=moved.commit, tree=moved.tree))
    )
    write_files(world.room, {"build/out.bin": bytes(range(256)), "src/m5.c": b"user edit\n"})
    git = Git(world.room)
    git.update_ref("refs/heads/wip", git.rev_parse("HEAD"))


def build_capture(world: World) -> None:
    """0004-four added by `new`; the clean room edited (a change, a new file, a deletion, a
    mode change)."""
    _series(world, _base(world), _patches(world))
    with world.inside():
        cleanroom_apply(world.series)
        capture_all(world)
        add_patch(world.series, "0004-four", "Patch 4", markers=("// patchctl 0004-four",))
    write_files(world.room, USER_EDITS)


USER_EDITS: Files = {
    "src/m6.c": b"int m6; // patchctl 0004-four\n",
    "src/fresh.c": b"int fresh;\n",
    "src/m7.c": None,
    "tool.sh": Exe(b"#!/bin/sh\necho tool\n"),
}


def capture_all(world: World) -> None:
    """Record pre/post trees of the three patches (capture each on top of the last)."""
    for pid in ("0001-one", "0002-two", "0003-three"):
        cleanroom_apply(world.series, upto=pid)
        capture(world.series, pid)


def build_import(world: World) -> None:
    """A series with recorded trees, and an mbox of two more patches to import."""
    _series(world, _base(world), _patches(world))
    with world.inside():
        cleanroom_apply(world.series)
        capture_all(world)
    stages = _stages()
    after = dict(stages[3])
    mid = {**after, "src/m2.c": _edit(BASE["src/m2.c"], b"int m2_1;\n", b"int m2_1 = 2;\n")}
    last = {**mid, "src/m3.c": None, "src/imported.c": b"int imported;\n"}
    scratch = world.root / "scratch"
    first = diff_files(scratch / "a", after, mid)
    second = diff_files(scratch / "b", mid, last)
    shutil.rmtree(scratch)
    mbox = b""
    for n, body in enumerate((first, second), 1):
        mbox += (
            b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            b"From: A Contributor <a@example.invalid>\n"
            b"Subject: [PATCH] imported change %d\n\n---\n" % n + body + b"\n"
        )
    (world.root / "incoming").mkdir()
    (world.root / "incoming" / "more.mbox").write_bytes(mbox)


def build_new(world: World) -> None:
    """A series with recorded trees; `new` adds 0004-four."""
    build_apply_create(world)


def build_docs(world: World) -> None:
    """A hand edit of a title made the docs stale; `docs` regenerates them."""
    build_apply_create(world)
    path = world.series / "series.yaml"
    path.write_bytes(path.read_bytes().replace(b"title: Patch 2", b"title: Patch two"))


def build_refresh(world: World) -> None:
    """The upstream grew lines above every hunk, so each patch applies only at an offset; the
    clean room is made. `refresh --all` rewrites the three patch files (headers kept)."""
    (world.root / "home").mkdir(parents=True)
    (world.root / "tmp").mkdir()
    patches = _patches(world)
    shifted = {
        name: b"/* upstream moved on */\n/* two lines */\n" + data
        if name.endswith((".c", ".h"))
        else data
        for name, data in BASE.items()
    }
    _series(world, _upstream(world, shifted), patches)
    with world.inside():
        from patchctl.room.cleanroom import create_cleanroom, default_workdir

        create_cleanroom(load_series(world.series), default_workdir(world.series))


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "apply-create",
            build_apply_create,
            lambda w: ["cleanroom", "apply", "--series", str(w.series)],
        ),
        Scenario(
            "apply-update",
            build_apply_update,
            lambda w: ["cleanroom", "apply", "--series", str(w.series)],
        ),
        Scenario(
            "apply-repin",
            build_apply_repin,
            lambda w: ["cleanroom", "apply", "--force", "--series", str(w.series)],
            exact_refs=False,
        ),
        Scenario(
            "capture",
            build_capture,
            lambda w: ["capture", "0004-four", "--series", str(w.series)],
        ),
        Scenario(
            "import",
            build_import,
            lambda w: ["import", str(w.root / "incoming" / "more.mbox"), "--series", str(w.series)],
            rerun_after_recovery=False,
        ),
        Scenario(
            "new",
            build_new,
            lambda w: [
                "new",
                "0004-four",
                "--title",
                "Patch 4",
                "--marker",
                "// m4",
                "--series",
                str(w.series),
            ],
            rerun_after_recovery=False,
        ),
        Scenario("docs", build_docs, lambda w: ["docs", "--series", str(w.series)]),
        Scenario(
            "refresh",
            build_refresh,
            lambda w: ["refresh", "--all", "--series", str(w.series)],
        ),
    )
}


# ----------------------------------------------------------------------------- the state


@dataclass
class State:
    """What a scenario's world holds, as far as the kill test compares it."""

    files: dict[str, bytes]  # series directory and generated docs (not hidden files)
    head: str | None
    tree: str | None  # the clean room's work tree (git add -A), None without a clean room
    dirty: list[str]
    refs: dict[str, str]
    ignored: list[str]
    leftovers: list[str]
    rooms: list[str]  # the clean rooms beside it (a pin change may keep the old one)


def state(world: World) -> State:
    """The world's state now (reads only)."""
    files = {}
    for folder in (world.series, world.root / DOCS.parent):
        if folder.is_dir():
            for path in sorted(folder.rglob("*")):
                if path.is_file() and not path.name.startswith("."):
                    files[str(path.relative_to(world.root))] = path.read_bytes()
    head = tree = None
    dirty: list[str] = []
    refs: dict[str, str] = {}
    ignored: list[str] = []
    if (world.room / ".git").is_dir():
        git = Git(world.room)
        head = git.maybe_rev("HEAD")
        tree = git.snapshot_worktree()
        dirty = git.status_paths()
        raw = git.text("for-each-ref", "--format=%(refname) %(objectname)")
        refs = dict(line.split(" ", 1) for line in raw.splitlines())
        ignored = git.ignored_paths()
    rooms = sorted(p.name for p in world.room.parent.glob("demo*") if (p / ".git").is_dir())
    return State(files, head, tree, dirty, refs, ignored, leftovers(world), rooms)


def leftovers(world: World) -> list[str]:
    """Journals, staged copies, temporary files, partial clean rooms, git locks, temp dirs."""
    found = []
    for folder in (world.series, world.root / DOCS.parent, world.room.parent):
        if folder.is_dir():
            found += [str(p) for p in folder.iterdir() if LEFTOVER.search(p.name)]
    git_dir = world.room / ".git"
    if git_dir.is_dir():
        found += [str(p) for p in git_dir.glob("*.lock")]
        found += [str(p) for p in (git_dir / "refs").rglob("*.lock")]
    tmp = world.root / "tmp"
    if tmp.is_dir():
        found += [str(p) for p in tmp.iterdir()]
    return sorted(found)


# ----------------------------------------------------------------------------- trials


@dataclass
class Trial:
    """One kill and what was found after it."""

    scenario: str
    mode: str  # "hook" | "delay"
    at: float  # the kill point number, or the delay in seconds
    killed: bool
    violations: list[str] = field(default_factory=list)
    lost: int = 0  # user data (edits, ignored files, branches, unsaved work) not found anywhere
    saved: int = 0  # backups recovery made beyond those of an uninterrupted run


@dataclass
class Prepared:
    """A scenario's template and what an uninterrupted run gives."""

    scenario: Scenario
    world: World
    template: Path
    before: State
    after: State
    points: int
    seconds: float


def run_patchctl(world: World, argv: list[str], **env: str) -> subprocess.Popen[bytes]:
    """Start `python -m patchctl ARGV` in its own process group in the world."""
    return subprocess.Popen(
        [sys.executable, "-m", "patchctl", *argv],
        cwd=world.root / "project",
        env=world.env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def restore(world: World, template: Path) -> None:
    """The world as the template holds it (same absolute paths)."""
    if world.root.exists():
        shutil.rmtree(world.root)
    shutil.copytree(template, world.root, symlinks=True)


def prepare(scenario: Scenario, world: World, template: Path) -> Prepared:
    """Build the scenario's world, keep it as a template, run the command once uninterrupted
    (counting its kill points and timing it), and record the states before and after."""
    if world.root.exists():
        shutil.rmtree(world.root)
    world.root.mkdir(parents=True)
    scenario.build(world)
    if template.exists():
        shutil.rmtree(template)
    shutil.copytree(world.root, template, symlinks=True)
    before = state(world)
    trace = world.root.parent / f"{world.root.name}.trace"
    trace.unlink(missing_ok=True)
    started = time.monotonic()
    proc = run_patchctl(world, scenario.argv(world), PATCHCTL_TEST_KILL_TRACE=str(trace))
    _out, err = proc.communicate()
    seconds = time.monotonic() - started
    assert proc.returncode == 0, err.decode()
    points = len(trace.read_text().splitlines())
    trace.unlink()
    return Prepared(scenario, world, template, before, state(world), points, seconds)


def trial(prep: Prepared, rng: random.Random, mode: str) -> Trial:
    """Restore the world, kill the command once, recover, finish, and check everything."""
    world, scenario = prep.world, prep.scenario
    restore(world, prep.template)
    if mode == "hook":
        at: float = rng.randint(1, prep.points)
        proc = run_patchctl(world, scenario.argv(world), PATCHCTL_TEST_KILL_AT=str(int(at)))
        proc.communicate()
    else:
        at = round(rng.uniform(0.0, prep.seconds * 1.1), 3)
        proc = run_patchctl(world, scenario.argv(world))
        try:
            proc.communicate(timeout=at)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    result = Trial(scenario.name, mode, at, proc.returncode == -signal.SIGKILL)
    _check_after_kill(prep, result)
    _recover(prep, result)
    return result


def _check_after_kill(prep: Prepared, result: Trial) -> None:
    now = state(prep.world)
    series_yaml = str(SERIES / "series.yaml")
    try:
        yaml.safe_load(now.files.get(series_yaml, b""))
    except yaml.YAMLError as exc:
        result.violations.append(f"series.yaml does not parse after the kill: {exc}")
    for name in sorted(set(now.files) | set(prep.before.files) | set(prep.after.files)):
        held = now.files.get(name)
        if held != prep.before.files.get(name) and held != prep.after.files.get(name):
            result.violations.append(f"{name} holds neither its old nor its new bytes")
    result.lost += _lost(prep, result)


def _lost(prep: Prepared, result: Trial) -> int:
    """User data that is nowhere to be found (in the clean room or its backups)."""
    world = prep.world
    lost = 0
    if prep.scenario.name == "capture":
        for name, entry in USER_EDITS.items():
            path = world.room / name
            want = None if entry is None else entry.data if isinstance(entry, Exe) else entry
            have = path.read_bytes() if path.exists() else None
            if have != want:
                result.violations.append(f"the user's edit of {name} is gone from the clean room")
                lost += 1
    if prep.scenario.name == "apply-repin":
        lost += _lost_repin(world, result)
    return lost


def _lost_repin(world: World, result: Trial) -> int:
    """The old clean room's ignored file, branch and unsaved edit: in the room, in the old
    clean room a pin change keeps (`demo.old`), or in a backup."""
    places = [p for p in sorted(world.room.parent.glob("demo*")) if (p / ".git").is_dir()]
    lost = 0
    if not any((p / "build" / "out.bin").is_file() for p in places):
        result.violations.append("the ignored build/out.bin is nowhere")
        lost += 1
    if not any(Git(p).maybe_rev("refs/heads/wip") for p in places):
        result.violations.append("the branch wip is nowhere")
        lost += 1
    edit_kept = any(
        (p / "src/m5.c").is_file() and (p / "src/m5.c").read_bytes() == b"user edit\n"
        for p in places
    )
    backups = world.room.parent / "demo.backups"
    saved = backups.is_dir() and any(
        b"+user edit" in f.read_bytes() for f in backups.glob("*.patch")
    )
    if not (edit_kept or saved):
        result.violations.append("the unsaved edit of src/m5.c is nowhere")
        lost += 1
    return lost


RECOVER = (
    "import sys; from pathlib import Path; from patchctl.txn.session import series_session\n"
    "with series_session(Path(sys.argv[1]), check_files=False) as s:\n"
    "    s.lock_cleanroom(None)\n"
)


def _recover(prep: Prepared, result: Trial) -> None:
    world, scenario = prep.world, prep.scenario
    proc = subprocess.run(
        [sys.executable, "-c", RECOVER, str(world.series)],
        cwd=world.root / "project",
        env=world.env(),
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        result.violations.append(f"the recovering run failed: {proc.stderr.decode()[-400:]}")
        return
    now = state(world)
    if now.files not in (prep.before.files, prep.after.files):
        result.violations.append("after recovery the series files are neither all old nor all new")
    if now.leftovers:
        result.violations.append(f"left after recovery: {now.leftovers}")
    ours = [p for p in now.dirty if scenario.name.startswith("apply") and p != "src/m5.c"]
    if ours:
        result.violations.append(f"unsaved work patchctl made is left after recovery: {ours}")
    if scenario.name == "capture" and now.files == prep.after.files and now.head != prep.after.head:
        result.violations.append("the patch is captured but the clean room's HEAD did not follow")
    done = now.files == prep.after.files and (now.head == prep.after.head or not now.head)
    if scenario.rerun_after_recovery or not done:
        rerun = run_patchctl(world, scenario.argv(world))
        _out, err = rerun.communicate()
        if rerun.returncode != 0:
            result.violations.append(
                f"the next run exited {rerun.returncode}: {err.decode()[-400:]}"
            )
    _compare_end(prep, result)


def _compare_end(prep: Prepared, result: Trial) -> None:
    end, want = state(prep.world), prep.after
    if end.files != want.files:
        names = set(end.files) | set(want.files)
        differ = sorted(k for k in names if end.files.get(k) != want.files.get(k))
        result.violations.append(f"end state differs from an uninterrupted run: {differ}")
    if (end.head, end.tree, end.dirty) != (want.head, want.tree, want.dirty):
        result.violations.append("the clean room's end state differs from an uninterrupted run")
    if end.rooms != want.rooms:
        result.violations.append(f"clean rooms differ: {end.rooms} != {want.rooms}")
    result.saved = len(_backups(end.refs)) - len(_backups(want.refs))
    if prep.scenario.exact_refs and _others(end.refs) != _others(want.refs):
        result.violations.append(f"refs differ: {end.refs} != {want.refs}")
    if end.ignored != want.ignored:
        result.violations.append(f"ignored files differ: {end.ignored} != {want.ignored}")
    if end.leftovers:
        result.violations.append(f"left at the end: {end.leftovers}")


def _backups(refs: dict[str, str]) -> list[str]:
    return [name for name in refs if name.startswith("refs/patchctl/backups/")]


def _others(refs: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in refs.items() if not k.startswith("refs/patchctl/backups/")}


def summary(trials: list[Trial]) -> dict[str, object]:
    """Counts per scenario and in total (the shape recorded under docs/)."""
    per: dict[str, dict[str, int]] = {}
    for t in trials:
        row = per.setdefault(
            t.scenario, {"trials": 0, "killed": 0, "violations": 0, "lost": 0, "saved": 0}
        )
        row["trials"] += 1
        row["killed"] += int(t.killed)
        row["violations"] += len(t.violations)
        row["lost"] += t.lost
        row["saved"] += t.saved
    return {
        "trials": len(trials),
        "killed": sum(int(t.killed) for t in trials),
        "violations": sum(len(t.violations) for t in trials),
        "lost": sum(t.lost for t in trials),
        "saved": sum(t.saved for t in trials),
        "per_scenario": per,
        "failures": [asdict(t) for t in trials if t.violations or t.lost],
    }


def dump(path: Path, data: object) -> None:
    """Write `data` as JSON (sorted keys, one trailing newline)."""
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
