"""limits.py: defaults, environment overrides, and the errors that name them."""

from __future__ import annotations

import pytest

from patchctl.errors import ConfigError
from patchctl.limits import ALL_LIMITS, ARCHIVE_BYTES, human


def test_defaults_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    for limit in ALL_LIMITS:
        monkeypatch.delenv(limit.env, raising=False)
        assert limit.value() == limit.default > 0
    monkeypatch.setenv(ARCHIVE_BYTES.env, " 1234 ")
    assert ARCHIVE_BYTES.value() == 1234
    assert "PATCHCTL_MAX_ARCHIVE_BYTES=" in ARCHIVE_BYTES.hint()


@pytest.mark.parametrize("raw", ["x", "-1", "0", "1.5"])
def test_bad_values_are_config_errors_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(ARCHIVE_BYTES.env, raw)
    with pytest.raises(ConfigError, match=ARCHIVE_BYTES.env):
        ARCHIVE_BYTES.value()


def test_every_limit_is_documented() -> None:
    from pathlib import Path

    doc = (Path(__file__).parent.parent / "docs" / "reliability.md").read_text()
    for limit in ALL_LIMITS:
        assert f"| `{limit.env}` |" in doc


def test_human_sizes() -> None:
    assert human(12) == "12 bytes" and human(1536) == "1.5 KiB" and human(8 << 30) == "8.0 GiB"
