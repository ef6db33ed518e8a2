#!/usr/bin/env python3
"""The comparisons behind tests/dca/test_dca_rpc.py's equality test, as JSON on stdout: per
configuration (flash attention off/on, f16/q8_0 K/V) the relative error of the prefill and the
decode rows between the local run (2 threads) and the same run with 1 thread (the spread the
tolerance is made from), the run split over two ggml-rpc-server processes on 127.0.0.1 plus the
local CPU, and that split with --dca-local-window one more (the mistake it must catch). The same
``rpc_run`` the test asserts with, on the DCA build the tests use (PATCHCTL_DCA_SRC /
PATCHCTL_DCA_BUILD, built with -DGGML_RPC=ON):

    PATCHCTL_DCA_SRC=TREE PATCHCTL_DCA_BUILD=BUILD python evals/dca/dca_rpc_errors.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.evals.dca import test_dca_rpc as rpc
from tests.evals.dca.model_runs import print_errors
from tests.evals.dca.rpc_servers import RpcServer
from tests.evals.dca.tiny_models import TinyModels


def measure(tool: Path, work: Path) -> dict[str, dict[str, float]]:
    server = tool.parent.parent / "bin" / "ggml-rpc-server"  # tool: <build>/patchctl-native/…
    models = TinyModels(work / "models")
    out: dict[str, dict[str, float]] = {}
    with (
        RpcServer(server, work / "a.log", threads=rpc.SERVER_THREADS) as a,
        RpcServer(server, work / "b.log", threads=rpc.SERVER_THREADS) as b,
    ):
        for config in rpc.CONFIGS:
            r = rpc.rpc_run(config, tool, (a, b), models, work / config)
            tol_prefill, tol_decode = r.tolerances
            out[config] = {
                "spread_prefill": r.spread.prefill,
                "spread_decode": r.spread.decode,
                "rpc_prefill": r.got.prefill,
                "rpc_decode": r.got.decode,
                "rpc_bytes_equal": float(r.remote.raw == r.local.raw),
                "tolerance_prefill": tol_prefill,
                "tolerance_decode": tol_decode,
                "mistake_prefill": r.moved.prefill,
                "mistake_decode": r.moved.decode,
            }
    return out


if __name__ == "__main__":
    sys.exit(print_errors(measure))
