"""Where the test tree and the repository are, for tests at any depth under tests/."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
GOLDEN = TESTS / "golden"
