"""patchctl build: command construction, tree-id keyed build dirs, failures, llamafile flow.

Real builds here are of a tiny CMake project in a real git repo (about a second each); the
llamafile flow runs a fake Makefile, a fake cuda.sh and a fake nvcc that record what they got.
No llama.cpp is built by these tests.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.files import Exe, Files, write_files
from support.repos import Repo, racy_same_size_edit
from support.series import git_upstream, write_series

from patchctl.cli.main import main
from patchctl.errors import BuildFailed, BuildStepFailed, NotFound, PatchctlError, ToolchainMissing
from patchctl.ops.build import DEFAULT_CMAKE_TARGETS, toolchain
from patchctl.ops.build.config import BuildConfig
from patchctl.ops.build.llamafile import nvcc_shim
from patchctl.ops.build.manifest import collect_artifacts, read_manifest
from patchctl.ops.build.model import BuildPlan, Step
from patchctl.ops.build.plan import plan_build, worktree_id
from patchctl.ops.build.run import build_tree, execute_plan, failure_excerpt, run_step
from patchctl.progress import RecordingProgress

needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")

TINY_CMAKELISTS = (
    b"cmake_minimum_required(VERSION 3.14)\nproject(tiny C)\n"
    b"add_library(tiny SHARED lib.c)\nadd_executable(hello main.c)\n"
    b"target_link_libraries(hello tiny)\n"
)
TINY_CMAKE: Files = {
    "CMakeLists.txt": TINY_CMAKELISTS,
    "lib.c": b"int tiny(void) { return 42; }\n",
    "main.c": b'#include <stdio.h>\nint tiny(void);\nint main(void) { printf("%d\\n", tiny()); }\n',
}
BROKEN_MAIN = b"int tiny(void);\nint main(void) { return tiny() + undeclared_thing; }\n"

FAKE_MAKEFILE = b"""all:
\tmkdir -p o/$(MODE)/llamafile
\tprintf '%s\\n' '$(COSMOCC)' > o/$(MODE)/cosmocc-used
\tprintf '#!/bin/sh\\necho llamafile\\n' > o/$(MODE)/llamafile/llamafile
\tchmod +x o/$(MODE)/llamafile/llamafile
"""
FAKE_CUDA_SH = b"""#!/bin/sh
# like llamafile's cuda.sh + build-functions.sh: -jN, --output PATH, nvcc from $CUDA_PATH
OUTPUT="$HOME/ggml-cuda.so"; JOBS=1; want=0
for a do
  if [ "$want" = 1 ]; then OUTPUT="$a"; want=0; continue; fi
  case "$a" in -j*) JOBS="${a#-j}" ;; --output) want=1 ;; esac
done
echo "[1/2] Compiling: x.cu"
"$CUDA_PATH/bin/nvcc" -gencode arch=compute_75,code=sm_75 \\
  -gencode arch=compute_90,code=sm_90 --use_fast_math -c x.cu -o "$OUTPUT"
echo "[2/2] Linking"
printf 'HOME=%s\\nJOBS=%s\\n' "$HOME" "$JOBS" > "$HOME/cuda-env"
"""
FAKE_NVCC = b"""#!/bin/sh
[ "$1" = --version ] && { echo "Cuda compilation tools, release 99.9, fake"; exit 0; }
printf '%s\\n' "$@" > "$FAKE_NVCC_LOG"
prev=; out=
for a do [ "$prev" = -o ] && out="$a"; prev="$a"; done
printf 'fake dso\\n' > "$out"
"""
# cuobjdump --list-elf of the fake nvcc's output: one cubin per code=sm_XY it was given
# (or $FAKE_ELF_ARCHS, to play a script that built other archs).
FAKE_CUOBJDUMP = b"""#!/bin/sh
[ "$1" = --version ] && { echo "Cuda compilation tools, release 99.9, fake"; exit 0; }
archs=${FAKE_ELF_ARCHS:-$(grep -o 'code=sm_[0-9a-z]*' "$FAKE_NVCC_LOG" | cut -d= -f2)}
n=0
for arch in $archs; do n=$((n+1)); echo "ELF file    $n: ggml-cuda.$n.$arch.cubin"; done
"""
LLAMAFILE_TREE: Files = {
    "Makefile": FAKE_MAKEFILE,
    "build/config.mk": b"COSMOCC = .cosmocc/4.0.2\n",
    "llamafile/cuda.sh": Exe(FAKE_CUDA_SH),
    "llamafile/main.c": b"int main(void) { return 0; }\n",
}


def configure_argv(plan: BuildPlan) -> tuple[str, ...]:
    return next(s.argv for s in plan.steps if s.name == "configure")


def fake_tool(path: Path, body: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    path.chmod(0o755)
    return path


@pytest.fixture
def tiny(make_repo: Callable[..., Repo]) -> Repo:
    return make_repo(TINY_CMAKE, name="tiny")


@pytest.fixture
def fake_nvcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake nvcc (found through $CUDACXX) that logs its argv to $FAKE_NVCC_LOG."""
    nvcc = fake_tool(tmp_path / "fake-cuda" / "bin" / "nvcc", FAKE_NVCC)
    fake_tool(tmp_path / "fake-cuda" / "bin" / "cuobjdump", FAKE_CUOBJDUMP)
    monkeypatch.setenv("CUDACXX", str(nvcc))
    monkeypatch.setenv("FAKE_NVCC_LOG", str(tmp_path / "nvcc-args"))
    return nvcc


