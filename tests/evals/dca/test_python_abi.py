"""The patched llama-cpp-python's ctypes mirror is ABI-correct against the patched
headers (tests/evals/dca/abi.py), and the check fails on every deliberate mirror mistake.

The headers come from the exported sdist itself (vendor/llama.cpp), the mirror from the wheel
built from it, so the check covers exactly what `pip install` of the export gives a user.
"""

from __future__ import annotations

import re
import shutil
import tarfile
from pathlib import Path

import pytest
from support.archives import extract_trusted_tar

from .abi import AbiMismatch, _field_names, c_structs, check
from .wheel import Wheel

DCA_FIELDS = ("dca", "dca_chunk_size", "dca_local_window", "dca_mscale")
SPARSE_FIELDS = ("enabled", "vertical", "slash", "threshold", "last_q", "per_head")


@pytest.fixture(scope="session")
def patched_headers(python_wheel: Wheel, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """vendor/llama.cpp/include and ggml/include of the exported sdist."""
    root = tmp_path_factory.mktemp("headers")
    with tarfile.open(python_wheel.sdist) as tar:
        wanted = [
            m
            for m in tar.getmembers()
            if re.fullmatch(r"[^/]+/vendor/llama\.cpp/(ggml/)?include/[^/]+\.h", m.name)
        ]
        extract_trusted_tar(tar, root, wanted)
    (top,) = list(root.iterdir())
    return [top / "vendor/llama.cpp/include", top / "vendor/llama.cpp/ggml/include"]


def test_every_mirrored_struct_matches_the_patched_headers(
    python_site: Path, patched_headers: list[Path], tmp_path: Path
) -> None:
    package = python_site / "llama_cpp"
    report = check(package, package / "lib", patched_headers, tmp_path)
    assert report.unmatched == ()  # every ctypes struct has a C struct of that name
    assert {
        "llama_context_params",
        "llama_model_params",
        "llama_opt_params",
        "llama_sparse_prefill_params",
    } <= set(report.checked)
    context = [name for name, _offset, _size in report.checked["llama_context_params"].fields]
    assert tuple(context[-4:]) == DCA_FIELDS  # appended, in the C order
    assert report.checked["llama_context_params"].size == 176  # 160 upstream + DCA's 16
    sparse = report.checked["llama_sparse_prefill_params"]
    assert tuple(name for name, _offset, _size in sparse.fields) == SPARSE_FIELDS
    assert sparse.size == 24  # a bool padded to 4, four int32_t, a bool padded to 4


def _copy(python_site: Path, target: Path) -> Path:
    """A copy of the installed mirror (llama_cpp.py and the module it imports) to mutate."""
    target.mkdir()
    for name in ("llama_cpp.py", "_ctypes_extensions.py"):
        shutil.copy2(python_site / "llama_cpp" / name, target / name)
    return target


FIELD = '        ("{name}", ctypes.{ctype}),\n'
MUTATIONS: dict[str, tuple[tuple[str, str], str]] = {
    # the last field dropped (a mirror that missed 0078's appended dca_mscale): it sat in what is
    # now the struct's tail padding, so sizes and all other offsets agree; the names see it
    "dropped-appended": (
        (FIELD.format(name="dca_mscale", ctype="c_int32"), ""),
        "llama_context_params: C fields (",
    ),
    # a dropped field before the end: the fields after it move
    "dropped": (
        (FIELD.format(name="dca_local_window", ctype="c_int32"), ""),
        "llama_context_params.dca_mscale: ctypes offset 168 size 4 != C offset 172 size 4",
    ),
    # two fields in the wrong order: same size, the offsets by name differ
    "reordered": (
        (
            FIELD.format(name="dca_chunk_size", ctype="c_int32")
            + FIELD.format(name="dca_local_window", ctype="c_int32"),
            FIELD.format(name="dca_local_window", ctype="c_int32")
            + FIELD.format(name="dca_chunk_size", ctype="c_int32"),
        ),
        "llama_context_params.dca_local_window: ctypes offset 164 size 4 != C offset 168",
    ),
    # the wrong C type
    "widened": (
        (
            FIELD.format(name="dca_chunk_size", ctype="c_int32"),
            FIELD.format(name="dca_chunk_size", ctype="c_int64"),
        ),
        "llama_context_params.dca_chunk_size: ctypes offset 168 size 8 != C offset 164 size 4",
    ),
    # sparse prefill's struct (passed by value to llama_set_sparse_prefill): two budgets swapped
    "sparse-reordered": (
        (
            FIELD.format(name="vertical", ctype="c_int32")
            + FIELD.format(name="slash", ctype="c_int32"),
            FIELD.format(name="slash", ctype="c_int32")
            + FIELD.format(name="vertical", ctype="c_int32"),
        ),
        "llama_sparse_prefill_params.slash: ctypes offset 4 size 4 != C offset 8 size 4",
    ),
    # its last field dropped (a bool, but after four int32_t: the struct is 4 bytes short)
    "sparse-dropped": (
        (FIELD.format(name="per_head", ctype="c_bool"), ""),
        "llama_sparse_prefill_params: ctypes.sizeof 20 != C sizeof 24",
    ),
    # a dropped trailing bool hides in the padding (same size, same offsets): the names see it
    "dropped-in-padding": (
        (FIELD.format(name="load_mtp", ctype="c_bool"), ""),
        "llama_model_params: C fields (",
    ),
}


@pytest.mark.parametrize("mistake", list(MUTATIONS))
def test_the_check_fails_on_a_mirror_mistake(
    mistake: str, python_site: Path, patched_headers: list[Path], tmp_path: Path
) -> None:
    (old, new), expected = MUTATIONS[mistake]
    copy = _copy(python_site, tmp_path / "llama_cpp")
    text = (copy / "llama_cpp.py").read_text()
    assert text.count(old) == 1, f"the mutation of {mistake!r} does not apply"
    (copy / "llama_cpp.py").write_text(text.replace(old, new))
    with pytest.raises(AbiMismatch) as info:
        check(copy, python_site / "llama_cpp" / "lib", patched_headers, tmp_path / "c")
    assert expected in str(info.value), str(info.value)


def _mismatch_with_a_field_appended(
    python_site: Path, patched_headers: list[Path], tmp_path: Path, after: str, field: str
) -> str:
    """The AbiMismatch text of the installed bindings against llama.h with `field` appended
    after the one declaration `after` (the mirror unchanged)."""
    headers = tmp_path / "include"
    shutil.copytree(patched_headers[0], headers)
    llama_h = headers / "llama.h"
    text = llama_h.read_text()
    assert text.count(after) == 1
    llama_h.write_text(text.replace(after, f"{after} {field}"))
    package = python_site / "llama_cpp"
    with pytest.raises(AbiMismatch) as info:
        check(package, package / "lib", [headers, patched_headers[1]], tmp_path / "c")
    return str(info.value)


def test_a_c_field_without_its_mirror_fails(
    python_site: Path, patched_headers: list[Path], tmp_path: Path
) -> None:
    """The next change of 0078's C fields (as `int32_t dca_mscale;` was, appended after
    dca_local_window) fails here until the bindings patch mirrors it: a field appended to the
    headers, the mirror unchanged."""
    error = _mismatch_with_a_field_appended(
        python_site, patched_headers, tmp_path, "int32_t dca_mscale;", "int32_t dca_next;"
    )
    assert "llama_context_params: ctypes.sizeof 176 != C sizeof 184" in error
    assert "'dca_mscale', 'dca_next')" in error


def test_a_sparse_field_without_its_mirror_fails(
    python_site: Path, patched_headers: list[Path], tmp_path: Path
) -> None:
    """The same for the struct llama_set_sparse_prefill takes by value: a field appended to the
    C struct (the next knob) fails here until the bindings patch mirrors it."""
    error = _mismatch_with_a_field_appended(
        python_site, patched_headers, tmp_path, "bool    per_head;", "int32_t next_knob;"
    )
    assert "llama_sparse_prefill_params: ctypes.sizeof 24 != C sizeof 28" in error
    assert "'per_head', 'next_knob')" in error


def test_the_header_parser_reads_what_llama_h_declares(tmp_path: Path) -> None:
    body = """
        enum llama_x tag;          // a comment; with a semicolon
        char key[128];
        union { int64_t i; double f; };
        struct { int a; } named;
        bool (*callback)(void * data, int n);
        const float * split, * other;
    """
    assert _field_names(body) == ("tag", "key", "i", "f", "named", "callback", "split", "other")
    (tmp_path / "x.h").write_text("/* struct fake { int no; }; */\nstruct s {\n" + body + "};\n")
    assert c_structs([tmp_path]) == {
        "s": ("tag", "key", "i", "f", "named", "callback", "split", "other")
    }
