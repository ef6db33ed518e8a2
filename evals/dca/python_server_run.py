#!/usr/bin/env python3
"""One long request to the patched llama-cpp-python's OpenAI-compatible server, recorded.

Starts `python -m llama_cpp.server` (the interpreter running this script, with the patched
`llama_cpp` importable: installed, or its directory on PYTHONPATH) on loopback with the given
settings, waits for /v1/models, sends one /v1/completions request (a passkey hidden at the start
of a filler text of about --prompt-tokens tokens, greedy), stops the server and writes
`<out>/<name>.json`: the server command, the request (the prompt as its length, head, tail and
sha256), the response (text, usage), wall times, the llama.cpp lines of the log that say what
ran (DCA resolution, context, timings) and the host. The server log is kept as `<name>.log`.

    python evals/dca/python_server_run.py --model SmolLM2-135M-Instruct.Q4_1.gguf \
        --out docs/benchmarks/python-server-2026-12-05 --name dca-on -- --n_ctx 16384 --dca true
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
PASSKEY = "7311"
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back. "
QUESTION = " What is the passkey? The passkey is"
LOG_LINES = re.compile(
    r"dca = on:|dca  +=|n_ctx_seq|n_ctx_train|llama_perf_context_print|"
    r"failed|error|CPU : |AMX|CPU_REPACK"
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def post(port: int, path: str, body: dict[str, object] | None, timeout: float) -> dict[str, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://{HOST}:{port}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer: dict[str, object] = json.loads(response.read())
        return answer


def build_prompt(model: str, tokens: int) -> tuple[str, int]:
    """The passkey, filler up to about `tokens` tokens, the question: (prompt, its token count)."""
    from llama_cpp import Llama  # type: ignore[import-not-found]

    vocab = Llama(model, vocab_only=True, verbose=False)
    head = f"There is a passkey hidden in this text. Remember it. The passkey is {PASSKEY}. "
    per_filler = len(vocab.tokenize(FILLER.encode(), add_bos=False))
    fixed = len(vocab.tokenize((head + QUESTION).encode(), add_bos=True))
    prompt = head + FILLER * max(0, (tokens - fixed) // per_filler) + QUESTION
    return prompt, len(vocab.tokenize(prompt.encode(), add_bos=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--name", required=True)
    parser.add_argument("--prompt-tokens", type=int, default=12000)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("server_args", nargs="*", help="after --: the server's settings")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    prompt, n_prompt = build_prompt(args.model, args.prompt_tokens)
    port = free_port()
    server = [
        sys.executable, "-m", "llama_cpp.server", "--model", args.model,
        "--host", HOST, "--port", str(port), *args.server_args,
    ]  # fmt: skip
    log_path = args.out / f"{args.name}.log"
    started = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(server, stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited ({proc.returncode}); see {log_path}")
            try:
                post(port, "/v1/models", None, 10)
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() - started > 300:
                    raise SystemExit(
                        f"the server did not answer in 300 s; see {log_path}"
                    ) from None
                time.sleep(0.5)
        ready_s = time.monotonic() - started
        request = {
            "prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0.0, "seed": 1,
        }  # fmt: skip
        sent = time.monotonic()
        answer = post(port, "/v1/completions", request, args.timeout)
        request_s = time.monotonic() - sent
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log_text = log_path.read_text(errors="replace")
    choices = answer.get("choices")
    text = choices[0]["text"] if isinstance(choices, list) and choices else None
    import llama_cpp  # type: ignore[import-not-found]

    record = {
        "what": "one long /v1/completions request to python -m llama_cpp.server",
        "script": "evals/dca/python_server_run.py",
        "command": [
            "python",
            "evals/dca/python_server_run.py",
            "--model",
            os.path.basename(args.model),
            "--out",
            str(args.out),
            "--name",
            args.name,
            "--prompt-tokens",
            str(args.prompt_tokens),
            "--max-tokens",
            str(args.max_tokens),
            "--",
            *args.server_args,
        ],
        "server_command": [
            "python",
            "-m",
            "llama_cpp.server",
            "--model",
            os.path.basename(args.model),
            "--host",
            HOST,
            "--port",
            "<free port>",
            *args.server_args,
        ],
        "llama_cpp_python": llama_cpp.__version__,
        "model": os.path.basename(args.model),
        "model_sha256": hashlib.sha256(Path(args.model).read_bytes()).hexdigest(),
        "request": {
            "path": "/v1/completions",
            "max_tokens": args.max_tokens,
            "temperature": 0.0,
            "seed": 1,
            "prompt_chars": len(prompt),
            "prompt_tokens_local": n_prompt,
            "prompt_sha256": hashlib.sha256(prompt.encode()).hexdigest(),
            "prompt_head": prompt[:120],
            "prompt_tail": prompt[-120:],
            "passkey": PASSKEY,
        },
        "response": {
            "text": text,
            "finish_reason": choices[0].get("finish_reason") if text is not None else None,  # type: ignore[index]
            "usage": answer.get("usage"),
            "passkey_found": text is not None and PASSKEY in text,
        },
        "timings_s": {"server_ready": round(ready_s, 1), "request": round(request_s, 1)},
        "log_lines": [line for line in log_text.splitlines() if LOG_LINES.search(line)],
        "host": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "load_average_after": os.getloadavg()[0],
        },
    }
    (args.out / f"{args.name}.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({"name": args.name, "text": text, "timings_s": record["timings_s"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