@pytest.fixture
def cosmocc(tmp_path: Path) -> Path:
    root = tmp_path / "cosmocc"
    for name in ("cosmocc", "cosmoc++"):
        fake_tool(root / "bin" / name, b"#!/bin/sh\nexit 0\n")
    return root


# ----------------------------------------------------------------------------- planning


def test_cmake_cpu_command_line(tiny: Repo, tmp_path: Path) -> None:
    plan = plan_build(tiny.path, BuildConfig(jobs=2), tmp_path / "builds")
    argv = configure_argv(plan)
    assert argv[1:5] == ("-S", str(tiny.path), "-B", str(plan.build_dir))
    for define in (
        "CMAKE_BUILD_TYPE=Release",
        "BUILD_SHARED_LIBS=ON",
        "LLAMA_CURL=OFF",
        "LLAMA_OPENSSL=OFF",
        "LLAMA_BUILD_TESTS=ON",
        "GGML_CCACHE=OFF",
        "GGML_CUDA=OFF",
    ):
        assert f"-D{define}" in argv
    assert not any("LAUNCHER" in a or "CUDA_ARCH" in a for a in argv)
    if shutil.which("ninja"):
        assert argv[argv.index("-G") + 1] == "Ninja"
    build_argv = plan.steps[1].argv
    assert build_argv[1:5] == ("--build", str(plan.build_dir), "--parallel", "2")
    assert build_argv[build_argv.index("--target") + 1 :] == DEFAULT_CMAKE_TARGETS
    assert plan.steps[0].env == () and plan.tree_id == tiny.tree and not plan.dirty


def test_cmake_cuda_archs_and_ccache_launcher(
    tiny: Repo, tmp_path: Path, fake_nvcc: Path, ccache_on_path: Path
) -> None:
    config = BuildConfig(cuda=("sm_86", "sm_90"), launcher="ccache", targets=("hello",))
    plan = plan_build(tiny.path, config, tmp_path / "builds")
    argv = configure_argv(plan)
    assert "-DGGML_CUDA=ON" in argv and "-DGGML_CUDA=OFF" not in argv
    assert "-DCMAKE_CUDA_ARCHITECTURES=86;90" in argv
    assert f"-DCMAKE_CUDA_COMPILER={fake_nvcc}" in argv
    ccache = shutil.which("ccache")
    for lang in ("C", "CXX", "CUDA"):
        assert f"-DCMAKE_{lang}_COMPILER_LAUNCHER={ccache}" in argv
    env = dict(plan.steps[1].env)
    assert env["CCACHE_NOHASHDIR"] == "1"
    assert Path(env["CCACHE_BASEDIR"]) in (tiny.path, *tiny.path.parents)
    assert plan.steps[1].argv[-2:] == ("--target", "hello")
    assert "'-DCMAKE_CUDA_ARCHITECTURES=86;90'" in plan.commands()[-2]  # shell-quoted


