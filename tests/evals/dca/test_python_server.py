"""`python -m llama_cpp.server` from the patched wheel answers an OpenAI-style request
with DCA on, configured by its command line or by its config file, over loopback only.

The server log must show llama.cpp's own line for a DCA context with the requested sizes and
mscale forced on (the tiny model names no original length, so auto would say "off (auto: ...)"):
the settings reached the C struct (a setting the server dropped would leave DCA or mscale at its
default, and the request would still succeed). The prompt spans several DCA chunks. Each
server is bounded in time and stopped by the test.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .model_runs import model_path
from .test_dca_model import DCA
from .tiny_models import TinyModels

HOST = "127.0.0.1"
READY_S = 120.0
PROMPT = " ".join(f"word{i}" for i in range(120))  # ~170 test-tokenizer tokens: 3+ chunks of 56
DCA_LOG = re.compile(  # llama-dca.cpp's llama_dca_resolve: the values and where they came from
    rf"dca = on: chunk_size = {DCA.chunk_size} \[--dca-chunk-size\], "
    rf"local_window = {DCA.local_window} \[--dca-local-window\], .*, mscale = on$",
    re.MULTILINE,
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _request(port: int, path: str, body: dict[str, object] | None = None) -> dict[str, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://{HOST}:{port}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        answer: dict[str, object] = json.loads(response.read())
        return answer


@contextmanager
def server(site: Path, args: list[str], log: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m llama_cpp.server ARGS`, ready (its /v1/models answers), then stopped."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + READY_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
            try:
                _request(port, "/v1/models")
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"the server did not answer within {READY_S} s:\n{log.read_text()[-4000:]}"
                    )
                time.sleep(0.5)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _settings(model: Path) -> dict[str, object]:
    return {
        "model": str(model),
        "model_alias": "tiny",
        "n_ctx": 512,
        "n_threads": 2,
        "n_threads_batch": 2,
        "dca": True,
        "dca_chunk_size": DCA.chunk_size,
        "dca_local_window": DCA.local_window,
        "dca_mscale": True,
        "verbose": True,
    }


def _command_line(model: Path, port: int, tmp_path: Path) -> list[str]:
    args = ["--host", HOST, "--port", str(port)]
    for key, value in _settings(model).items():
        args += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    return args


def _config_file(model: Path, port: int, tmp_path: Path) -> list[str]:
    config = tmp_path / "server.json"
    config.write_text(json.dumps({"host": HOST, "port": port, "models": [_settings(model)]}))
    return ["--config_file", str(config)]


CONFIGURED_BY = {"command-line": _command_line, "config-file": _config_file}


@pytest.mark.parametrize("configured_by", list(CONFIGURED_BY))
def test_the_server_answers_a_completion_with_dca_on(
    configured_by: str, python_site: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    model = model_path(models_dir, "qwen2")
    port = _free_port()
    args = CONFIGURED_BY[configured_by](model, port, tmp_path)
    log = tmp_path / "server.log"
    with server(python_site, args, log, port):
        answer = _request(
            port,
            "/v1/completions",
            {"model": "tiny", "prompt": PROMPT, "max_tokens": 8, "temperature": 0.0, "seed": 1},
        )
    assert answer["object"] == "text_completion"
    choices = answer["choices"]
    assert isinstance(choices, list) and isinstance(choices[0]["text"], str)
    usage = answer["usage"]
    assert isinstance(usage, dict) and usage["prompt_tokens"] > DCA.chunk_size
    assert 1 <= usage["completion_tokens"] <= 8
    assert DCA_LOG.search(log.read_text()), (
        "no DCA context in the server log:\n" + log.read_text()[-3000:]
    )
