"""The kill test, bounded for CI: patchctl commands SIGKILLed at seeded points, then the
invariants of tests/support/kill.py (old-or-new files, nothing lost, the next run recovers and
ends where an uninterrupted run ends, nothing left behind). The long run (>= 500 kills, every
scenario, also at random delays) is scripts/kill_test.py; docs/reliability.md has its result.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from support.kill import SCENARIOS, World, prepare, trial

# The commands whose kill points matter most, each killed at two seeded points.
BOUNDED = ("apply-update", "capture", "import", "refresh")


@pytest.mark.parametrize("name", BOUNDED)
def test_a_killed_command_loses_nothing_and_the_next_run_recovers(
    name: str, tmp_path: Path
) -> None:
    prep = prepare(SCENARIOS[name], World(tmp_path / "world"), tmp_path / "template")
    assert prep.points > 3  # the command passes kill points (journal, writes, git calls)
    rng = random.Random(f"kill-{name}")
    for _ in range(2):
        done = trial(prep, rng, "hook")
        assert done.killed, f"{name}: not killed at point {done.at}"
        assert done.violations == [] and done.lost == 0, (done.at, done.violations)
