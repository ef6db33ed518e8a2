"""Benchmark: patchctl on Debian bookworm's `linux` (165 quilt patches on a 78,661-file tree).

Usage (from the project root; not run in CI):

    nice -n 10 python benchmarks/debian_kernel.py --workdir /tmp/patchctl-kernel \
        --out results/debian-kernel/2026-12-01/debian-kernel.json

1. Fetch the source package once with `apt-get source --download-only linux` through a private
   apt configuration (a deb-src line for bookworm; the system's apt setup is never touched),
   cached in `$PATCHCTL_TEST_CACHE` (default ~/.cache/patchctl-test) and checked against the
   .dsc's sha256 sums on every use (tests/support/debian.py, as the Debian integration test).
   The orig tarball is the `archive` upstream.
2. Reference: `tar x` of the orig tarball + `git init` + `git add -A` + `git commit` (auto gc
   off, as patchctl pins it: a background gc would otherwise run into the next step).
3. `patchctl cleanroom apply` with an empty series and an empty (private) patchctl cache:
   clean-room creation.
4. `patchctl import debian/patches/series`: the series as Debian ships it (hunks at an offset
   are noted; strict apply refuses those patches, exit 10, which is checked).
5. `patchctl refresh --all`: the drifted patches are rewritten in place (header bytes kept,
   diff regenerated); the others are left byte for byte.
6. `patchctl cleanroom apply` of the refreshed series (165 patches) vs the reference
   `git apply --index` loop of the same files on the reference repository, and vs
   `patch -p1 --fuzz=0` (quilt's engine, as `quilt push -a --fuzz=0`) of Debian's own files on
   a fresh `tar x`: all three final trees must be equal.
7. `patchctl verify --all`, `verify FIRST`, `verify TOP` of the refreshed series.
8. The rt series on top: imported as shipped, `refresh --all`, applied (the 165 first commits
   kept), verified, and compared with `patch -p1 --fuzz=0` of Debian's rt files.

Every step runs as a subprocess; wall seconds and the child's peak RSS are recorded. This is a
measurement, not a test: it writes JSON with every number and the commands.

`--steps create --repeat N` runs only steps 2 and 3, N times each, back to back (reference
first), and records every run and the medians: on a shared machine, the creation ratio of
one run is at the mercy of whatever else runs during it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from patchctl.fsio import sha256_file
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.runner import hermetic_env
from patchctl.series.model import load_series

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.debian import fetch_debian_source, source_files

# ----------------------------------------------------------------------------- measuring


def measured(
    cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> dict[str, Any]:
    """Run `cmd` (must succeed): wall seconds, peak RSS (MiB) and stdout."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE)
    out = proc.stdout.read() if proc.stdout else b""
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    return {
        "cmd": cmd,
        "code": code,
        "wall_s": round(wall, 2),
        "max_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "stdout": out,
    }


def step(
    results: dict[str, Any],
    name: str,
    cmd: list[str],
    *,
    ok: tuple[int, ...] = (0,),
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> bytes:
    """Measure one step into `results[name]`; exit unless its status is in `ok`."""
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(cmd)[:160]}", flush=True)
    got = measured(cmd, env, cwd)
    out: bytes = got.pop("stdout")
    results[name] = got
    print(f"    {got['wall_s']} s, {got['max_rss_mib']} MiB, exit {got['code']}", flush=True)
    if got["code"] not in ok:
        sys.exit(f"{name} exited {got['code']}")
    return out


def shell(script: str) -> list[str]:
    return ["bash", "-euo", "pipefail", "-c", script]


# ----------------------------------------------------------------------------- the flow


def write_series(directory: Path, orig: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "series.yaml").write_text(
        "version: 1\nupstream:\n  kind: archive\n"
        f"  path: {orig}\n  sha256: {sha256_file(orig)}\npatches: []\n"
    )
    return directory


def quilt_files(series: Path) -> str:
    """The patch files a quilt series file lists, space-separated (for a shell loop)."""
    return " ".join(
        str(series.parent / line.split()[0])
        for line in series.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )


def worktree_tree(directory: Path) -> str:
    """The tree of every file under `directory` (ignored ones too: `add -A -f`)."""
    if not (directory / ".git").exists():
        subprocess.run(
            ["git", "init", "-q"], cwd=directory, check=True, env=hermetic_env(directory)
        )
    subprocess.run(
        ["git", "add", "-A", "-f"], cwd=directory, check=True, env=hermetic_env(directory)
    )
    return Git(directory).write_tree()


