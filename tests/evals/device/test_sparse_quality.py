"""evals/device/sparse_quality.sh refuses what it cannot run before it starts a server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "evals" / "device" / "sparse_quality.sh"


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "W": str(tmp_path / "w"),
            "OUT": str(tmp_path / "out")}  # fmt: skip
    return subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env={**base, **env}, text=True,
                          capture_output=True, timeout=60, check=False)  # fmt: skip


def _server_and_model(tmp_path: Path) -> dict[str, str]:
    server = tmp_path / "llama-server"
    server.write_text("#!/bin/sh\nexit 99\n")
    server.chmod(0o755)
    model = tmp_path / "qwen.gguf"
    model.write_bytes(b"GGUF")
    return {"LLAMA_SERVER": str(server), "QWEN_GGUF": str(model)}


def _data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    for name in ("corpus.json.xz", "tokens-qwen2.5-coder-0.5b.json.xz"):
        (data / name).write_bytes(b"")
    return data


def test_the_server_and_model_are_required(tmp_path: Path) -> None:
    r = _run(tmp_path)
    assert r.returncode != 0 and "LLAMA_SERVER" in r.stderr
    env = _server_and_model(tmp_path)
    r = _run(tmp_path, LLAMA_SERVER=env["LLAMA_SERVER"], QWEN_GGUF=str(tmp_path / "none.gguf"))
    assert r.returncode == 2 and "is not a file" in r.stderr


def test_missing_haystack_data_is_refused_naming_the_file(tmp_path: Path) -> None:
    r = _run(tmp_path, LONGCTX_DATA=str(tmp_path / "nodata"), **_server_and_model(tmp_path))
    assert r.returncode == 2
    assert "nodata/corpus.json.xz missing" in r.stderr
    assert not (tmp_path / "w" / "sq").exists()  # refused before the first write of its own


def test_an_unknown_phase_is_refused(tmp_path: Path) -> None:
    data = _data(tmp_path)
    r = _run(tmp_path, LONGCTX_DATA=str(data), PHASES="z", **_server_and_model(tmp_path))
    assert r.returncode == 2 and "unknown phase z" in r.stderr


def test_numbers_are_checked(tmp_path: Path) -> None:
    data = _data(tmp_path)
    for var, bad in (("BUDGET_S", "9s"), ("HAYSTACKS", "0"), ("LANES", "-1")):
        r = _run(tmp_path, LONGCTX_DATA=str(data), **{var: bad}, **_server_and_model(tmp_path))
        assert r.returncode == 2 and f"{var} must be a positive integer, not '{bad}'" in r.stderr
