"""Tool discovery: CUDA arch syntax, backend detection by layout, cosmocc and nvcc lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchctl.errors import NotFound, PatchctlError, ToolchainMissing
from patchctl.ops.build import toolchain

PINNED_SHA = "85b8c37a406d862e656ad4ec14be9f6ce474c1b436b9615e91a55208aced3f44"
OLDER_SHA = "3f559555d08ece35bab1a66293a2101f359ac9841d563419756efa9c79f7a150"
# The shape of llamafile's build/config.mk: the pinned toolchain dir and its download rules.
CONFIG_MK = (
    b"PREFIX = /usr/local\nCOSMOCC = .cosmocc/4.0.2\nTOOLCHAIN = $(COSMOCC)/bin/cosmo\n\n"
    b".cosmocc/3.9.7:\n\tbuild/download-cosmocc.sh $@ 3.9.7 " + OLDER_SHA.encode() + b"\n\n"
    b".cosmocc/4.0.2:\n\tbuild/download-cosmocc.sh $@ 4.0.2 " + PINNED_SHA.encode() + b"\n"
)


def llamafile_layout(root: Path) -> Path:
    """The files by which a llamafile tree is recognized."""
    (root / "build").mkdir(parents=True)
    (root / "build" / "config.mk").write_bytes(CONFIG_MK)
    (root / "llamafile").mkdir()
    (root / "Makefile").write_bytes(b"include build/config.mk\n")
    return root


def fake_cosmocc(root: Path, names: tuple[str, ...] = ("cosmocc", "cosmoc++")) -> Path:
    (root / "bin").mkdir(parents=True)
    for name in names:
        tool = root / "bin" / name
        tool.write_bytes(b"#!/bin/sh\nexit 0\n")
        tool.chmod(0o755)
    return root


@pytest.mark.parametrize(
    ("spec", "archs"),
    [
        ("sm_86", ("sm_86",)),
        ("sm_86,sm_90", ("sm_86", "sm_90")),
        (" sm_90a , sm_120 ", ("sm_90a", "sm_120")),
        ("sm_86,sm_86", ("sm_86",)),
    ],
)
def test_cuda_archs_parse(spec: str, archs: tuple[str, ...]) -> None:
    assert toolchain.parse_cuda_archs(spec) == archs


@pytest.mark.parametrize("spec", ["86", "sm_8", "compute_86", "sm_86,", "", "sm_86;sm_90", "SM_86"])
def test_cuda_archs_reject_bad_syntax_with_a_hint(spec: str) -> None:
    with pytest.raises(PatchctlError) as info:
        toolchain.parse_cuda_archs(spec)
    assert "invalid CUDA architecture" in info.value.message
    assert info.value.hint is not None and "sm_XY" in info.value.hint


def test_cuda_arch_lists_for_cmake_and_nvcc() -> None:
    assert toolchain.cmake_cuda_architectures(("sm_86", "sm_90a")) == "86;90a"
    assert toolchain.gencode_flags(("sm_86", "sm_90")) == (
        "-gencode",
        "arch=compute_86,code=sm_86",
        "-gencode",
        "arch=compute_90,code=sm_90",
    )


def test_backend_detected_by_layout(tmp_path: Path) -> None:
    lf = llamafile_layout(tmp_path / "lf")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "CMakeLists.txt").write_bytes(b"project(x)\n")
    assert toolchain.detect_backend(lf) == "llamafile"
    assert toolchain.detect_backend(plain) == "cmake"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NotFound, match="neither a llamafile tree"):
        toolchain.detect_backend(empty)


def test_cmake_source_dir_finds_llama_cpp_nested_in_llamafile(tmp_path: Path) -> None:
    lf = llamafile_layout(tmp_path / "lf")
    (lf / "llama.cpp").mkdir()
    (lf / "llama.cpp" / "CMakeLists.txt").write_bytes(b"project(llama)\n")
    assert toolchain.cmake_source_dir(lf) == lf / "llama.cpp"


def test_pinned_cosmocc_read_from_config_mk(tmp_path: Path) -> None:
    lf = llamafile_layout(tmp_path / "lf")
    assert toolchain.pinned_cosmocc(lf) == (".cosmocc/4.0.2", "4.0.2", PINNED_SHA)


def test_cosmocc_missing_names_every_place_looked_and_how_to_fix(tmp_path: Path) -> None:
    lf = llamafile_layout(tmp_path / "lf")
    with pytest.raises(ToolchainMissing) as info:
        toolchain.find_cosmocc(lf, None, env={})
    err = info.value
    assert err.exit_code == 14
    assert "--cosmocc: not set" in err.message
    assert "$COSMOCC: not set" in err.message
    assert f"{lf / '.cosmocc/4.0.2'} lacks bin/cosmocc, bin/cosmoc++" in err.message
    assert err.hint is not None
    assert "cosmocc-4.0.2.zip" in err.hint and PINNED_SHA in err.hint
    assert "--cosmocc DIR" in err.hint and "COSMOCC=DIR" in err.hint


def test_explicit_cosmocc_that_is_incomplete_is_an_error(tmp_path: Path) -> None:
    lf = llamafile_layout(tmp_path / "lf")
    fake_cosmocc(lf / ".cosmocc" / "4.0.2")  # a good one exists, but the user chose another
    broken = fake_cosmocc(tmp_path / "broken", names=("cosmocc",))
    with pytest.raises(ToolchainMissing, match=r"--cosmocc: .*broken lacks bin/cosmoc\+\+"):
        toolchain.find_cosmocc(lf, broken, env={})


def test_cosmocc_found_in_order_flag_env_tree(tmp_path: Path) -> None:
    lf = llamafile_layout(tmp_path / "lf")
    in_tree = fake_cosmocc(lf / ".cosmocc" / "4.0.2")
    from_env = fake_cosmocc(tmp_path / "env-cosmo")
    flag = fake_cosmocc(tmp_path / "flag-cosmo")
    assert toolchain.find_cosmocc(lf, None, env={}) == toolchain.Cosmocc(in_tree, "tree")
    env = {"COSMOCC": str(from_env)}
    assert toolchain.find_cosmocc(lf, None, env=env) == toolchain.Cosmocc(from_env, "$COSMOCC")
    assert toolchain.find_cosmocc(lf, flag, env=env) == toolchain.Cosmocc(flag, "--cosmocc")


def test_nvcc_lookup_order_and_missing_message(tmp_path: Path) -> None:
    fake = tmp_path / "cuda" / "bin" / "nvcc"
    fake.parent.mkdir(parents=True)
    fake.write_bytes(b"#!/bin/sh\n")
    fake.chmod(0o755)
    nowhere = tmp_path / "nowhere" / "nvcc"
    env = {"PATH": str(tmp_path / "empty-path")}
    assert toolchain.find_nvcc({**env, "CUDACXX": str(fake)}, fallback=nowhere) == fake
    cuda_path = {**env, "CUDA_PATH": str(tmp_path / "cuda")}
    assert toolchain.find_nvcc(cuda_path, fallback=nowhere) == fake
    with pytest.raises(ToolchainMissing) as info:
        toolchain.find_nvcc(env, fallback=nowhere)
    assert "nvcc" in info.value.message
    assert info.value.hint is not None and "CUDA_PATH" in info.value.hint


def test_cuda_script_required_for_llamafile_cuda(tmp_path: Path) -> None:
    lf = llamafile_layout(tmp_path / "lf")
    with pytest.raises(NotFound, match="no CUDA build script"):
        toolchain.cuda_script(lf)
    (lf / "llamafile" / "cuda.sh").write_bytes(b'case "$1" in --output) ;; esac\n')
    assert toolchain.cuda_script(lf) == lf / "llamafile" / "cuda.sh"
    assert toolchain.cuda_script_accepts(lf, "--output")
    assert not toolchain.cuda_script_accepts(lf, "-j*")


def test_require_tool_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(ToolchainMissing) as info:
        toolchain.require_tool("cmake", "apt install cmake", env={"PATH": str(tmp_path)})
    assert info.value.message == "`cmake` not found on PATH"
    assert info.value.hint == "apt install cmake"


# llamafile 0.9's build/config.mk: every tool the Makefile runs is derived from $(COSMOCC).
REAL_CONFIG_MK = (
    b"PREFIX = /usr/local\nCOSMOCC = .cosmocc/3.9.7\nTOOLCHAIN = $(COSMOCC)/bin/cosmo\n\n"
    b"CC = $(TOOLCHAIN)cc\nCXX = $(TOOLCHAIN)c++\nAR = $(COSMOCC)/bin/ar.ape\n"
    b"ZIPOBJ = $(COSMOCC)/bin/zipobj\nMKDEPS = $(COSMOCC)/bin/mkdeps\nINSTALL = install\n"
)


def test_cosmocc_tools_are_read_from_config_mk(tmp_path: Path) -> None:
    tree = llamafile_layout(tmp_path / "tree")
    assert toolchain.cosmocc_tools(tree) == ("cosmocc", "cosmoc++")  # no tool variables
    (tree / "build" / "config.mk").write_bytes(REAL_CONFIG_MK)
    assert toolchain.cosmocc_tools(tree) == ("cosmocc", "cosmoc++", "ar.ape", "zipobj", "mkdeps")
    (tree / "build" / "config.mk").write_bytes(b"COSMOCC = x\nAR = /usr/bin/ar\nCC = $(UNSET)\n")
    assert toolchain.cosmocc_tools(tree) == ("cosmocc", "cosmoc++")  # not under $(COSMOCC)


def test_cosmocc_with_only_the_compilers_is_incomplete_for_the_real_config(
    tmp_path: Path,
) -> None:
    tree = llamafile_layout(tmp_path / "tree")
    (tree / "build" / "config.mk").write_bytes(REAL_CONFIG_MK)
    explicit = fake_cosmocc(tmp_path / "cc")
    with pytest.raises(ToolchainMissing) as info:
        toolchain.find_cosmocc(tree, explicit, env={})
    assert "cosmocc toolchain .cosmocc/3.9.7 not found" in info.value.message
    assert "lacks bin/ar.ape, bin/zipobj, bin/mkdeps" in info.value.message
    full = fake_cosmocc(tmp_path / "full", ("cosmocc", "cosmoc++", "ar.ape", "zipobj", "mkdeps"))
    assert toolchain.find_cosmocc(tree, full, env={}).root == full


def test_cuda_script_fixed_nvcc_paths_and_libcuda(tmp_path: Path) -> None:
    script = tmp_path / "cuda.sh"
    script.write_bytes(
        b"#!/bin/sh\n/usr/local/cuda/bin/nvcc --shared -o ~/x.so x.cu -lcuda\n"
        b'"$CUDA_PATH/bin/nvcc" -c y.cu\n${CUDA_PATH}/bin/nvcc -c z.cu\n'
        b"/opt/cuda-12.4/bin/nvcc -c w.cu -lcudart\n/usr/local/cuda/bin/nvcc -c v.cu\n"
        b"/usr/local/cuda/bin/nvcc.real -c u.cu\n"
    )
    assert toolchain.cuda_script_nvcc_paths(script) == (
        "/usr/local/cuda/bin/nvcc",
        "/opt/cuda-12.4/bin/nvcc",
    )
    assert toolchain.cuda_script_links_libcuda(script)
    script.write_bytes(b'"$CUDA_PATH/bin/nvcc" -lcudart -lcublas x.cu\n')
    assert toolchain.cuda_script_nvcc_paths(script) == ()
    assert not toolchain.cuda_script_links_libcuda(script)


def test_libcuda_found_on_library_path_or_in_the_toolkit_stubs(tmp_path: Path) -> None:
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_bytes(b"")
    stubs = tmp_path / "cuda" / "targets" / "x86_64-linux" / "lib" / "stubs"
    stubs.mkdir(parents=True)
    (stubs / "libcuda.so").write_bytes(b"")
    assert toolchain.find_libcuda(nvcc, env={}) == stubs / "libcuda.so"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "libcuda.so").write_bytes(b"")
    assert toolchain.find_libcuda(nvcc, env={"LIBRARY_PATH": f"{mine}"}) == mine / "libcuda.so"


def test_elf_archs_and_cuobjdump_beside_nvcc(tmp_path: Path) -> None:
    listing = (
        "ELF file    1: ggml-cuda.1.sm_86.cubin\nELF file    2: ggml-cuda.2.sm_90a.cubin\n"
        "ELF file    3: ggml-cuda.3.sm_86.cubin\n"
    )
    assert toolchain.elf_archs(listing) == ("sm_86", "sm_90a")
    assert toolchain.elf_archs("cuobjdump info    : File 'x.so' does not contain device code") == ()
    bin_dir = tmp_path / "cuda" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("nvcc", "cuobjdump"):
        (bin_dir / name).write_bytes(b"#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    assert toolchain.find_cuobjdump(bin_dir / "nvcc", env={"PATH": ""}) == bin_dir / "cuobjdump"
    (bin_dir / "cuobjdump").unlink()
    assert toolchain.find_cuobjdump(bin_dir / "nvcc", env={"PATH": ""}) is None