def create_steps(
    r: dict[str, Any], pc: list[str], work: Path, orig: Path, env: dict[str, str], run: str = ""
) -> Path:
    """Steps 2 and 3: the reference clean room (`ref<run>`), then patchctl's (`room<run>`,
    from an empty cache); the series directory made for it."""
    ref = work / f"ref{run}"
    ref.mkdir()
    step(
        r,
        f"ref_create{run}",
        shell(
            f"tar xf {orig} -C {ref} --strip-components=1 && cd {ref} && git init -q && "
            "git add -A -f && git -c gc.auto=0 -c user.name=b -c user.email=b@b commit -q -m base"
        ),
        cwd=ref,
    )
    s1 = write_series(work / f"p1{run}" / "patches" / "kernel", orig)
    step(
        r,
        f"patchctl_create{run}",
        [
            *pc,
            "cleanroom",
            "apply",
            "--series",
            str(s1),
            "--workdir",
            str(work / f"room{run}"),
            "--json",
        ],
        env={**env, "PATCHCTL_CACHE_DIR": str(work / f"cache{run}")},  # an empty cache
    )
    return s1


def machine() -> dict[str, Any]:
    git = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
        "python": platform.python_version(),
        "git": git,
    }


def only_create(args: argparse.Namespace, pc: list[str], work: Path, orig: Path) -> None:
    """`--steps create`: steps 2 and 3, `--repeat` times; every run and the medians."""
    r: dict[str, Any] = {}
    loads = []
    for run in range(args.repeat):
        loads.append(os.getloadavg())
        create_steps(r, pc, work, orig, dict(os.environ), f"-{run}")
        for name in (f"ref-{run}", f"room-{run}", f"cache-{run}"):
            shutil.rmtree(work / name, ignore_errors=True)  # disk: 3 GB a run
    ref = statistics.median(r[f"ref_create-{i}"]["wall_s"] for i in range(args.repeat))
    ours = statistics.median(r[f"patchctl_create-{i}"]["wall_s"] for i in range(args.repeat))
    ratios = [
        round(r[f"patchctl_create-{i}"]["wall_s"] / r[f"ref_create-{i}"]["wall_s"], 2)
        for i in range(args.repeat)
    ]
    result = {
        "orig": orig.name,
        "orig_sha256": sha256_file(orig),
        "runs": args.repeat,
        "median_s": {"ref_create": ref, "patchctl_create": ours},
        "ratio_of_medians": round(ours / ref, 2),
        "ratio_per_run": ratios,
        "load_avg_before_each_run": loads,
        "steps": r,
        "machine": machine(),
        "command": " ".join(sys.argv),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("median_s", "ratio_of_medians", "ratio_per_run")}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--package", default="linux", help="another source package (a smoke run)")
    parser.add_argument("--patchctl", default=str(Path(sys.executable).parent / "patchctl"))
    parser.add_argument("--steps", choices=("all", "create"), default="all")
    parser.add_argument("--repeat", type=int, default=3, help="runs of --steps create")
    args = parser.parse_args()
    work = args.workdir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    source = source_files(fetch_debian_source(args.package))
    orig = source.orig
    pc = [args.patchctl]
    if args.steps == "create":
        only_create(args, pc, work, orig)
        return
    debian_tar = source.debian
    subprocess.run(["tar", "xf", str(debian_tar), "-C", str(work)], check=True)
    quilt = work / "debian" / "patches"
    env = {**os.environ, "PATCHCTL_CACHE_DIR": str(work / "cache")}
    r: dict[str, Any] = {}
    top = orig.name.split(".orig")[0].replace("_", "-")  # linux-6.1.176

    # 2, 3. the reference clean room, then patchctl's from an empty cache
    s1 = create_steps(r, pc, work, orig, dict(os.environ))
    ref, room = work / "ref", work / "room"
    base_tree = Git(ref).tree_of("HEAD")
    where = ["--series", str(s1), "--workdir", str(room), "--json"]

    # 4. import Debian's series as shipped; strict apply refuses the drifted ones
    out = step(r, "patchctl_import", [*pc, "import", str(quilt / "series"), *where], env=env)
    imported = json.loads(out)["imported"]
    drifted = {e["id"] for e in imported if e.get("drift")}
    ids = [e["id"] for e in imported]
    step(r, "patchctl_apply_as_shipped", [*pc, "cleanroom", "apply", *where], ok=(10,), env=env)

    # 5. refresh the drifted patches in place
    out = step(r, "patchctl_refresh", [*pc, "refresh", "--all", *where], env=env)
    refreshed = {e["id"] for e in json.loads(out)["patches"] if e["refreshed"]}
    assert refreshed == drifted, ("refresh rewrote other patches", refreshed ^ drifted)

    # 6. strict apply of all patches vs the git apply loop and quilt's engine
    out = step(r, "patchctl_apply", [*pc, "cleanroom", "apply", *where], env=env)
    patchctl_tree = json.loads(out)["tree"]
    series = load_series(s1)
    files = " ".join(str(series.patch_path(series.patch(pid))) for pid in ids)
    step(
        r,
        "ref_git_apply_index_loop",
        shell(
            f"cd {ref} && for p in {files}; do "
            "git apply --index -p1 --whitespace=nowarn < $p; done",
        ),
        cwd=ref,
    )
    ref_tree = Git(ref).write_tree()
    qdir = work / "quilt"
    qdir.mkdir()
    subprocess.run(["tar", "xf", str(orig), "-C", str(qdir), "--strip-components=1"], check=True)
    debian_files = quilt_files(quilt / "series")
    step(
        r,
        "ref_patch_fuzz0_loop",
        shell(
            f"cd {qdir} && for p in {debian_files}; do patch -p1 -s --fuzz=0 "
            f"--no-backup-if-mismatch < $p; done"
        ),
        cwd=qdir,
    )
    subprocess.run(["git", "init", "-q"], cwd=qdir, check=True)
    quilt_tree = worktree_tree(qdir)

    # 7. verify
    for name, which in (
        ("verify_all", ["--all"]),
        ("verify_first", [ids[0]]),
        ("verify_top", [ids[-1]]),
    ):
        step(r, f"patchctl_{name}", [*pc, "verify", *which, *where], env=env)

    def ratio(a: str, b: str) -> float:
        return round(float(r[a]["wall_s"]) / float(r[b]["wall_s"]), 2)

    result = {
        "package": top,
        "orig": orig.name,
        "orig_sha256": sha256_file(orig),
        "files": len(Git(ref).run("ls-files", "-z").split(b"\0")) - 1,
        "patches": len(ids),
        "drifted_as_shipped": len(drifted),
        "refreshed": len(refreshed),
        "base_tree": base_tree,
        "final_tree": {
            "patchctl": patchctl_tree,
            "git_apply_loop": ref_tree,
            "patch_fuzz0_loop": quilt_tree,
        },
        "trees_equal": patchctl_tree == ref_tree == quilt_tree,
        "ratios": {
            "create_vs_tar_add_commit": ratio("patchctl_create", "ref_create"),
            "apply_vs_git_apply_index_loop": ratio("patchctl_apply", "ref_git_apply_index_loop"),
            "verify_all_vs_apply": ratio("patchctl_verify_all", "patchctl_apply"),
            "verify_top_vs_verify_first": ratio("patchctl_verify_top", "patchctl_verify_first"),
        },
        "steps": r,
        "machine": machine(),
        "command": " ".join(sys.argv),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("trees_equal", "ratios")}, indent=2))
    rt_series = work / "debian" / "patches-rt" / "series"
    if rt_series.is_file():
        result["rt"] = rt(pc, env, where, qdir, rt_series)
        result["machine_after_rt"] = machine()
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result["rt"], indent=2))


