"""tests/evals/dca/rpc_servers.py against stand-in servers (small Python scripts that take
ggml-rpc-server's flags), so its start, port retry and failure paths are checked without a build."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from . import rpc_servers
from .rpc_servers import RpcServer, RpcServerFailed, rpc_args

# -p PORT: bind 127.0.0.1:PORT and accept forever, after printing ggml-rpc-server's version line;
# the first FAIL_FIRST starts (counted in COUNTER) print its bind failure and exit 0 instead
FAKE = """\
import socket, sys, time
from pathlib import Path
args = sys.argv[1:]
port = int(args[args.index("-p") + 1])
counter = Path(COUNTER)
n = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(n + 1))
if n < FAIL_FIRST:
    print("Failed to create server socket", flush=True)
    sys.exit(0)
if EXIT_CODE:
    print("error: unknown device: XYZ", flush=True)
    sys.exit(EXIT_CODE)
print("Starting RPC server v8.0.0", flush=True)
s = socket.socket()
s.bind(("127.0.0.1", port))
s.listen(4)
while True:
    c, _ = s.accept()
    c.close()
"""


def fake_server(tmp_path: Path, fail_first: int = 0, exit_code: int = 0) -> Path:
    script = tmp_path / "fake-rpc-server"
    body = (
        FAKE.replace("COUNTER", repr(str(tmp_path / "starts")))
        .replace("FAIL_FIRST", str(fail_first))
        .replace("EXIT_CODE", str(exit_code))
    )
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def starts(tmp_path: Path) -> int:
    return int((tmp_path / "starts").read_text())


def test_server_is_ready_on_loopback_and_stopped(tmp_path: Path) -> None:
    with RpcServer(fake_server(tmp_path), tmp_path / "log") as server:
        assert server.alive()
        assert server.endpoint == f"127.0.0.1:{server.port}"
        assert server.version() == (8, 0, 0)
        proc = server.proc
    assert proc is not None and proc.poll() is not None, "the server outlived its with block"


def test_a_taken_port_is_retried_on_a_new_one(tmp_path: Path) -> None:
    with RpcServer(fake_server(tmp_path, fail_first=2), tmp_path / "log") as server:
        assert server.alive()
    assert starts(tmp_path) == 3


def test_gives_up_after_the_port_attempts(tmp_path: Path) -> None:
    server = RpcServer(fake_server(tmp_path, fail_first=99), tmp_path / "log")
    with pytest.raises(RpcServerFailed, match="could not bind a free port"):
        server.start()
    assert starts(tmp_path) == rpc_servers.PORT_ATTEMPTS


def test_a_server_that_exits_fails_with_its_log(tmp_path: Path) -> None:
    server = RpcServer(fake_server(tmp_path, exit_code=3), tmp_path / "log")
    with pytest.raises(RpcServerFailed, match=r"exited with 3(.|\n)*unknown device"):
        server.start()
    assert starts(tmp_path) == 1


def test_kill_ends_the_process(tmp_path: Path) -> None:
    with RpcServer(fake_server(tmp_path), tmp_path / "log") as server:
        server.kill()
        assert not server.alive()
        assert server.proc is not None and server.proc.returncode < 0


def test_rpc_args_split_by_layer_over_every_server(tmp_path: Path) -> None:
    a = RpcServer(Path("x"), tmp_path / "a", port=5001)
    b = RpcServer(Path("x"), tmp_path / "b", port=5002)
    args = rpc_args([a, b], 3)
    assert args == (
        "--rpc", "127.0.0.1:5001,127.0.0.1:5002", "-ngl", "3", "-sm", "layer", "-ts", "1/1",
    )  # fmt: skip
