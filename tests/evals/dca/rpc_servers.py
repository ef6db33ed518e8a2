"""ggml-rpc-server processes on loopback ports, for the RPC tests (test_dca_rpc.py) and the RPC
overhead benchmark (evals/dca/dca_rpc_bench.py).

A server binds 127.0.0.1 only. Its port comes from the kernel (a socket bound to port 0, then
closed); another process can take that port before the server binds it, so a server that
reports "Failed to create server socket" is restarted on a new port (PORT_ATTEMPTS times). It
is ready once a TCP connection to it succeeds (the server takes the probe as a client that sends
nothing and goes back to accept). Its output goes to a log file. Only the process started here
is ever signalled: `kill` (SIGKILL, for the crash test) or, on exit of the ``with`` block,
SIGTERM then SIGKILL.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from .processes import stop_process

START_TIMEOUT_S = 60.0
PORT_ATTEMPTS = 5
HOST = "127.0.0.1"
BIND_FAILED = "Failed to create server socket"
_VERSION = re.compile(r"Starting RPC server v(\d+)\.(\d+)\.(\d+)")


class RpcServerFailed(RuntimeError):
    """ggml-rpc-server exited or never accepted a connection; the message carries its log."""


def free_port() -> int:
    """A port the kernel had free on 127.0.0.1 a moment ago (see the module notes)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


@dataclass
class RpcServer:
    """One ggml-rpc-server on 127.0.0.1 (CPU device, `threads` threads)."""

    binary: Path
    log: Path
    threads: int = 1
    extra_args: Sequence[str] = ()
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def version(self) -> tuple[int, int, int]:
        """The protocol version the server printed at start."""
        found = _VERSION.search(self.log_text())
        if found is None:
            raise RpcServerFailed(f"no version line in {self.log}:\n{self.log_text()[-2000:]}")
        return int(found[1]), int(found[2]), int(found[3])

    def _command(self) -> list[str]:
        return [
            str(self.binary), "-H", HOST, "-p", str(self.port), "-t", str(self.threads),
            *self.extra_args,
        ]  # fmt: skip

    def _try_start(self) -> bool:
        """Start on a fresh port; True when ready, False when the port was taken meanwhile."""
        self.port = free_port()
        cmd = self._command()
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                # the server returns normally (exit 0) after a failed bind
                if BIND_FAILED in self.log_text():
                    return False
                raise RpcServerFailed(
                    f"ggml-rpc-server exited with {self.proc.returncode} before it was ready:\n"
                    f"{' '.join(cmd)}\n{self.log_text()[-4000:]}"
                )
            if _accepts(self.port):
                return True
            time.sleep(0.1)
        self.stop()
        raise RpcServerFailed(
            f"ggml-rpc-server not accepting on {self.endpoint} after {START_TIMEOUT_S:.0f} s:\n"
            f"{self.log_text()[-4000:]}"
        )

    def start(self) -> RpcServer:
        for _attempt in range(PORT_ATTEMPTS):
            if self._try_start():
                return self
        raise RpcServerFailed(
            f"ggml-rpc-server could not bind a free port in {PORT_ATTEMPTS} attempts:\n"
            f"{self.log_text()[-2000:]}"
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL (a crash, as far as the client can tell)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=20)

    def stop(self) -> None:
        stop_process(self.proc)

    def __enter__(self) -> RpcServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def rpc_args(servers: Sequence[RpcServer], n_gpu_layers: int) -> tuple[str, ...]:
    """llama.cpp flags that put the last `n_gpu_layers` layers on `servers`, split evenly by
    layer (-sm layer, -ts 1/1/...: "/" because llama-bench reads "," as a list of values to run,
    the common parser takes both); the other layers stay on the local CPU."""
    split = "/".join("1" for _ in servers)
    return (
        "--rpc", ",".join(s.endpoint for s in servers),
        "-ngl", str(n_gpu_layers), "-sm", "layer", "-ts", split,
    )  # fmt: skip
