"""Benchmark: patchctl on Debian bookworm's `linux` (165 quilt patches on a 78,661-file tree).

Usage (from the project root; not run in CI):

    nice -n 10 python benchmarks/debian_kernel.py --workdir /tmp/patchctl-kernel \
        --out docs/benchmarks/debian-kernel.json

1. Fetch the source package once with `apt-get source --download-only linux` through a private
   apt configuration (a deb-src line for bookworm; the system's apt setup is never touched),
   cached in `$PATCHCTL_TEST_CACHE` (default ~/.cache/patchctl-test), as the Debian
   integration test does. The orig tarball is the `archive` upstream.
2. Reference: `tar x` of the orig tarball + `git init` + `git add -A` + `git commit` (auto gc
   off, as patchctl pins it: a background gc would otherwise run into the next step).
3. `patchctl cleanroom apply` with an empty series and an empty (private) patchctl cache:
   clean-room creation.
4. `patchctl import debian/patches/series`: the series as Debian ships it (hunks at an offset
   are noted; strict apply refuses those patches, exit 10, which is checked).
5. Refresh: every patch with offset notes is regenerated from the trees import recorded
   (its header bytes kept, then `git diff-tree -p --binary --full-index pre post`), the others
   kept byte for byte; the refreshed quilt series is imported into a second series (no drift).
   After the lifecycle issue's `refresh` is merged, `patchctl refresh` does this step.
6. `patchctl cleanroom apply` of the refreshed series (165 patches) vs the reference
   `git apply --index` loop of the same files on the reference repository, and vs
   `patch -p1 --fuzz=0` (quilt's engine, as `quilt push -a --fuzz=0`) of Debian's own files on
   a fresh `tar x`: all three final trees must be equal.
7. `patchctl verify --all`, `verify FIRST`, `verify TOP` of the refreshed series.

Every step runs as a subprocess; wall seconds and the child's peak RSS are recorded. This is a
measurement, not a test: it writes JSON with every number and the commands.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from patchctl.git import Git, hermetic_env
from patchctl.patchfile import diff_trees
from patchctl.series import load_series

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
CACHE = Path(os.environ.get("PATCHCTL_TEST_CACHE") or Path.home() / ".cache" / "patchctl-test")
DIFF_START = (b"--- ", b"diff --git ", b"Index: ")


# ----------------------------------------------------------------------------- the source


def fetch_source(cache: Path, package: str) -> Path:
    """The directory holding <package>_*.dsc, .orig.tar.* and .debian.tar.* (fetched once)."""
    src = cache / "debian-src" / SUITE / package
    if list(src.glob("*.orig.tar.*")) and list(src.glob("*.debian.tar.*")):
        return src
    apt = cache / "apt" / SUITE
    for sub in ("lists/partial", "cache/archives/partial"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    signed = f"[signed-by={KEYRING}] " if Path(KEYRING).is_file() else ""
    (apt / "sources.list").write_text(f"deb-src {signed}{MIRROR} {SUITE} main\n")
    opts = {
        "Dir::Etc::SourceList": str(apt / "sources.list"),
        "Dir::Etc::SourceParts": "/nonexistent",
        "Dir::State::Lists": str(apt / "lists"),
        "Dir::Cache": str(apt / "cache"),
        "Debug::NoLocking": "1",
    }
    if os.geteuid() == 0:
        opts["APT::Sandbox::User"] = "root"
    args = ["-q", *(a for k, v in opts.items() for a in ("-o", f"{k}={v}"))]
    src.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", *args, "update"], check=True, capture_output=True)
    subprocess.run(["apt-get", *args, "source", "--download-only", package], check=True, cwd=src)
    return src


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
        f"  path: {orig}\n  sha256: {sha256(orig)}\npatches: []\n"
    )
    return directory


def refreshed_quilt(series_dir: Path, room: Path, drifted: set[str], target: Path) -> Path:
    """A quilt directory of the imported series: drifted patches regenerated from their
    recorded trees (header kept), the others byte for byte."""
    series = load_series(series_dir)
    git = Git(room)
    target.mkdir(parents=True)
    names = []
    for patch in series.patches:
        data = series.patch_path(patch).read_bytes()
        if patch.id in drifted:
            assert patch.pre_tree and patch.post_tree
            lines = data.splitlines(keepends=True)
            first = next(i for i, line in enumerate(lines) if line.startswith(DIFF_START))
            data = b"".join(lines[:first]) + diff_trees(git, patch.pre_tree, patch.post_tree)
        (target / f"{patch.id}.patch").write_bytes(data)
        names.append(f"{patch.id}.patch")
    (target / "series").write_text("".join(f"{n}\n" for n in names))
    return target


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--package", default="linux", help="another source package (a smoke run)")
    parser.add_argument("--patchctl", default=str(Path(sys.executable).parent / "patchctl"))
    args = parser.parse_args()
    work = args.workdir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    src = fetch_source(CACHE, args.package)
    orig = next(src.glob("*.orig.tar.*"))
    debian_tar = next(src.glob("*.debian.tar.*"))
    subprocess.run(["tar", "xf", str(debian_tar), "-C", str(work)], check=True)
    quilt = work / "debian" / "patches"
    env = {**os.environ, "PATCHCTL_CACHE_DIR": str(work / "cache")}  # an empty cache
    pc = [args.patchctl]
    r: dict[str, Any] = {}
    top = orig.name.split(".orig")[0].replace("_", "-")  # linux-6.1.176

    # 2. reference clean room
    ref = work / "ref"
    ref.mkdir()
    step(
        r,
        "ref_create",
        shell(
            f"tar xf {orig} -C {ref} --strip-components=1 && cd {ref} && git init -q && "
            "git add -A -f && git -c gc.auto=0 -c user.name=b -c user.email=b@b commit -q -m base"
        ),
        cwd=ref,
    )
    base_tree = Git(ref).tree_of("HEAD")

    # 3. clean-room creation, empty cache
    s1 = write_series(work / "p1" / "patches" / "kernel", orig)
    room = work / "room"
    step(
        r,
        "patchctl_create",
        [*pc, "cleanroom", "apply", "--series", str(s1), "--workdir", str(room), "--json"],
        env=env,
    )

    # 4. import Debian's series as shipped; strict apply refuses the drifted ones
    out = step(
        r,
        "patchctl_import",
        [
            *pc,
            "import",
            str(quilt / "series"),
            "--series",
            str(s1),
            "--workdir",
            str(room),
            "--json",
        ],
        env=env,
    )
    imported = json.loads(out)["imported"]
    drifted = {e["id"] for e in imported if e.get("drift")}
    ids = [e["id"] for e in imported]
    step(
        r,
        "patchctl_apply_as_shipped",
        [*pc, "cleanroom", "apply", "--series", str(s1), "--workdir", str(room), "--json"],
        ok=(10,),
        env=env,
    )

    # 5. refresh (regenerate the drifted patches), import the refreshed series
    fresh = refreshed_quilt(s1, room, drifted, work / "refreshed")
    s2 = write_series(work / "p2" / "patches" / "kernel", orig)
    out = step(
        r,
        "patchctl_import_refreshed",
        [
            *pc,
            "import",
            str(fresh / "series"),
            "--series",
            str(s2),
            "--workdir",
            str(room),
            "--json",
        ],
        env=env,
    )
    assert not any(e.get("drift") for e in json.loads(out)["imported"]), "refresh left drift"

    # 6. strict apply of all patches vs the git apply loop and quilt's engine
    out = step(
        r,
        "patchctl_apply",
        [*pc, "cleanroom", "apply", "--series", str(s2), "--workdir", str(room), "--json"],
        env=env,
    )
    patchctl_tree = json.loads(out)["tree"]
    files = " ".join(str(fresh / f"{pid}.patch") for pid in ids)
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
        step(
            r,
            f"patchctl_{name}",
            [*pc, "verify", *which, "--series", str(s2), "--workdir", str(room), "--json"],
            env=env,
        )

    def ratio(a: str, b: str) -> float:
        return round(float(r[a]["wall_s"]) / float(r[b]["wall_s"]), 2)

    result = {
        "package": top,
        "orig": orig.name,
        "orig_sha256": sha256(orig),
        "files": len(Git(ref).run("ls-files", "-z").split(b"\0")) - 1,
        "patches": len(ids),
        "drifted_as_shipped": len(drifted),
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
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg": os.getloadavg(),
            "python": platform.python_version(),
            "git": subprocess.run(
                ["git", "--version"], capture_output=True, text=True
            ).stdout.strip(),
        },
        "command": " ".join(sys.argv),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("trees_equal", "ratios")}, indent=2))
    rt_series = work / "debian" / "patches-rt" / "series"
    if rt_series.is_file():
        result["rt"] = rt(pc, env, s2, room, qdir, rt_series, work)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result["rt"], indent=2))


def rt(
    pc: list[str],
    env: dict[str, str],
    s2: Path,
    room: Path,
    qdir: Path,
    rt_series: Path,
    work: Path,
) -> dict[str, Any]:
    """The rt series on top: imported onto the refreshed series, its drifted patches refreshed,
    the whole stack imported again (a third series) and applied (the first patches are kept:
    same ids and bytes), verified, and compared with quilt's engine on the same tree."""
    r: dict[str, Any] = {}
    where = ["--workdir", str(room), "--json"]
    out = step(
        r,
        "patchctl_import_rt",
        [*pc, "import", str(rt_series), "--series", str(s2), *where],
        env=env,
    )
    imported = json.loads(out)["imported"]
    drifted = {e["id"] for e in imported if e.get("drift")}
    fresh = refreshed_quilt(s2, room, drifted, work / "refreshed-rt")
    s3 = write_series(work / "p3" / "patches" / "kernel", Path(load_series(s2).upstream.path or ""))
    step(
        r,
        "patchctl_import_refreshed_all",
        [*pc, "import", str(fresh / "series"), "--series", str(s3), *where],
        env=env,
    )
    out = step(
        r, "patchctl_apply_rt", [*pc, "cleanroom", "apply", "--series", str(s3), *where], env=env
    )
    tree = json.loads(out)["tree"]
    step(
        r, "patchctl_verify_all_rt", [*pc, "verify", "--all", "--series", str(s3), *where], env=env
    )
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
        "final_tree": {"patchctl": tree, "patch_fuzz0_loop": quilt_tree},
        "trees_equal": tree == quilt_tree,
        "steps": r,
    }


if __name__ == "__main__":
    main()