def test_missing_launcher_is_toolchain_missing(
    tiny: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "cmake"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(ToolchainMissing, match="`sccache` not found") as info:
        plan_build(tiny.path, BuildConfig(launcher="sccache"), tmp_path / "b")
    assert info.value.exit_code == 14


def test_config_hash_keys_outputs_not_targets_or_jobs(
    tiny: Repo, tmp_path: Path, fake_nvcc: Path
) -> None:
    root = tmp_path / "builds"
    base = plan_build(tiny.path, BuildConfig(), root).build_dir
    same = plan_build(tiny.path, BuildConfig(jobs=1, targets=("hello",)), root)
    cuda = plan_build(tiny.path, BuildConfig(cuda=("sm_86",)), root)
    cuda2 = plan_build(tiny.path, BuildConfig(cuda=("sm_86", "sm_90")), root)
    define = plan_build(tiny.path, BuildConfig(defines=("GGML_NATIVE=OFF",)), root)
    assert same.build_dir == base
    assert len({base, cuda.build_dir, cuda2.build_dir, define.build_dir}) == 4
    assert base.parent == root and base.name.startswith(tiny.tree + "-")


def test_explicit_build_dir_is_used_as_given(tiny: Repo, tmp_path: Path) -> None:
    plan = plan_build(tiny.path, BuildConfig(), tmp_path / "b", tmp_path / "mine")
    assert plan.build_dir == tmp_path / "mine"


def test_not_a_git_tree(tmp_path: Path) -> None:
    (tmp_path / "CMakeLists.txt").write_bytes(b"project(x)\n")
    with pytest.raises(NotFound, match="not a git work tree"):
        plan_build(tmp_path, BuildConfig(), tmp_path / "b")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"backend": "bazel"},
        {"launcher": "distcc"},
        {"jobs": 0},
        {"cuda": ("86",)},
        {"cuda": ("sm_86,sm_90",)},
        {"defines": ("no equals sign",)},
    ],
)
def test_config_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(PatchctlError):
        BuildConfig(**kwargs)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- tree id


def test_tree_id_clean_dirty_untracked_and_index_untouched(tiny: Repo) -> None:
    index = tiny.path / ".git" / "index"
    before = index.read_bytes()
    assert worktree_id(tiny.path) == (tiny.tree, False)
    write_files(tiny.path, {"lib.c": b"int tiny(void) { return 7; }\n"})
    edited, dirty = worktree_id(tiny.path)
    assert dirty and edited != tiny.tree
    assert worktree_id(tiny.path) == (edited, True)  # stable for the same content
    write_files(tiny.path, {"notes.txt": b"untracked\n"})
    assert worktree_id(tiny.path)[0] not in (tiny.tree, edited)
    write_files(tiny.path, {"lib.c": TINY_CMAKE["lib.c"], "notes.txt": None})
    assert worktree_id(tiny.path) == (tiny.tree, False)
    assert index.read_bytes() == before
    assert tiny.git.run("diff", "--cached", "--name-only") == b""


def test_tree_id_sees_a_same_size_edit_made_in_the_second_of_the_index_write(tiny: Repo) -> None:
    # The snapshot must not trust stat data that git's racy-clean check would distrust: a
    # copy of the index with a fresh mtime once returned HEAD's tree here (while "dirty").
    lib = TINY_CMAKE["lib.c"]
    assert isinstance(lib, bytes)
    racy_same_size_edit(tiny.git, "lib.c", lib.replace(b"42", b"43"))
    tree_id, dirty = worktree_id(tiny.path)
    assert dirty and tree_id != tiny.tree
    assert tiny.git.cat_file("blob", f"{tree_id}:lib.c") == lib.replace(b"42", b"43")


# ----------------------------------------------------------------------------- real builds


@needs_cmake
def test_build_reuse_and_invalidation_by_tree_id(tiny: Repo, tmp_path: Path) -> None:
    root = tmp_path / "builds"
    config = BuildConfig(targets=("hello",), jobs=2)
    first = build_tree(tiny.path, config, root)
    hello = first.bin_dir / "hello"
    assert subprocess.run([hello], capture_output=True, check=True).stdout == b"42\n"
    names = {Path(a.path).name for a in first.artifacts}
    assert {"hello", "libtiny.so"} <= names

    again = build_tree(tiny.path, config, root)
    assert again.build_dir == first.build_dir
    assert again.artifacts == first.artifacts
    assert b"no work to do" in (again.build_dir / "logs" / "build.log").read_bytes() or (
        shutil.which("ninja") is None
    )

    write_files(tiny.path, {"lib.c": b"int tiny(void) { return 7; }\n"})
    edited = build_tree(tiny.path, config, root)
    assert edited.plan.dirty and edited.build_dir != first.build_dir
    assert subprocess.run([edited.bin_dir / "hello"], capture_output=True).stdout == b"7\n"
    # the build of the other tree is untouched and still valid for that tree
    assert subprocess.run([hello], capture_output=True).stdout == b"42\n"
    assert collect_artifacts(first.plan) == first.artifacts
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [first.build_dir.name, edited.build_dir.name]
    )


