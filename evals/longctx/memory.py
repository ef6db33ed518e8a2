"""Peak memory of one server process: polled while it runs, and read from its own log.

- ``device_mib``: the process's GPU memory, the largest ``used_memory`` nvidia-smi reports for
  its pid (``--query-compute-apps``), polled every `interval` seconds. None when nvidia-smi is
  missing or does not show the pid (a container with its own pid namespace).
- ``device_total_mib``: the largest total ``memory.used`` of all GPUs during the process's life,
  every process included (meaningful as a per-process figure only when it runs alone).
- ``host_mib``: the process's peak resident set (``VmHWM`` of /proc/PID/status).
- ``buffers``: the buffers llama.cpp logs at load (``<device> model|KV|compute|output buffer size
  = N MiB``), MiB per device and kind: what llama.cpp itself allocates, without the CUDA context
  and the CUDA pool.
- ``breakdown``: the table llama-server prints when it stops (``common_memory_breakdown_print``),
  per GPU: total, free, self = model + context + compute (the compute buffers as they ended up),
  and unaccounted (total - free - self: the CUDA context, pools and every other process).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BUFFER_LINE = re.compile(r"([\w.-]+)\s+(model|KV|compute|output|RS) buffer size =\s*([\d.]+) MiB")


BREAKDOWN_LINE = re.compile(
    r"\|\s+- (\S+) \([^|]*\)\s*\|\s*(\d+)\s*=\s*(\d+)\s*\+\s*\(\s*(\d+)\s*=\s*(\d+)\s*\+"
    r"\s*(\d+)\s*\+\s*(\d+)\s*\)\s*\+\s*(-?\d+)"
)
BREAKDOWN_KEYS = ("total", "free", "self", "model", "context", "compute", "unaccounted")
HOST_LINE = re.compile(r"\|\s+- Host\s*\|\s*(\d+)\s*=\s*(\d+)\s*\+\s*(\d+)\s*\+\s*(\d+)")


def parse_breakdown(log: str) -> dict[str, dict[str, int]]:
    """MiB per device from the last memory breakdown table of a llama.cpp log ({} without one):
    each GPU's row, and ``Host`` (self = model + context + compute in host memory)."""
    out: dict[str, dict[str, int]] = {}
    for device, *values in BREAKDOWN_LINE.findall(log):
        out[device] = dict(zip(BREAKDOWN_KEYS, map(int, values), strict=True))
    for values in HOST_LINE.findall(log):
        out["Host"] = dict(zip(BREAKDOWN_KEYS[2:6], map(int, values), strict=True))
    return out


def parse_buffers(log: str) -> dict[str, dict[str, float]]:
    """MiB per device and kind from a llama.cpp log: model, KV, RS and output buffers add up
    (one line per buffer); compute buffers keep their largest line (a re-reservation repeats
    them)."""
    out: dict[str, dict[str, float]] = {}
    for device, kind, mib in BUFFER_LINE.findall(log):
        slot = out.setdefault(device, {})
        value = float(mib)
        slot[kind] = max(slot.get(kind, 0.0), value) if kind == "compute" else (
            slot.get(kind, 0.0) + value
        )
    return out


def smi_query(smi: str, query: Sequence[str]) -> list[list[str]]:
    try:
        proc = subprocess.run(
            [smi, *query, "--format=csv,noheader,nounits"], capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0:
        return []
    text = proc.stdout.decode("utf-8", errors="replace")
    return [[c.strip() for c in line.split(",")] for line in text.splitlines() if line.strip()]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def device_used(smi: str | None) -> tuple[dict[int, float], float | None]:
    """(MiB per pid of the compute processes, total MiB used on all GPUs) now."""
    if smi is None:
        return {}, None
    per_pid: dict[int, float] = {}
    for row in smi_query(smi, ["--query-compute-apps=pid,used_memory"]):
        mib = _number(row[1]) if len(row) > 1 else None
        if row[0].isdigit() and mib is not None:
            per_pid[int(row[0])] = per_pid.get(int(row[0]), 0.0) + mib
    totals = [_number(r[0]) for r in smi_query(smi, ["--query-gpu=memory.used"]) if r]
    known = [t for t in totals if t is not None]
    return per_pid, (sum(known) if known else None)


def host_peak(pid: int) -> float | None:
    """The process's peak resident set in MiB (VmHWM), or None when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) / 1024 if match else None


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


@dataclass
class MemoryMonitor:
    """Polls the memory of `pid` in a thread from `start` to `stop`; `peak` at any time."""

    pid: int
    interval: float = 0.5
    smi: str | None = field(default_factory=lambda: shutil.which("nvidia-smi"))
    device_mib: float | None = None
    device_total_mib: float | None = None
    host_mib: float | None = None
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def sample(self) -> None:
        per_pid, total = device_used(self.smi)
        host = host_peak(self.pid)
        with self._lock:
            self.device_mib = _max(self.device_mib, per_pid.get(self.pid))
            self.device_total_mib = _max(self.device_total_mib, total)
            self.host_mib = _max(self.host_mib, host)
            self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> MemoryMonitor:
        self.sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def peak(self) -> dict[str, Any]:
        """The peaks so far, rounded to 0.1 MiB (None where not measurable)."""
        with self._lock:
            values = {
                "device_mib": self.device_mib,
                "device_total_mib": self.device_total_mib,
                "host_mib": self.host_mib,
            }
            samples = self.samples
        rounded = {k: None if v is None else round(v, 1) for k, v in values.items()}
        return {**rounded, "samples": samples}


def device_info() -> dict[str, Any]:
    """The GPU (nvidia-smi) or the CPU this run measures on."""
    smi = shutil.which("nvidia-smi")
    gpus = smi_query(smi, ["--query-gpu=name,memory.total"]) if smi else []
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {"cpu": cpu, "cpus": len(os.sched_getaffinity(0))}
    if gpus:
        info["gpus"] = [{"name": g[0], "memory_mib": g[1] if len(g) > 1 else ""} for g in gpus]
    return info