def rt(
    pc: list[str], env: dict[str, str], where: list[str], qdir: Path, rt_series: Path
) -> dict[str, Any]:
    """The rt series on top: imported onto the refreshed series as shipped, its drifted
    patches refreshed in place, applied (the first patches' commits are kept: same ids and
    bytes), verified, and compared with quilt's engine on the same tree."""
    r: dict[str, Any] = {}
    out = step(r, "patchctl_import_rt", [*pc, "import", str(rt_series), *where], env=env)
    imported = json.loads(out)["imported"]
    drifted = {e["id"] for e in imported if e.get("drift")}
    out = step(r, "patchctl_refresh_rt", [*pc, "refresh", "--all", *where], env=env)
    refreshed = {e["id"] for e in json.loads(out)["patches"] if e["refreshed"]}
    out = step(r, "patchctl_apply_rt", [*pc, "cleanroom", "apply", *where], env=env)
    tree = json.loads(out)["tree"]
    step(r, "patchctl_verify_all_rt", [*pc, "verify", "--all", *where], env=env)
    step(
        r,
        "ref_patch_fuzz0_loop_rt",
        shell(
            f"cd {qdir} && for p in {quilt_files(rt_series)}; do patch -p1 -s --fuzz=0 "
            "--no-backup-if-mismatch < $p; done"
        ),
        cwd=qdir,
    )
    quilt_tree = worktree_tree(qdir)
    return {
        "patches": len(imported),
        "drifted_as_shipped": len(drifted),
        "refreshed": len(refreshed),
        "final_tree": {"patchctl": tree, "patch_fuzz0_loop": quilt_tree},
        "trees_equal": tree == quilt_tree,
        "steps": r,
    }


if __name__ == "__main__":
    main()