@needs_cmake
def test_manifest_records_tree_commands_tools_and_artifact_hashes(
    tiny: Repo, tmp_path: Path
) -> None:
    result = build_tree(tiny.path, BuildConfig(targets=("hello",)), tmp_path / "b")
    data = json.loads(result.manifest_path.read_text())
    assert result.manifest_path == result.build_dir / "patchctl-build.json"
    assert data["status"] == "ok" and data["tree_id"] == tiny.tree and data["dirty"] is False
    assert data["backend"] == "cmake" and data["config_hash"] in result.build_dir.name
    assert [c["step"] for c in data["commands"]] == ["configure", "build"]
    assert data["commands"][0]["argv"] == list(configure_argv(result.plan))
    assert [r["returncode"] for r in data["runs"]] == [0, 0]
    assert data["tools"]["cmake"].startswith("cmake version")
    assert "cc" in data["tools"]
    assert data["wall_s"] > 0
    for art in data["artifacts"]:
        blob = (result.build_dir / art["path"]).read_bytes()
        assert hashlib.sha256(blob).hexdigest() == art["sha256"] and len(blob) == art["size"]
    assert (result.build_dir / "logs" / "configure.log").read_bytes().startswith(b"$ cd ")


@needs_cmake
def test_progress_follows_build_counters(tiny: Repo, tmp_path: Path) -> None:
    progress = RecordingProgress()
    build_tree(tiny.path, BuildConfig(targets=("hello",)), tmp_path / "b", progress)
    starts = {task: total for kind, task, total in progress.events if kind == "start"}
    assert starts["configure"] is None
    total = starts["build"]
    assert total is not None and total > 0
    advanced = sum(n or 0 for kind, task, n in progress.events if kind == "advance")
    assert advanced == total
    assert progress.events[-1] == ("done", "build", None)


@needs_cmake
def test_broken_source_fails_with_the_compiler_error_shown(
    make_repo: Callable[..., Repo], tmp_path: Path
) -> None:
    repo = make_repo({**TINY_CMAKE, "main.c": BROKEN_MAIN}, name="broken")
    with pytest.raises(BuildStepFailed) as info:
        build_tree(repo.path, BuildConfig(targets=("hello",)), tmp_path / "b")
    err = info.value
    assert err.exit_code == 13 and isinstance(err, BuildFailed)
    assert err.step == "build" and err.returncode != 0
    assert "undeclared_thing" in err.message and "error" in err.message
    assert "first errors:" in err.excerpt and "main.c" in err.excerpt
    assert "undeclared_thing" in err.excerpt and "last " in err.excerpt
    assert err.log.is_file() and err.hint is not None and str(err.log) in err.hint
    manifest = json.loads((err.log.parent.parent / "patchctl-build.json").read_text())
    assert manifest["status"] == "failed" and manifest["artifacts"] == []


@needs_cmake
def test_tree_edited_during_build_is_not_reported_as_built(
    make_repo: Callable[..., Repo], tmp_path: Path
) -> None:
    sneaky = TINY_CMAKELISTS + (
        b"add_custom_target(edit ALL COMMAND ${CMAKE_COMMAND} -E touch "
        b"${CMAKE_SOURCE_DIR}/edited-during-build.txt)\n"
    )
    repo = make_repo({**TINY_CMAKE, "CMakeLists.txt": sneaky}, name="sneaky")
    with pytest.raises(BuildFailed, match="changed during the build"):
        build_tree(repo.path, BuildConfig(targets=("edit",)), tmp_path / "b")


def test_failure_excerpt_picks_first_errors_and_tail() -> None:
    log = b"\n".join(
        [b"[1/3] ok", b"a.c:1:2: error: first", b" 1 | bad", b"   | ^"]
        + [b"noise %d" % i for i in range(50)]
        + [b"FAILED: a.o", b"ninja: build stopped"]
    )
    text = failure_excerpt(log, tail=5)
    assert text.index("a.c:1:2: error: first") < text.index("last 5 lines")
    assert " 1 | bad" in text and "FAILED: a.o" in text
    assert "noise 10" not in text and text.rstrip().endswith("ninja: build stopped")


# ----------------------------------------------------------------------------- llamafile


