"""A llama-server process on a loopback port, for the DCA server tests (test_dca_server.py).

Started with the given arguments on 127.0.0.1 and a free port, its log in a file, ready once
``GET /health`` answers 200; stopped (SIGTERM, then SIGKILL) on exit of the ``with`` block. Only the
process started here is ever signalled. Requests go through ``urllib`` (no HTTP library needed).
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from .processes import stop_process

START_TIMEOUT_S = 180.0
REQUEST_TIMEOUT_S = 600.0


class ServerFailed(RuntimeError):
    """llama-server exited or never became ready; the message carries its log tail."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class LlamaServer:
    binary: Path
    args: Sequence[str]
    log: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def start(self) -> LlamaServer:
        cmd = [str(self.binary), "--host", "127.0.0.1", "--port", str(self.port), *self.args]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerFailed(
                    f"llama-server exited with {self.proc.returncode} before it was ready:\n"
                    f"{' '.join(cmd)}\n{self.log_text()[-4000:]}"
                )
            try:
                if self.get("/health").status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise ServerFailed(
            f"llama-server not ready after {START_TIMEOUT_S:.0f} s:\n{self.log_text()[-4000:]}"
        )

    def stop(self) -> None:
        stop_process(self.proc)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _request(self, method: str, path: str, body: dict[str, Any] | None) -> Reply:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
                return Reply(resp.status, _json(resp.read()))
        except urllib.error.HTTPError as err:
            return Reply(err.code, _json(err.read()))

    def get(self, path: str) -> Reply:
        return self._request("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> Reply:
        return self._request("POST", path, body)


def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw or b"{}")
    except json.JSONDecodeError:
        return {"raw": raw.decode(errors="replace")}
    return value if isinstance(value, dict) else {"value": value}
