"""evals/longctx/server.py and memory.py: flags, start/stop, log-derived memory."""

from __future__ import annotations

import os
import urllib.error
from pathlib import Path

import pytest

from evals.longctx.errors import ServerFailed, UnsupportedFlags
from evals.longctx.memory import MemoryMonitor, host_peak, parse_breakdown, parse_buffers
from evals.longctx.server import (
    Server,
    _transient,
    check_flags,
    flags_in,
    parse_dca,
    supported_flags,
)


def test_flags_in_skips_values() -> None:
    args = ["--dca", "on", "-ctk", "q8_0", "--rope-scale", "-1", "--x=3", "-ngl", "99"]
    assert flags_in(args) == ("--dca", "-ctk", "--rope-scale", "--x", "-ngl")


def test_unsupported_flags_are_named_before_start(fake_bin: Path) -> None:
    assert {"--dca", "-ctk", "--no-kv-unified"} <= supported_flags(fake_bin)
    check_flags(fake_bin, ["--dca", "on", "-ngl", "99"], "dca")
    with pytest.raises(UnsupportedFlags, match="--dca-mscale") as info:
        check_flags(fake_bin, ["--dca", "on", "--dca-mscale", "on"], "method dca-mscale")
    assert info.value.flags == ("--dca-mscale",) and info.value.exit_code == 22


def test_not_a_server_is_refused(tmp_path: Path) -> None:
    exe = tmp_path / "other"
    exe.write_text("#!/bin/sh\necho usage: other [-h]\n")
    exe.chmod(0o755)
    with pytest.raises(ServerFailed, match="not a llama-server"):
        supported_flags(exe)


def test_a_server_that_exits_reports_its_log(tmp_path: Path, fake_bin: Path) -> None:
    server = Server.launch(fake_bin, tmp_path / "m.gguf", 512, 1, ["--crash"], tmp_path / "s.log")
    with pytest.raises(ServerFailed, match="exited with code 1") as info:
        server.wait_ready(timeout_s=60)
    assert "asked to crash" in info.value.log_tail


def test_server_round_trip_and_stop(tmp_path: Path, fake_bin: Path) -> None:
    with Server.launch(fake_bin, tmp_path / "m.gguf", 4096, 2, [], tmp_path / "s.log") as server:
        server.wait_ready(timeout_s=60)
        assert server.port > 0
        assert server.tokenize("ab", add_special=True) == [1, ord("a") + 2, ord("b") + 2]
        got = server.complete(server.tokenize("The pass key is 12345.\nWhat is the pass key?"),
                              8, 1)  # fmt: skip
        assert got.content == " 12345." and got.cached_n == 0
        again = server.complete(server.tokenize("The pass key is 12345.\nWhat?"), 8, 1)
        assert again.cached_n == len("The pass key is 12345.\nWhat")
        mon = MemoryMonitor(server.pid, smi=None).start()
        mon.stop()
        assert mon.peak()["host_mib"] > 1 and mon.peak()["device_mib"] is None
    assert server.proc.returncode is not None


def test_only_refused_or_reset_connections_are_retried() -> None:
    assert _transient(urllib.error.URLError(ConnectionRefusedError()))
    assert _transient(ConnectionResetError())
    assert not _transient(urllib.error.URLError(TimeoutError()))
    assert not _transient(TimeoutError())


def test_parse_buffers() -> None:
    log = """load_tensors:   CPU_Mapped model buffer size =   137.42 MiB
load_tensors:        CUDA0 model buffer size =   373.71 MiB
llama_kv_cache:      CUDA0 KV buffer size = 12288.00 MiB
llama_kv_cache:      CUDA0 KV buffer size =    32.00 MiB
llama_context:  CUDA_Host  output buffer size =     0.58 MiB
sched_reserve:      CUDA0 compute buffer size =   300.75 MiB
sched_reserve:      CUDA0 compute buffer size =   812.00 MiB
sched_reserve:  CUDA_Host compute buffer size =    18.01 MiB
"""
    assert parse_buffers(log) == {
        "CPU_Mapped": {"model": 137.42},
        "CUDA0": {"model": 373.71, "KV": 12320.0, "compute": 812.0},
        "CUDA_Host": {"output": 0.58, "compute": 18.01},
    }


def test_parse_breakdown() -> None:
    log = """llama_memory_breakdown_print: | memory breakdown [MiB] | total   free     self   model   context   compute    unaccounted |
llama_memory_breakdown_print: |   - CUDA0 (RTX 4090)   | 24077 =  945 + (19187 = 17904 +     384 +     898) +        3945 |
llama_memory_breakdown_print: |   - Host               |                 58271 = 58259 +       0 +      12                |
"""  # noqa: E501  (the real line, from tools/fit-params/README.md)
    assert parse_breakdown(log) == {"CUDA0": {
        "total": 24077, "free": 945, "self": 19187, "model": 17904, "context": 384,
        "compute": 898, "unaccounted": 3945},
        "Host": {"self": 58271, "model": 58259, "context": 0, "compute": 12}}  # fmt: skip
    assert parse_breakdown("no table") == {}


def test_host_peak_of_this_process() -> None:
    peak = host_peak(os.getpid())
    assert peak is not None and peak > 10
    assert host_peak(2**22 + 12345) is None


def test_parse_dca_reads_both_log_formats() -> None:
    old = "llama_context: dca                   = on (chunk_size = 3072, local_window = 512, " \
          "chunk_len = 2560)\n"  # fmt: skip
    assert parse_dca(old) == {"chunk_size": 3072, "local_window": 512, "chunk_len": 2560}
    new = ("llama_dca_resolve: dca = on: chunk_size = 24576 [3/4 of the original length "
           "(ChunkLlama)], local_window = 4096 [1/8 of the original length (ChunkLlama)], "
           "chunk_len = 20480, original length = 32768 [GGUF context_length], mscale = off "
           "(auto: original length unknown)\nllama_context: n_ctx = 65536\n")  # fmt: skip
    assert parse_dca(new) == {
        "chunk_size": 24576, "local_window": 4096, "chunk_len": 20480, "original_length": 32768,
        "mscale": "off (auto: original length unknown)",
    }  # fmt: skip
    assert parse_dca("llama_context: dca = off\n") is None
