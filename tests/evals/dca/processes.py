"""Stopping the server processes the DCA tests start (llama-server, rpc-server)."""

from __future__ import annotations

import subprocess

STOP_TIMEOUT_S = 20.0


def stop_process(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM a running `proc`, then SIGKILL it when it has not exited within the timeout."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)