def test_llamafile_missing_cosmocc_says_what_and_how(
    make_repo: Callable[..., Repo], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COSMOCC", raising=False)
    repo = make_repo(LLAMAFILE_TREE, name="llamafile")
    with pytest.raises(ToolchainMissing) as info:
        plan_build(repo.path, BuildConfig(), tmp_path / "b")
    assert "cosmocc toolchain .cosmocc/4.0.2 not found" in info.value.message
    assert ".cosmocc/4.0.2 lacks bin/cosmocc" in info.value.message
    assert info.value.hint is not None and "--cosmocc DIR" in info.value.hint
    assert "--only cuda --cuda sm_XY" in info.value.hint  # the part that needs no cosmocc
    assert not (tmp_path / "b").exists()  # nothing ran, nothing reported built


def test_llamafile_cuda_without_nvcc(
    make_repo: Callable[..., Repo],
    tmp_path: Path,
    cosmocc: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    repo = make_repo(LLAMAFILE_TREE, name="llamafile")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "make"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("CUDACXX", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(toolchain, "DEFAULT_NVCC", tmp_path / "no-cuda" / "nvcc")
    config = BuildConfig(cuda=("sm_86",), cosmocc=cosmocc)
    with pytest.raises(ToolchainMissing, match="nvcc") as info:
        plan_build(repo.path, config, tmp_path / "b")
    assert info.value.hint is not None and "CUDA toolkit" in info.value.hint


def test_llamafile_make_and_cuda_sh_with_requested_archs(
    make_repo: Callable[..., Repo], tmp_path: Path, cosmocc: Path, fake_nvcc: Path
) -> None:
    repo = make_repo(LLAMAFILE_TREE, name="llamafile")
    config = BuildConfig(cuda=("sm_86", "sm_90"), cosmocc=cosmocc, jobs=2)
    plan = plan_build(repo.path, config, tmp_path / "b")
    assert plan.backend == "llamafile" and [s.name for s in plan.steps] == ["make", "cuda"]
    assert plan.steps[0].argv[1:] == ("-j2", f"COSMOCC={cosmocc}")
    result = execute_plan(plan)

    src = plan.build_dir / "src"
    assert (src / ".patchctl-tree").read_text().strip() == repo.tree
    assert (src / "o" / "cosmocc-used").read_text().strip() == str(cosmocc)
    assert not (repo.path / "o").exists()  # the clean room itself stays clean
    nvcc_args = (tmp_path / "nvcc-args").read_text().split("\n")
    gencodes = [nvcc_args[i + 1] for i, a in enumerate(nvcc_args) if a == "-gencode"]
    assert gencodes == ["arch=compute_86,code=sm_86", "arch=compute_90,code=sm_90"]
    assert "--use_fast_math" in nvcc_args  # everything else is passed through
    cuda_env = (plan.build_dir / "cuda-home" / "cuda-env").read_text()
    assert cuda_env == f"HOME={plan.build_dir / 'cuda-home'}\nJOBS=2\n"
    names = {a.path for a in result.artifacts}
    assert names == {"ggml-cuda.so", "src/o/llamafile/llamafile"}
    assert result.artifact("ggml-cuda.so").read_bytes() == b"fake dso\n"
    manifest = read_manifest(result.build_dir)
    tools, settings = manifest["tools"], manifest["settings"]
    assert isinstance(tools, dict) and isinstance(settings, dict)
    assert set(tools) == {"cosmocc", "cuobjdump", "make", "nvcc"}
    assert tools["nvcc"] == "Cuda compilation tools, release 99.9, fake"
    assert settings["cuda"] == ["sm_86", "sm_90"]
    assert manifest["cuda_check"] == {
        "nvcc_calls": 1,
        "dso": "ggml-cuda.so",
        "elf_archs": ["sm_86", "sm_90"],
    }


def test_llamafile_launcher_never_wraps_cosmocc(
    make_repo: Callable[..., Repo],
    tmp_path: Path,
    cosmocc: Path,
    fake_nvcc: Path,
    ccache_on_path: Path,
) -> None:
    """cosmocc also writes .aarch64/<name>.o, which a ccache hit would not restore."""
    repo = make_repo(LLAMAFILE_TREE, name="llamafile")
    config = BuildConfig(
        cosmocc=cosmocc, launcher="ccache", targets=("o//llamafile",), jobs=2, cuda=("sm_86",)
    )
    plan = plan_build(repo.path, config, tmp_path / "b")
    make = shutil.which("make")
    assert plan.steps[0].argv == (make, "-j2", f"COSMOCC={cosmocc}", "o//llamafile")
    assert plan.layout.shim is not None and f"exec {shutil.which('ccache')} {fake_nvcc} " in (
        plan.layout.shim.script
    )  # nvcc keeps the launcher


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_nvcc_shim_compiles_only_the_requested_archs_with_real_nvcc(tmp_path: Path) -> None:
    nvcc = toolchain.find_nvcc()
    shim = nvcc_shim(tmp_path, nvcc, None, ("sm_86",))
    path = fake_tool(shim.cuda_path / "bin" / "nvcc", shim.script.encode())
    (tmp_path / "k.cu").write_bytes(b"__global__ void k(float *x) { x[threadIdx.x] *= 2; }\n")
    subprocess.run(
        [path, "-gencode", "arch=compute_75,code=sm_75", "-arch=sm_80", "-c", "k.cu", "-o", "k.o"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    obj = (tmp_path / "k.o").read_bytes()
    assert b"-arch sm_86" in obj
    assert b"-arch sm_75" not in obj and b"-arch sm_80" not in obj


def test_llamafile_only_cuda_needs_no_cosmocc_nor_make(
    make_repo: Callable[..., Repo],
    tmp_path: Path,
    fake_nvcc: Path,
    cosmocc: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COSMOCC", raising=False)
    repo = make_repo(LLAMAFILE_TREE, name="llamafile")
    config = BuildConfig(only="cuda", cuda=("sm_86",), jobs=2)
    plan = plan_build(repo.path, config, tmp_path / "b")
    assert [s.name for s in plan.steps] == ["cuda"]
    assert plan.settings["cosmocc"] is None and plan.settings["only"] == "cuda"
    result = execute_plan(plan)
    assert [a.path for a in result.artifacts] == ["ggml-cuda.so"]
    manifest = read_manifest(result.build_dir)
    tools = manifest["tools"]
    assert isinstance(tools, dict) and set(tools) == {"cuobjdump", "nvcc"}
    assert manifest["status"] == "ok"
    # without --only the same tree and archs key another build: the settings differ
    full = plan_build(repo.path, BuildConfig(cuda=("sm_86",), cosmocc=cosmocc), tmp_path)
    assert full.config_hash != plan.config_hash


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"only": "cuda"}, "--only cuda builds ggml-cuda.so for the archs given with --cuda"),
        ({"only": "make", "cuda": ("sm_86",)}, "unknown part 'make' for --only"),
    ],
)
def test_only_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(PatchctlError, match=message):
        BuildConfig(**kwargs)  # type: ignore[arg-type]


def test_only_cuda_is_refused_for_a_cmake_tree(tiny: Repo, tmp_path: Path) -> None:
    with pytest.raises(PatchctlError, match="--only cuda is for the llamafile backend"):
        plan_build(tiny.path, BuildConfig(only="cuda", cuda=("sm_86",)), tmp_path)


def test_llamafile_cuda_sh_with_a_fixed_nvcc_path_runs_a_copy_through_the_shim(
    make_repo: Callable[..., Repo], tmp_path: Path, fake_nvcc: Path
) -> None:
    """llamafile's real cuda.sh runs /usr/local/cuda/bin/nvcc, whatever CUDA_PATH says."""
    script = FAKE_CUDA_SH.replace(b'"$CUDA_PATH/bin/nvcc"', b"/usr/local/cuda/bin/nvcc")
    repo = make_repo({**LLAMAFILE_TREE, "llamafile/cuda.sh": Exe(script)}, name="llamafile")
    plan = plan_build(repo.path, BuildConfig(only="cuda", cuda=("sm_89",)), tmp_path / "b")
    assert plan.layout.shim is not None and plan.layout.shim.rewrites == (
        "/usr/local/cuda/bin/nvcc",
    )
    assert plan.steps[0].argv[0] == str(plan.source_dir / "llamafile" / ".patchctl-cuda.sh")
    assert any("/usr/local/cuda/bin/nvcc replaced by" in line for line in plan.commands())
    execute_plan(plan)
    nvcc_args = (tmp_path / "nvcc-args").read_text().split("\n")
    assert nvcc_args[:2] == ["-gencode", "arch=compute_89,code=sm_89"]
    assert "arch=compute_75,code=sm_75" not in nvcc_args
    assert (plan.source_dir / "llamafile" / "cuda.sh").read_bytes() == script  # as exported


def test_llamafile_cuda_sh_that_bypasses_the_shim_fails(
    make_repo: Callable[..., Repo], tmp_path: Path, fake_nvcc: Path
) -> None:
    """A script that reaches nvcc some way patchctl cannot redirect is not reported built."""
    other = fake_tool(tmp_path / "elsewhere" / "nvcc", FAKE_NVCC)
    script = FAKE_CUDA_SH.replace(b'"$CUDA_PATH/bin/nvcc"', b'"$MY_NVCC"')
    repo = make_repo({**LLAMAFILE_TREE, "llamafile/cuda.sh": Exe(script)}, name="llamafile")
    plan = plan_build(repo.path, BuildConfig(only="cuda", cuda=("sm_86",)), tmp_path / "b")
    step = plan.steps[0]
    step = dataclasses.replace(step, env=(*step.env, ("MY_NVCC", str(other))))
    plan = dataclasses.replace(plan, layout=dataclasses.replace(plan.layout, steps=(step,)))
    with pytest.raises(BuildFailed, match="ran no nvcc through patchctl's arch shim"):
        execute_plan(plan)
    manifest = read_manifest(plan.build_dir)
    assert manifest["status"] == "wrong-archs" and manifest["artifacts"] == []
    assert manifest["cuda_check"] == {"nvcc_calls": 0, "dso": None, "elf_archs": None}


def test_llamafile_dso_with_other_archs_than_asked_fails(
    make_repo: Callable[..., Repo],
    tmp_path: Path,
    fake_nvcc: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_ELF_ARCHS", "sm_86 sm_90")
    repo = make_repo(LLAMAFILE_TREE, name="llamafile")
    plan = plan_build(repo.path, BuildConfig(only="cuda", cuda=("sm_86",)), tmp_path / "b")
    with pytest.raises(BuildFailed, match="holds SASS for sm_86, sm_90, not exactly sm_86"):
        execute_plan(plan)
    assert read_manifest(plan.build_dir)["status"] == "wrong-archs"
    listing = (plan.build_dir / "logs" / "cuobjdump.log").read_text()
    assert listing.startswith("$ ") and "--list-elf" in listing.splitlines()[0]


def test_llamafile_cuda_sh_linking_libcuda_needs_libcuda(
    make_repo: Callable[..., Repo],
    tmp_path: Path,
    fake_nvcc: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """cuda.sh links -lcuda after a long compile: a host without libcuda.so fails first."""
    script = FAKE_CUDA_SH.replace(b"-c x.cu", b"-c x.cu -lcuda")
    repo = make_repo({**LLAMAFILE_TREE, "llamafile/cuda.sh": Exe(script)}, name="llamafile")
    monkeypatch.setattr(toolchain, "find_libcuda", lambda nvcc, env=None: None)
    with pytest.raises(ToolchainMissing, match="links the CUDA driver") as info:
        plan_build(repo.path, BuildConfig(only="cuda", cuda=("sm_86",)), tmp_path / "b")
    assert info.value.hint is not None and "LIBRARY_PATH" in info.value.hint


# ----------------------------------------------------------------------------- CLI


def test_cli_dry_run_prints_exact_commands_and_runs_nothing(
    tiny: Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["build", "--workdir", str(tiny.path), "--dry-run", "-t", "hello", "-j", "2"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0] == f"# tree {tiny.tree} (clean) of {tiny.path}"
    assert out[-2].startswith("cd ") and " -S " in out[-2] and "-DBUILD_SHARED_LIBS=ON" in out[-2]
    assert out[-1].endswith("--build " + out[-1].split("--build ")[1])
    assert out[-1].split()[-2:] == ["--target", "hello"]
    assert not (tmp_path / "tiny.builds").exists()


def test_cli_dry_run_json(tiny: Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--workdir", str(tiny.path), "--dry-run", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["dry_run"] is True and data["tree_id"] == tiny.tree
    assert data["build_dir"].startswith(str(tmp_path / "tiny.builds" / tiny.tree))
    assert data["targets"] == list(DEFAULT_CMAKE_TARGETS)
    assert not (tmp_path / "tiny.builds").exists()


@needs_cmake
def test_cli_build_json_is_the_manifest(
    tiny: Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", "--workdir", str(tiny.path), "--json", "-t", "hello"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["status"] == "ok" and data["tree_id"] == tiny.tree
    assert "hello" in {Path(a["path"]).name for a in data["artifacts"]}
    assert Path(data["build_dir"]).parent == tmp_path / "tiny.builds"


@needs_cmake
def test_cli_build_failure_shows_compiler_error_and_exits_13(
    make_repo: Callable[..., Repo], capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_repo({**TINY_CMAKE, "main.c": BROKEN_MAIN}, name="broken")
    assert main(["build", "--workdir", str(repo.path), "-t", "hello"]) == 13
    err = capsys.readouterr().err
    assert "first errors:" in err and "undeclared_thing" in err
    assert err.rstrip().splitlines()[-1].startswith("error: build step `build` failed")


def test_cli_bad_arch_and_missing_cleanroom(
    tiny: Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", "--workdir", str(tiny.path), "--cuda", "sm86", "--dry-run"]) == 1
    assert "invalid CUDA architecture 'sm86'" in capsys.readouterr().err
    assert main(["build", "--workdir", str(tmp_path / "nope")]) == 15
    assert "no clean room at" in capsys.readouterr().err


def test_cli_llamafile_toolchain_missing_exit_14(
    make_repo: Callable[..., Repo],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COSMOCC", raising=False)
    repo = make_repo(LLAMAFILE_TREE, name="llamafile")
    assert main(["build", "--workdir", str(repo.path), "--json"]) == 14
    captured = capsys.readouterr()
    assert json.loads(captured.out)["error"] == "ToolchainMissing"
    assert "cosmocc toolchain .cosmocc/4.0.2 not found" in captured.err


def test_cli_only_cuda(
    make_repo: Callable[..., Repo],
    fake_nvcc: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COSMOCC", raising=False)
    repo = make_repo(LLAMAFILE_TREE, name="llamafile")
    assert main(["build", "--workdir", str(repo.path), "--only", "cuda"]) == 1
    assert "--only cuda builds ggml-cuda.so for the archs given with --cuda" in (
        capsys.readouterr().err
    )
    args = ["build", "--workdir", str(repo.path), "--only", "cuda", "--cuda", "sm_86"]
    assert main([*args, "--dry-run"]) == 0
    shell = capsys.readouterr().out.splitlines()
    commands = [line for line in shell if not line.startswith("#")]
    assert len(commands) == 1 and "/src/llamafile/cuda.sh -j" in commands[0]  # no make
    assert not any("COSMOCC=" in line for line in shell)
    assert main([*args, "--json"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    assert manifest["ok"] and manifest["settings"]["only"] == "cuda"
    assert manifest["cuda_check"]["elf_archs"] == ["sm_86"]
    assert main([*args, "--only", "make"]) == 2  # not a part


def test_environment_is_inherited_for_steps(
    tiny: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATCHCTL_TEST_MARK", "yes")
    step = Step(
        "probe",
        ("/bin/sh", "-c", "echo $PATCHCTL_TEST_MARK $EXTRA"),
        tmp_path,
        (("EXTRA", "added"),),
    )
    run = run_step(step, tmp_path / "probe.log", None)
    assert run.returncode == 0
    assert run.log.read_bytes().splitlines()[-1] == b"yes added"
    assert os.environ.get("EXTRA") is None


class _InterruptAtFirstCounter(RecordingProgress):
    def start(self, task: str, total: int | None) -> None:
        if total is not None:
            raise KeyboardInterrupt
        super().start(task, total)


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[1][0] != "Z"


def test_interrupt_stops_the_whole_process_group(tmp_path: Path) -> None:
    script = 'sleep 60 & echo $! > pid; echo "[1/2] compiling"; wait'
    step = Step("build", ("/bin/sh", "-c", script), tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run_step(step, tmp_path / "build.log", _InterruptAtFirstCounter())
    pid = int((tmp_path / "pid").read_text())
    for _ in range(50):
        if not _alive(pid):
            break
        time.sleep(0.1)
    assert not _alive(pid)


@needs_cmake
def test_cli_build_human_summary(tiny: Repo, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--workdir", str(tiny.path), "-t", "hello", "-j", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"built tree {tiny.tree[:12]} with cmake (CPU) in ")
    assert "  manifest:  " in out and "patchctl-build.json" in out
    assert any(line.strip().startswith("hello ") for line in out.splitlines())


@needs_cmake
def test_series_with_a_broken_patch_fails_the_build_naming_the_patched_file(
    make_repo: Callable[..., Repo],
    make_patch: Callable[[Files, Files], bytes],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """End to end: series -> `cleanroom apply` -> `build`; the patch's compile error is shown."""
    upstream = make_repo(TINY_CMAKE, name="upstream")
    broken = make_patch(TINY_CMAKE, {**TINY_CMAKE, "main.c": BROKEN_MAIN})
    series = write_series(
        tmp_path / "patches" / "tiny", git_upstream(upstream), [("0001-oops", broken)]
    )
    assert main(["cleanroom", "apply", "--series", str(series)]) == 0
    room = tmp_path / "cleanroom" / "tiny"
    assert (room / "main.c").read_bytes() == BROKEN_MAIN
    capsys.readouterr()
    assert main(["build", "--series", str(series), "-t", "hello", "--json"]) == 13
    captured = capsys.readouterr()
    error = json.loads(captured.out)
    assert error["error"] == "BuildStepFailed" and error["step"] == "build"
    assert "main.c" in error["excerpt"] and "undeclared_thing" in error["excerpt"]
    assert "undeclared_thing" in captured.err
    assert Path(error["log"]).is_relative_to(tmp_path / "cleanroom" / "tiny.builds")


def test_one_list_of_backends_and_launchers_for_the_cli_and_the_core(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from patchctl.ops.build import BACKENDS, LAUNCHERS
    from patchctl.ops.build.plan import BACKEND_OPS

    nowhere = ("build", "--dry-run", "--workdir", str(tmp_path / "none"))
    for backend in BACKENDS:  # accepted by the CLI: the run gets as far as the missing room
        assert main([*nowhere, "--backend", backend]) == 15
    for launcher in LAUNCHERS:
        assert main([*nowhere, "--launcher", launcher]) == 15
    assert main([*nowhere, "--backend", "bazel"]) == 2
    assert main([*nowhere, "--launcher", "distcc"]) == 2
    assert set(BACKEND_OPS) == set(BACKENDS) - {"auto"}
    capsys.readouterr()
