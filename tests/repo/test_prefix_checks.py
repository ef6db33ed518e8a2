"""scripts/prefix_checks.sh, the `patchctl check-prefixes --run` command of the llamafile series:
which checks it runs for a prefix is decided by what the tree holds, each check it skips is named
with the reason, one failing check fails the prefix, and its JSON line records all of it.

The trees here are stand-ins (the few files the script reads), test-backend-ops and pytest are
stand-ins that log their arguments: what is tested is the script's decisions, not llama.cpp.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "prefix_checks.sh"

LSE_DECL = "GGML_API struct ggml_tensor * ggml_flash_attn_ext_lse(\n"
LSE_OPS = "        GGML_OP_FLASH_ATTN_EXT_LSE,\n        GGML_OP_FLASH_ATTN_EXT_LSE_MERGE,\n"


@dataclass(frozen=True)
class Run:
    """One run of the script: exit code, output, the JSON line, and what the stand-ins saw."""

    rc: int
    out: str
    record: dict[str, object]
    calls: list[str]


def _executable(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _tree(tmp: Path, *, lse: bool, dca: bool, dca_flag: bool) -> Path:
    """A clean room with only the files the script looks at."""
    room = tmp / "room"
    for rel in ("ggml/include", "tests", "common", "src"):
        (room / rel).mkdir(parents=True)
    (room / "ggml/include/ggml.h").write_text(
        "enum ggml_op {\n        GGML_OP_FLASH_ATTN_EXT,\n"
        + (LSE_OPS if lse else "")
        + "};\n"
        + (LSE_DECL if lse else ""),
        encoding="utf-8",
    )
    (room / "tests/test-backend-ops.cpp").write_text(
        "// GGML_OP_FLASH_ATTN_EXT\n"
        + ("// GGML_OP_FLASH_ATTN_EXT_LSE\n// GGML_OP_FLASH_ATTN_EXT_LSE_MERGE\n" if lse else ""),
        encoding="utf-8",
    )
    (room / "common/arg.cpp").write_text(
        '{"--dca"}, "[on|off]",\n' if dca_flag else '{"--ctx-size"}\n', encoding="utf-8"
    )
    if dca:
        (room / "src/llama-dca.h").write_text("#pragma once\n", encoding="utf-8")
    return room


def _run(tmp: Path, room: Path, *, tbo_rc: int = 0) -> Run:
    build = tmp / "build"
    (build / "bin").mkdir(parents=True)
    calls = tmp / "calls.log"
    _executable(
        build / "bin" / "test-backend-ops",
        f'#!/bin/sh\necho "test-backend-ops $*" >> {calls}\n'
        f'echo "  5/5 tests passed"\nexit {tbo_rc}\n',
    )
    python = tmp / "python"
    _executable(
        python,
        "#!/bin/sh\n"
        'if [ "$1" = "-m" ] && [ "$2" = "pytest" ]; then\n'
        f'  echo "pytest $PATCHCTL_DCA_SRC $PATCHCTL_DCA_BUILD $PWD $*" >> {calls}\n'
        '  echo "3 passed in 0.1s"; exit 0\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n',
    )
    out = tmp / "checks.jsonl"
    env = dict(
        os.environ,
        PATCHCTL_BUILD_DIR=str(build),
        PATCHCTL_BIN_DIR=str(build / "bin"),
        PATCHCTL_PATCH_ID="0099-demo",
        PREFIX_CHECKS_OUT=str(out),
        PREFIX_CHECKS_PYTHON=str(python),
    )
    done = subprocess.run(
        ["bash", str(SCRIPT)], cwd=room, env=env, capture_output=True, text=True, timeout=60
    )
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1, done.stdout + done.stderr
    record = json.loads(lines[0])
    assert isinstance(record, dict)
    logged = calls.read_text(encoding="utf-8").splitlines() if calls.exists() else []
    return Run(done.returncode, done.stdout, record, logged)


def _statuses(record: dict[str, object]) -> dict[str, str]:
    checks = record["checks"]
    assert isinstance(checks, list)
    return {str(c["check"]): str(c["status"]) for c in checks}


def test_a_tree_without_the_lse_ops_runs_only_upstreams_op(tmp_path: Path) -> None:
    run = _run(tmp_path, _tree(tmp_path, lse=False, dca=False, dca_flag=False))
    assert run.rc == 0, run.out
    assert run.record["id"] == "0099-demo" and run.record["ok"] is True
    assert _statuses(run.record) == {
        "test-backend-ops FLASH_ATTN_EXT": "passed",
        "test-backend-ops FLASH_ATTN_EXT_LSE": "not-applicable",
        "test-backend-ops FLASH_ATTN_EXT_LSE_MERGE": "not-applicable",
        "test_fa_lse.py": "not-applicable",
        "test_dca_model.py": "not-applicable",
    }
    assert len(run.calls) == 1 and "-o FLASH_ATTN_EXT -p" in run.calls[0]
    why = "(ggml.h has no GGML_OP_FLASH_ATTN_EXT_LSE)"
    assert f"not applicable: test-backend-ops FLASH_ATTN_EXT_LSE {why}" in run.out


def test_the_lse_ops_without_llama_dca_run_test_backend_ops_only(tmp_path: Path) -> None:
    run = _run(tmp_path, _tree(tmp_path, lse=True, dca=False, dca_flag=False))
    assert run.rc == 0, run.out
    statuses = _statuses(run.record)
    assert statuses["test-backend-ops FLASH_ATTN_EXT_LSE"] == "passed"
    assert statuses["test-backend-ops FLASH_ATTN_EXT_LSE_MERGE"] == "passed"
    assert statuses["test_fa_lse.py"] == "not-applicable"
    assert "no src/llama-dca.h" in run.out
    assert not any(c.startswith("pytest") for c in run.calls)


def test_llama_dca_without_the_flag_runs_the_op_reference_only(tmp_path: Path) -> None:
    run = _run(tmp_path, _tree(tmp_path, lse=True, dca=True, dca_flag=False))
    assert run.rc == 0, run.out
    statuses = _statuses(run.record)
    assert statuses["test_fa_lse.py"] == "passed"
    assert statuses["test_dca_model.py"] == "not-applicable"
    assert "does not parse --dca" in run.out


def test_the_whole_series_runs_every_check_against_its_own_tree(tmp_path: Path) -> None:
    room = _tree(tmp_path, lse=True, dca=True, dca_flag=True)
    run = _run(tmp_path, room)
    assert run.rc == 0, run.out
    assert set(_statuses(run.record).values()) == {"passed"}
    pytests = [c for c in run.calls if c.startswith("pytest")]
    assert len(pytests) == 2
    for call in pytests:
        # the tree under test and its build, from the patchctl repository
        assert call.startswith(f"pytest {room} {tmp_path / 'build'} {ROOT} ")
    assert pytests[0].endswith("tests/evals/dca/test_fa_lse.py")
    assert pytests[1].endswith("tests/evals/dca/test_dca_model.py")


def test_a_failing_check_fails_the_prefix_after_the_others_ran(tmp_path: Path) -> None:
    run = _run(tmp_path, _tree(tmp_path, lse=True, dca=True, dca_flag=True), tbo_rc=1)
    assert run.rc == 1
    assert run.record["ok"] is False
    statuses = _statuses(run.record)
    assert statuses["test-backend-ops FLASH_ATTN_EXT"] == "failed"
    assert statuses["test_dca_model.py"] == "passed"  # it still ran


def test_outside_check_prefixes_it_refuses(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHCTL_")}
    done = subprocess.run(
        ["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "check-prefixes --run" in done.stderr
