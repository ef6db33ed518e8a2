"""llama-server as the harness drives it: one process per (method, lengths), loopback HTTP only.

The server binds a free loopback port itself (``--port 0``; the port is read from its log) and
runs with ``-np SLOTS --no-kv-unified`` (each slot its own KV stream of
``n_ctx / SLOTS`` cells, so a slot's cells stay contiguous), ``--cache-ram 0`` (no host copy of
a million-token prompt cache), ``--no-warmup`` and ``--no-webui``. A request names its slot
(``id_slot``) and sets ``cache_prompt``, so the questions of one haystack, sent one after the
other to the same slot, reuse the shared context's KV cells and only process their own suffix.
Its log (stderr) goes to a file; memory.py reads the buffer sizes from it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from .errors import ServerFailed, UnsupportedFlags

HOST = "127.0.0.1"
# Added when the build has them (older builds lack some): per-slot KV streams, no host prompt
# cache, no warmup, no web UI, and log level 4 (llama.cpp's buffer sizes, the DCA settings and the
# memory breakdown at exit are only logged at that level).
FIXED_ARGS = (("--no-kv-unified",), ("--cache-ram", "0"), ("--no-warmup",), ("--no-webui",),
              ("-lv", "4"))  # fmt: skip
# "dca = on (chunk_size = C, local_window = W, chunk_len = L)" (first 0078), or "dca = on:
# chunk_size = C [source], local_window = W [source], chunk_len = L, original length = O
# [source], mscale = on|off (...)" (builds with the DCA defaults and --dca-mscale)
DCA_LINE = re.compile(
    r"dca\s+= on[ :(]+chunk_size = (\d+)[^\n]*?local_window = (\d+)[^\n]*?chunk_len = (\d+)"
    r"(?:, original length = (\d+)[^\n]*?, mscale = ([^\n]*))?"
)
REQUEST_TIMEOUT_S = 3600.0  # a 1M-token prefill on a slow device
RETRIES = 3
# `--port 0` makes the server bind a free port and log it (tools/server/server.cpp); no race
# with another process for a port picked beforehand.
LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")


@cache
def supported_flags(binary: Path) -> frozenset[str]:
    """Every option name that `binary --help` lists (``-c``, ``--ctx-size``, ``--dca``, ...)."""
    try:
        proc = subprocess.run(
            [str(binary), "--help"], capture_output=True, check=False, timeout=120
        )
    except OSError as exc:
        raise ServerFailed(f"cannot run {binary}: {exc}", hint="build llama-server") from None
    text = (proc.stdout + proc.stderr).decode("utf-8", errors="replace")
    flags = frozenset(re.findall(r"(?<![\w-])(--?[A-Za-z][A-Za-z0-9-]*)", text))
    if "--ctx-size" not in flags:
        raise ServerFailed(f"{binary} --help lists no --ctx-size: not a llama-server?")
    return flags


def flags_in(args: Iterable[str]) -> tuple[str, ...]:
    """The option names among command-line words (values such as ``-1`` or ``on`` are not)."""
    return tuple(a.split("=", 1)[0] for a in args if re.match(r"--?[A-Za-z]", a))


def check_flags(binary: Path, args: Sequence[str], what: str) -> None:
    """UnsupportedFlags naming the options of `args` that `binary` does not have."""
    missing = tuple(f for f in flags_in(args) if f not in supported_flags(binary))
    if missing:
        raise UnsupportedFlags(
            f"{what} needs {', '.join(missing)}, which {binary.name} does not have",
            flags=missing,
            hint="build a tree with that flag, or leave the method out (--methods)",
        )


def _transient(exc: BaseException) -> bool:
    """A refused or reset connection (a full accept queue), not a timeout or a bad answer."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return isinstance(reason, (ConnectionResetError, ConnectionRefusedError, BrokenPipeError))


@dataclass(frozen=True)
class Completion:
    """One /completion answer: the text and the server's own timings."""

    content: str
    prompt_n: int  # prompt tokens processed by this request (the uncached suffix)
    cached_n: int  # prompt tokens reused from the slot's cache
    prompt_ms: float
    predicted_n: int
    predicted_ms: float


def _completion(data: dict[str, Any], n_prompt: int) -> Completion:
    timings = data.get("timings") or {}
    prompt_n = int(timings.get("prompt_n", data.get("tokens_evaluated", n_prompt)))
    cached = int(timings.get("cache_n", max(0, n_prompt - prompt_n)))
    return Completion(
        content=str(data.get("content", "")),
        prompt_n=prompt_n,
        cached_n=cached,
        prompt_ms=float(timings.get("prompt_ms", 0.0)),
        predicted_n=int(timings.get("predicted_n", data.get("tokens_predicted", 0))),
        predicted_ms=float(timings.get("predicted_ms", 0.0)),
    )


_LIVE: set[Server] = set()  # started and not yet stopped, for stop_all
_LIVE_LOCK = threading.Lock()


