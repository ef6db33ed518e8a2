"""Integration: a REAL llamafile tree (Mozilla llamafile 6b46419) as an `archive` upstream.

The archive (`llamafile-6b46419-nomodels.tar.xz`: the tree without its test models and two
large sources, `third_party/sqlite/sqlite3.c` and `stable-diffusion.cpp/vocab.hpp`) is not
downloaded: it is looked up at `$PATCHCTL_TEST_LLAMAFILE_ARCHIVE`, else in `shared/upstreams/`
beside the repository (or one level further up, for a git worktree), else in patchctl's own
cache by its sha256 (where any earlier clean room of it stored it). Without it every test
here is SKIPPED, with a reason that says so: a skip is never a pass.

What runs on it:
- a two-patch series (a llamafile source, `llamafile/tinyblas.cu`, and the CUDA build script,
  `llamafile/cuda.sh`; `tests/data/llamafile-6b46419/`) applies strictly and round-trips;
- `patchctl build` detects the llamafile backend and, without cosmocc, exits 14 naming the
  tree's pinned `.cosmocc/3.9.7`;
- the CUDA part runs the tree's real cuda.sh with a recording nvcc: the exact nvcc command line;
- the cosmocc `make` command line runs against the real Makefile (`make -n`) with a stand-in
  toolchain that records what the Makefile asks it to do.
The real nvcc build of ggml-cuda.so is too long for a test (docs/benchmarks/ keeps its run).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from patchctl.cli.main import main
from patchctl.gitlayer.git import Git
from patchctl.ops.build import toolchain
from patchctl.ops.build.config import BuildConfig
from patchctl.ops.build.manifest import read_manifest
from patchctl.ops.build.plan import plan_build
from patchctl.ops.build.run import _export_tree, execute_plan
from patchctl.upstream.sources import find_cached

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "llamafile-6b46419"
ARCHIVE_NAME = "llamafile-6b46419-nomodels.tar.xz"
ARCHIVE_SHA = "9ba3b0b152f103d33373042ab0c2378a0502cb95e69239e8061fd3a9d65cd3f4"
# The archive's tree (its single top dir stripped), computed independently with
# `tar xJf` + `git add -A -f` + `git write-tree`.
BASE_TREE = "ac40c366a59f601b6cab0114699f85033a0090b1"
PATCHES = (
    ("0001-tinyblas-note", "tinyblas: a note in a llamafile source file", "// patchctl-test 0001"),
    ("0002-cuda-sh-note", "cuda.sh: a note in the CUDA build script", "# patchctl-test 0002"),
)
POST_TREES = (
    "8ac413c1d6d09d2e6982078b90a899e45975e864",
    "102b2fbd3a249741735410985a7731de8f77cdc4",
)
# The files the archive left out that the Makefile lists as sources (see the module doc).
LEFT_OUT = ("third_party/sqlite/sqlite3.c", "stable-diffusion.cpp/vocab.hpp")
# The tools the real build/config.mk derives from $(COSMOCC).
COSMOCC_TOOLS = ("cosmocc", "cosmoc++", "ar.ape", "zipobj", "mkdeps")
# cuda.sh's nvcc flags after its own -gencode list (6b46419), in order.
CUDA_SH_FLAGS = (
    "--shared",
    "--use_fast_math",
    "--forward-unknown-to-host-compiler",
    "--compiler-options",
    "-fPIC -O2",
    "-DNDEBUG",
    "-DGGML_BUILD=1",
    "-DGGML_SHARED=1",
    "-DGGML_CUDA_MMV_Y=1",
    "-DGGML_MULTIPLATFORM",
    "-DGGML_CUDA_DMMV_X=32",
    "-DK_QUANTS_PER_ITERATION=2",
    "-DGGML_CUDA_PEER_MAX_BATCH_SIZE=128",
    "-DGGML_MINIMIZE_CODE_SIZE",
    "-DGGML_USE_TINYBLAS",
)


def find_archive() -> Path | None:
    """The archive from $PATCHCTL_TEST_LLAMAFILE_ARCHIVE or a shared/upstreams/ nearby."""
    explicit = os.environ.get("PATCHCTL_TEST_LLAMAFILE_ARCHIVE")
    if explicit:
        return Path(explicit) if Path(explicit).is_file() else None
    for base in (REPO.parent, REPO.parent.parent):
        candidate = base / "shared" / "upstreams" / ARCHIVE_NAME
        if candidate.is_file():
            return candidate
    return find_cached(ARCHIVE_SHA)  # checked against the sha256


ARCHIVE = find_archive()
if ARCHIVE is None:
    pytestmark.append(
        pytest.mark.skip(
            reason=f"SKIPPED, NOT TESTED: the real llamafile archive {ARCHIVE_NAME} is absent "
            "(set PATCHCTL_TEST_LLAMAFILE_ARCHIVE, put it in shared/upstreams/ or in "
            "patchctl's cache)"
        )
    )


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One patchctl cache for the module: the archive is extracted and staged once."""
    return tmp_path_factory.mktemp("patchctl-cache")


