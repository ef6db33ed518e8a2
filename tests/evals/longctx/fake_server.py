"""A stand-in for llama-server (the subset the harness uses), for fast tests of the runner.

- ``--help`` lists the options of a real server except ``--dca-mscale``;
- tokens are characters (code point + 2; BOS = 1 with add_special);
- /completion reads the prompt back as text and answers the question from the needles it holds,
  like a perfect model, except with ``--rope-scaling`` in its flags, where it answers "0";
- ``timings.cache_n`` is the prefix shared with the slot's previous prompt;
- it logs llama.cpp-style buffer lines, and exits at once with ``--crash``; with ``--hang`` it
  never answers a completion.
"""

from __future__ import annotations

import json
import re
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HELP = """usage: llama-server [options]
-m,    --model FNAME
-c,    --ctx-size N
-np,   --parallel N
-ngl,  --gpu-layers N
-t,    --threads N
-fa,   --flash-attn [on|off|auto]
-ctk,  --cache-type-k TYPE
-ctv,  --cache-type-v TYPE
--host HOST
--port PORT
-kvu,  --kv-unified, -no-kvu, --no-kv-unified
-cram, --cache-ram N
--no-warmup
--ui, --webui, --no-ui, --no-webui
--swa-full
--rope-scaling {none,linear,yarn}
--rope-scale N
--yarn-orig-ctx N
--override-kv KEY=TYPE:VALUE
--dca on|off
--dca-chunk-size N
--dca-local-window N
--crash
--hang
-lv,   --verbosity, --log-verbosity N
"""

ARGS = sys.argv[1:]
BROKEN = "--rope-scaling" in ARGS
SLOTS: dict[int, list[int]] = {}


def _text(tokens: list[int]) -> str:
    return "".join(chr(t - 2) for t in tokens if t >= 2)


def answer(prompt: str) -> str:
    """What a perfect reader of `prompt` would continue with."""
    if BROKEN:
        return " 0"
    tail = prompt.rsplit("\n", 1)[-1]
    if tail.startswith("What is the pass key?"):
        found = re.findall(r"The pass key is (\d+)\.", prompt)
        return f" {found[0]}." if found else " none"
    key = re.search(r"special magic numbers? for (\S+) mentioned", tail)
    if key:
        values = re.findall(rf"for {re.escape(key.group(1))} is: (\d+)\.", prompt)
        return " " + ", ".join(values) + "."
    value = re.search(r"the value (\d+)", tail)
    if value:
        names = set(re.findall(rf"VAR ([A-Z]{{5}}) = {value.group(1)}\.", prompt))
        for b, a in re.findall(r"VAR ([A-Z]{5}) = VAR ([A-Z]{5})\.", prompt):
            if a in names:
                names.add(b)
        return " " + ", ".join(sorted(names))
    return " ?"


class Server(ThreadingHTTPServer):
    request_queue_size = 64  # the harness tokenizes with 8 requests at a time


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send({"status": "ok"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            bos = [1] if body.get("add_special") else []
            self._send({"tokens": bos + [ord(c) + 2 for c in body["content"]]})
            return
        if "--hang" in ARGS:  # a server that never answers a completion
            time.sleep(3600)
        prompt = body["prompt"]
        slot = int(body.get("id_slot", 0))
        previous = SLOTS.get(slot, [])
        common = 0
        while common < min(len(previous), len(prompt)) and previous[common] == prompt[common]:
            common += 1
        SLOTS[slot] = list(prompt)
        content = answer(_text(prompt))
        self._send({"content": content, "timings": {
            "prompt_n": len(prompt) - common, "cache_n": common, "prompt_ms": 1.0,
            "predicted_n": len(content), "predicted_ms": 1.0}})  # fmt: skip


def main() -> int:
    if "--help" in ARGS:
        print(HELP)
        return 0
    if "--version" in ARGS:
        print("version: 1 (fake)")
        return 0
    if "--crash" in ARGS:
        print("error: asked to crash", file=sys.stderr)
        return 1
    n_ctx = int(ARGS[ARGS.index("-c") + 1])
    print(f"llama_kv_cache:        CPU KV buffer size = {n_ctx / 1024:.2f} MiB", file=sys.stderr)
    print("sched_reserve:        CPU compute buffer size =     8.00 MiB", file=sys.stderr)
    if "--dca" in ARGS:
        print("llama_context: dca                   = on (chunk_size = 3072, local_window = 512, "
              "chunk_len = 2560)", file=sys.stderr)  # fmt: skip
    sys.stderr.flush()
    server = Server(("127.0.0.1", int(ARGS[ARGS.index("--port") + 1])), Handler)
    print(f"main: listening on http://127.0.0.1:{server.server_address[1]}", file=sys.stderr)
    sys.stderr.flush()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
