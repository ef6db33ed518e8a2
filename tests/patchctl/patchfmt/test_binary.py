"""binarypatch: the sizes `GIT binary patch` hunks declare, read without applying them."""

from __future__ import annotations

import base64
import zlib

import pytest

from patchctl.patchfmt.binary import declared_sizes, oversized


def _base85_lines(data: bytes) -> bytes:
    """`data` in git's binary-patch line format: a length character, then base85."""
    out = b""
    for start in range(0, len(data), 52):
        chunk = data[start : start + 52]
        length = chr(ord("A") + len(chunk) - 1 if len(chunk) <= 26 else ord("a") + len(chunk) - 27)
        out += length.encode() + base64.b85encode(chunk, pad=True) + b"\n"
    return out


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _patch(forward: bytes, reverse: bytes = b"") -> bytes:
    return (
        b"diff --git a/x.bin b/x.bin\nindex 1111111..2222222 100644\nGIT binary patch\n"
        + forward
        + b"\n"
        + reverse
        + (b"\n" if reverse else b"")
    )


def _delta(result_size: int) -> bytes:
    # source 3000 bytes; result `result_size`: one copy op that would repeat (never applied)
    body = _varint(3000) + _varint(result_size) + b"\x90\xff"
    deflated = zlib.compress(body)
    return f"delta {len(body)}\n".encode() + _base85_lines(deflated)


def _literal(size: int, data: bytes = b"") -> bytes:
    return f"literal {size}\n".encode() + _base85_lines(zlib.compress(data))


def test_a_literal_declares_its_size_and_a_delta_its_result_size() -> None:
    patch = _patch(_delta(1 << 40), _literal(3000, bytes(3000)))
    assert list(declared_sizes(patch)) == [("x.bin", "delta", 1 << 40), ("x.bin", "literal", 3000)]


def test_a_delta_bomb_is_oversized_at_any_limit_below_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 40-byte delta declaring a 1 TiB file: refused by its header alone."""
    patch = _patch(_delta(1 << 40))
    assert len(patch) < 200
    message = oversized(patch)
    assert message is not None and "x.bin" in message and "1024.0 GiB" in message
    assert "PATCHCTL_MAX_BLOB_BYTES" in message
    monkeypatch.setenv("PATCHCTL_MAX_BLOB_BYTES", str(1 << 40))
    assert oversized(patch) is None


def test_text_and_corrupt_binary_patches_are_left_to_git() -> None:
    assert oversized(b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-literal 99999999999\n+x\n") is None
    corrupt = _patch(b"delta 12\nz!!!!not base85\n")
    assert list(declared_sizes(corrupt)) == [("x.bin", "delta", 12)]  # git reports the damage
    assert oversized(corrupt) is None