def stop_all() -> None:
    """Kill every server this process started and has not stopped (on SIGTERM / Ctrl-C: the
    servers share the harness's process group, so whoever ends the group ends them too)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for server in live:
        if server.proc.poll() is None:
            server.proc.kill()


@dataclass(eq=False)
class Server:
    """A running llama-server (start with `launch`; `stop` ends it)."""

    binary: Path
    args: tuple[str, ...]
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes]
    request_timeout_s: float = REQUEST_TIMEOUT_S  # one HTTP request, a long prefill included

    @classmethod
    def launch(
        cls,
        binary: Path,
        model: Path,
        n_ctx: int,
        slots: int,
        args: Sequence[str],
        log: Path,
        env: Mapping[str, str] | None = None,
    ) -> Server:
        """Start the server (UnsupportedFlags before starting when `args` has unknown options);
        `env` adds to the environment (e.g. CUDA_VISIBLE_DEVICES="" keeps it off the GPU)."""
        check_flags(binary, args, "this run")
        have = supported_flags(binary)
        fixed = [a for group in FIXED_ARGS if group[0] in have for a in group]
        full = (
            "-m", str(model), "-c", str(n_ctx), "-np", str(slots), "--host", HOST,
            "--port", "0", *fixed, *args,
        )  # fmt: skip
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                [str(binary), *full],
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )
        server = cls(binary, full, 0, log, proc)
        with _LIVE_LOCK:
            _LIVE.add(server)
        return server

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_ends(self, n: int = 1 << 21) -> str:
        """The log's first and last `n` bytes (all of it when shorter): what it says at the
        start (buffers, DCA settings) and at the end (the memory breakdown) of a long log."""
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        if len(data) > 2 * n:
            data = data[:n] + b"\n...\n" + data[-n:]
        return data.decode("utf-8", errors="replace")

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode("utf-8", errors="replace")
        except OSError:
            return ""

    def _died(self, doing: str) -> ServerFailed:
        return ServerFailed(
            f"llama-server exited with code {self.proc.returncode} while {doing} "
            f"(log: {self.log_path})",
            log_tail=self.log_tail(),
            hint="read the log tail: a wrong flag, too little memory, or a crash",
        )

    def wait_ready(self, timeout_s: float = 600.0) -> None:
        """Block until the server logs its port and /health answers 200; ServerFailed when the
        process exits first or `timeout_s` passes."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise self._died("starting")
            if not self.port:
                found = LISTENING.search(self.log_tail(1 << 16))
                self.port = int(found.group(1)) if found else 0
            if self.port and self._healthy():
                return
            time.sleep(0.2)
        self.stop()
        raise ServerFailed(
            f"llama-server not ready after {timeout_s:.0f} s", log_tail=self.log_tail()
        )

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self._url("/health"), timeout=5) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _url(self, path: str) -> str:
        return f"http://{HOST}:{self.port}{path}"

    def post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> Any:
        """POST JSON, return the decoded answer; ServerFailed on an HTTP error or a dead server.

        A connection refused or reset while the process lives is retried (RETRIES times, after
        0.5 s, 1 s, ...): every request the harness sends is greedy and may be sent again."""
        data = json.dumps(body).encode("utf-8")
        timeout = self.request_timeout_s if timeout is None else timeout
        for attempt in range(RETRIES + 1):
            req = urllib.request.Request(
                self._url(path), data=data, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(req, timeout=timeout) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:500].decode("utf-8", errors="replace")
                raise ServerFailed(
                    f"{path}: HTTP {exc.code}: {detail}", log_tail=self.log_tail()
                ) from None
            except (urllib.error.URLError, OSError) as exc:
                if self.proc.poll() is not None:
                    raise self._died(f"answering {path}") from None
                if attempt == RETRIES or not _transient(exc):
                    raise ServerFailed(f"{path}: {exc}", log_tail=self.log_tail()) from None
                time.sleep(0.5 * 2**attempt)
        raise AssertionError("unreachable")

    def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        data = self.post("/tokenize", {"content": text, "add_special": add_special})
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ServerFailed(f"/tokenize answered {str(data)[:200]}")
        return tokens

    def complete(self, prompt: Sequence[int], n_predict: int, slot: int) -> Completion:
        """Greedy continuation of token ids `prompt` on `slot`, reusing its cached prefix."""
        body = {
            "prompt": list(prompt),
            "n_predict": n_predict,
            "temperature": 0.0,
            "top_k": 1,
            "samplers": ["top_k"],
            "cache_prompt": True,
            "id_slot": slot,
            "stream": False,
        }
        data = self.post("/completion", body)
        if not isinstance(data, dict):
            raise ServerFailed(f"/completion answered {str(data)[:200]}")
        return _completion(data, len(prompt))

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s, to this process by its id only."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def parse_dca(log: str) -> dict[str, Any] | None:
    """The DCA settings a server logged at context creation, or None (DCA off): chunk_size,
    local_window, chunk_len and, from builds that log them, original_length and mscale (the
    logged text, e.g. "off (auto: original length unknown)")."""
    found = DCA_LINE.search(log)
    if found is None:
        return None
    cs, w, cl, orig, mscale = found.groups()
    out: dict[str, Any] = {"chunk_size": int(cs), "local_window": int(w), "chunk_len": int(cl)}
    if orig is not None:
        out.update(original_length=int(orig), mscale=mscale.strip())
    return out


def server_version(binary: Path) -> str:
    """`binary --version`'s first lines (the build number and commit), or '' when it fails."""
    try:
        proc = subprocess.run([str(binary), "--version"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    text = (proc.stdout + proc.stderr).decode("utf-8", errors="replace")
    return " ".join(line.strip() for line in text.splitlines() if "version" in line.lower())[:200]