@pytest.fixture
def series(tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The series dir: upstream = the archive, the two patches of tests/data/."""
    assert ARCHIVE is not None
    monkeypatch.setenv("PATCHCTL_CACHE_DIR", str(shared_cache))
    sums = ARCHIVE.with_name(ARCHIVE.name + ".sha256")
    if sums.is_file():  # the checksum shipped beside the archive agrees with the pin
        assert sums.read_text().split()[0] == ARCHIVE_SHA
    directory = tmp_path / "patches" / "llamafile-real"
    directory.mkdir(parents=True)
    lines = [
        "version: 1",
        "upstream:",
        "  kind: archive",
        f"  path: {json.dumps(str(ARCHIVE))}",
        f"  sha256: {ARCHIVE_SHA}",
        f"  tree: {BASE_TREE}",
        "patches:",
    ]
    pre = BASE_TREE
    for (pid, title, marker), post in zip(PATCHES, POST_TREES, strict=True):
        shutil.copyfile(DATA / f"{pid}.patch", directory / f"{pid}.patch")
        lines += [
            f"  - id: {pid}",
            f"    file: {pid}.patch",
            f"    title: {json.dumps(title)}",
            "    upstream_status: Pending",
            "    origin: patchctl",
            f"    markers: [{json.dumps(marker)}]",
            f"    pre_tree: {pre}",
            f"    post_tree: {post}",
        ]
        pre = post
    (directory / "series.yaml").write_text("\n".join(lines) + "\n")
    assert main(["docs", "--series", str(directory)]) == 0  # the series README, marker registry
    return directory


@pytest.fixture
def cleanroom(series: Path, tmp_path: Path) -> Path:
    """The real tree plus the series, applied strictly by `patchctl cleanroom apply`."""
    workdir = tmp_path / "cleanroom" / "llamafile-real"
    assert main(["cleanroom", "apply", "--series", str(series), "--workdir", str(workdir)]) == 0
    return workdir


def test_real_tree_series_applies_and_round_trips(
    series: Path, cleanroom: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ARCHIVE is not None
    assert hashlib.sha256(ARCHIVE.read_bytes()).hexdigest() == ARCHIVE_SHA
    assert Git(cleanroom).maybe_rev("HEAD^{tree}") == POST_TREES[-1]
    assert b"// patchctl-test 0001" in (cleanroom / "llamafile" / "tinyblas.cu").read_bytes()
    script = cleanroom / "llamafile" / "cuda.sh"
    assert b"# patchctl-test 0002" in script.read_bytes()
    assert os.access(script, os.X_OK)  # the patch kept the script's mode
    capsys.readouterr()

    args = ["verify", "--all", "--series", str(series), "--workdir", str(cleanroom), "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    checked = {p["id"]: p for p in report["patches"]}
    assert list(checked) == [pid for pid, _title, _marker in PATCHES]
    for result in checked.values():
        steps = {s["step"]: s["ok"] for s in result["steps"]}
        names = ("chain", "forward", "reverse", "reexport", "markers", "bases")
        assert steps == {s: True for s in names}


def test_real_tree_is_llamafile_and_missing_cosmocc_exits_14(
    cleanroom: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("COSMOCC", raising=False)
    assert toolchain.detect_backend(cleanroom) == "llamafile"
    capsys.readouterr()
    assert main(["build", "--workdir", str(cleanroom), "--json"]) == 14
    error = json.loads(capsys.readouterr().out)
    assert error["ok"] is False and error["exit_code"] == 14
    assert error["error"] == "ToolchainMissing"
    message, hint = error["message"], error["hint"]
    assert "cosmocc toolchain .cosmocc/3.9.7 not found" in message  # read from build/config.mk
    assert f"{cleanroom}/.cosmocc/3.9.7 lacks bin/cosmocc" in message
    assert "bin/ar.ape, bin/zipobj, bin/mkdeps" in message  # what the real config.mk runs
    assert "cosmocc-3.9.7.zip" in hint and "3f559555d08ece35" in hint
    assert "--cosmocc DIR" in hint and "COSMOCC=DIR" in hint
    assert "--only cuda --cuda sm_XY" in hint
    assert not (cleanroom.parent / f"{cleanroom.name}.builds").exists()


def recording_tool(path: Path, log: Path, body: str = "") -> Path:
    """An executable that appends its name and argv (NUL-separated, one call a line) to `log`,
    then runs `body`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    record = shlex.quote(str(log))
    path.write_text(
        "#!/bin/sh\n"
        f'{{ printf \'%s\' "$(basename "$0")"; for a do printf \'\\000%s\' "$a"; done; '
        f"echo; }} >> {record}\n" + body
    )
    path.chmod(0o755)
    return path


# Writes the file named after -o (empty): the outputs make checks for (o//depend) exist.
WRITE_OUTPUT = (
    'out=; prev=\nfor a do [ "$prev" = -o ] && out=$a; prev=$a; done\n'
    '[ -n "$out" ] && { mkdir -p "$(dirname "$out")"; : > "$out"; }\nexit 0\n'
)


def recorded(log: Path) -> list[list[str]]:
    """The calls `recording_tool` logged: [name, *argv] each."""
    return [line.split("\0") for line in log.read_text().splitlines()] if log.is_file() else []


def test_real_cuda_sh_runs_the_shim_with_exactly_the_named_arch(
    cleanroom: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tree's real cuda.sh (which runs /usr/local/cuda/bin/nvcc) through the arch shim."""
    log = tmp_path / "nvcc.log"
    cuda = tmp_path / "fake-cuda"
    nvcc = recording_tool(cuda / "bin" / "nvcc", log, WRITE_OUTPUT)
    # cuobjdump --list-elf of what the recorded nvcc call compiled: one cubin per code=sm_XY.
    recording_tool(
        cuda / "bin" / "cuobjdump",
        tmp_path / "cuobjdump.log",
        f"n=0; for arch in $(grep -a -o 'code=sm_[0-9a-z]*' {shlex.quote(str(log))} "
        '| cut -d= -f2); do n=$((n+1)); echo "ELF file    $n: ggml-cuda.$n.$arch.cubin"; done\n',
    )
    (tmp_path / "stubs").mkdir()
    (tmp_path / "stubs" / "libcuda.so").write_bytes(b"")  # cuda.sh links -lcuda
    monkeypatch.setenv("CUDACXX", str(nvcc))
    monkeypatch.setenv("LIBRARY_PATH", str(tmp_path / "stubs"))
    config = BuildConfig(backend="llamafile", only="cuda", cuda=("sm_86",), jobs=2)
    plan = plan_build(cleanroom, config, tmp_path / "builds")
    assert [s.name for s in plan.steps] == ["cuda"]  # no make, no cosmocc
    step = plan.steps[0]
    assert plan.layout.shim is not None and plan.layout.shim.rewrites == (
        "/usr/local/cuda/bin/nvcc",
    )
    assert step.argv == (str(plan.source_dir / "llamafile" / ".patchctl-cuda.sh"),)
    env = dict(step.env)
    assert env["HOME"] == str(plan.build_dir / "cuda-home")
    assert env["TMPDIR"] == str(plan.build_dir / "cuda-tmp")
    assert env["PATH"].split(os.pathsep)[0] == str(plan.layout.shim.nvcc.parent)

    result = execute_plan(plan)

    calls = [call for call in recorded(log) if call[1:] != ["--version"]]  # the manifest's
    assert len(calls) == 1
    assert calls[0] == [
        "nvcc",
        "-gencode",
        "arch=compute_86,code=sm_86",
        *CUDA_SH_FLAGS,
        "-o",
        str(plan.build_dir / "cuda-home" / "ggml-cuda.so"),
        "ggml-cuda.cu",
        "-lcuda",
    ]
    original = (plan.source_dir / "llamafile" / "cuda.sh").read_bytes()
    copy = (plan.source_dir / "llamafile" / ".patchctl-cuda.sh").read_bytes()
    assert copy == original.replace(
        b"/usr/local/cuda/bin/nvcc", str(plan.layout.shim.nvcc).encode()
    )
    assert list((plan.build_dir / "cuda-tmp").iterdir())  # cuda.sh's `mktemp -d` stays inside
    manifest = read_manifest(result.build_dir)
    assert manifest["status"] == "ok"
    assert manifest["cuda_check"] == {
        "nvcc_calls": 1,
        "dso": "cuda-home/ggml-cuda.so",
        "elf_archs": ["sm_86"],
    }
    artifacts, settings = manifest["artifacts"], manifest["settings"]
    assert isinstance(artifacts, list) and isinstance(settings, dict)
    assert [a["path"] for a in artifacts] == ["cuda-home/ggml-cuda.so"]
    assert settings["cosmocc"] is None


def test_real_makefile_make_command_with_a_recording_cosmocc(
    cleanroom: Path, tmp_path: Path
) -> None:
    """patchctl's exact make argv, plus -n, against the real Makefile and a stand-in cosmocc."""
    log = tmp_path / "cosmocc.log"
    cosmocc = tmp_path / "cosmocc-3.9.7"
    for name in COSMOCC_TOOLS:
        recording_tool(cosmocc / "bin" / name, log, WRITE_OUTPUT)
    make = shutil.which("make")
    assert make is not None
    config = BuildConfig(backend="llamafile", cosmocc=cosmocc, jobs=2)
    plan = plan_build(cleanroom, config, tmp_path / "builds")
    step = plan.steps[0]
    assert [s.name for s in plan.steps] == ["make"]
    assert step.argv == (make, "-j2", f"COSMOCC={cosmocc}")
    assert step.cwd == plan.source_dir
    _export_tree(plan)
    for name in LEFT_OUT:  # else the Makefile's depend rule is remade forever
        (plan.source_dir / name).write_bytes(b"")

    proc = subprocess.run(
        [step.argv[0], "-n", *step.argv[1:]],
        cwd=step.cwd,
        env={**os.environ, **dict(step.env)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    tools = {name: f"{cosmocc}/bin/{name} " for name in COSMOCC_TOOLS}
    compiles = [ln for ln in lines if " -c -o o//" in ln]
    assert len(compiles) > 200
    assert all(ln.startswith((tools["cosmocc"], tools["cosmoc++"])) for ln in compiles)
    assert any(
        ln.startswith(tools["cosmocc"])
        and ln.endswith("-c -o o//llamafile/addnl.o llamafile/addnl.c")
        for ln in compiles
    )
    links = [ln for ln in lines if ln.endswith("-o o//llamafile/zipalign")]
    assert len(links) == 1 and links[0].startswith(tools["cosmoc++"])
    assert any(ln.startswith(tools["ar.ape"] + "rcsD o//") for ln in lines)
    assert any(ln.startswith(tools["zipobj"]) for ln in lines)
    assert not [ln for ln in lines if ".cosmocc/" in ln or "download-cosmocc" in ln]
    # make -n still remakes its included makefiles: mkdeps really ran, from the stand-in.
    depend = [call for call in recorded(log) if call[0] == "mkdeps"]
    assert depend and depend[0][1:5] == ["-o", "o//depend", "-r", "o//"]
    assert not (cleanroom / "o").exists()  # the clean room itself stays clean
