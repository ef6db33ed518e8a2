"""Fault injection for the kill test: SIGKILL this process at its Nth write or git call.

The kill test (tests/test_kill.py, scripts/kill_test.py) sets `PATCHCTL_TEST_KILL_AT=N`; the
Nth call of `reached` (or of `running`, for a git child process) then kills the process with
SIGKILL, as the OOM killer or `kill -9` would, at a point where a real command writes. With
`PATCHCTL_TEST_KILL_TRACE=FILE` every point is also appended to FILE (its label, one per line),
which is how the test learns how many points a command has. Neither variable is ever set
outside those tests; unset, a point costs one dictionary lookup.
"""

from __future__ import annotations

import atexit
import os
import random
import signal
import subprocess
import threading
import time

KILL_AT = "PATCHCTL_TEST_KILL_AT"
TRACE = "PATCHCTL_TEST_KILL_TRACE"

_count = 0


def armed() -> bool:
    """True in the kill test only (one of its variables is set)."""
    return KILL_AT in os.environ or TRACE in os.environ


def _next(label: str) -> bool:
    """Count one point; True when this is the one to die at."""
    global _count
    _count += 1
    trace = os.environ.get(TRACE)
    if trace:
        with open(trace, "a", encoding="utf-8") as out:
            out.write(f"{_count} {label}\n")
    return os.environ.get(KILL_AT) == str(_count)


def die() -> None:
    """SIGKILL this process now (never returns)."""
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # the signal is delivered before this ends


def reached(label: str) -> None:
    """A kill point: a write or a step of a command is about to happen."""
    if armed() and _next(label):
        die()


def running(label: str, child: subprocess.Popen[bytes]) -> None:
    """A kill point while `child` (a git process) runs: at the chosen point the child is
    killed after a short random delay (it may have written part of its work, or finished),
    then this process. Only the child and this process die, never the rest of the group. When
    the command would end before the delay is over (a quick git call at its last point), it dies
    on its way out instead, so every chosen point is a kill."""
    if not (armed() and _next(label)):
        return
    atexit.register(die)

    def kill_both() -> None:
        child.kill()
        die()

    timer = threading.Timer(random.Random(_count).uniform(0.0, 0.02), kill_both)
    timer.daemon = True
    timer.start()
