"""Fixtures for the long-context harness tests (its test doubles are in fakes.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    """A `llama-server` executable that runs the stand-in server (fake_server.py)."""
    script = Path(__file__).with_name("fake_server.py")
    exe = tmp_path / "bin" / "llama-server"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    exe.chmod(0o755)
    return exe
