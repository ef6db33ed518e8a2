"""DCA over llama.cpp's RPC backend, on the CPU and loopback only (127.0.0.1).

The test trees are built with ``GGML_RPC=ON`` (tests/evals/dca/trees.py), so a ggml op added without
updating ggml-rpc (its op-count assert, its protocol version) fails every test run's build.

- A tiny model split by layer over two ggml-rpc-server processes plus the local CPU, ``--dca on``,
  gives the local run's logits and greedy tokens, in prefill and decode rows alike, with flash
  attention off and on and with f16 and q8_0 K/V. The tolerance comes from the same build's own
  spread: the local run with 1 thread against the local run with 2 threads (the servers run 1
  thread each, the local CPU 2), times SPREAD_FACTOR; where that spread is zero (the CPU kernels
  give each output the same arithmetic whatever the thread count) the RPC run must be
  byte-identical. The same split with ``--dca-local-window`` one more must be outside it (a DCA
  mistake the comparison would catch). With flash attention on, the DCA nodes
  (FLASH_ATTN_EXT_LSE and its merge) of the servers' layers run on the servers: llama.cpp warns
  when they fall back to the CPU, and that warning must be absent.
- The protocol version: the patched tree speaks major 100 + upstream's (ggml-rpc.h says why), and
  it and the unpatched upstream refuse each other at the handshake: the patched llama.cpp client
  against an upstream ggml-rpc-server, and the upstream RPC client
  (tests/evals/dca/native/rpc_hello.c, linked against the upstream's libggml-rpc, where the
  handshake lives) against a patched server;
  both servers keep running. Each pair of one build connects (the control).
- A server killed (SIGKILL) while the client decodes ends the client with an error, not a hang:
  the client must exit non-zero within KILL_TIMEOUT_S, with ggml-rpc's message (not SIGPIPE).
- ``-sm tensor`` with ``--dca on`` over the RPC devices is refused, naming ``--split-mode layer``.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from .builds import LlamaBuild, compile_native
from .model_runs import Dump, Plan, rel_err_all, run_tool, run_tool_proc, single_plan
from .rpc_servers import RpcServer, rpc_args
from .test_dca_model import DCA_ON, MULTI_ARGS, multichunk_plan
from .tiny_models import TinyModels, TinySpec

# qwen2 (the Qwen2.5-1M architecture) with 5 layers: -ngl 4 -ts 1,1 keeps layers 0-1 on the local
# CPU and puts layer 2 on the first server, layers 3-4 and the output layer on the second; each of
# the three holds attention layers and their KV cache
SPEC = TinySpec("qwen2", layers=5)
N_GPU_LAYERS = 4
SERVER_THREADS = 1
LOCAL_THREADS = 2  # run_tool's -t
SPREAD_FACTOR = 4.0
MISTAKE_MARGIN = 10.0
CONFIGS: dict[str, tuple[str, ...]] = {
    "f16-fa-off": ("-fa", "off"),
    "f16-fa-on": ("-fa", "on"),
    # llama.cpp refuses a quantized V cache without flash attention: K only there
    "q8_0-fa-off": ("-fa", "off", "-ctk", "q8_0"),
    "q8_0-fa-on": ("-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"),
}
FALLBACK_WARNING = "DCA attention nodes per ubatch"
KILL_TIMEOUT_S = 60.0
LOG_INFO = ("-lv", "4")  # llama.cpp's INFO lines: the buffers per device, the context's DCA line
VERSION_LINE = re.compile(r"#define RPC_PROTO_MAJOR_VERSION\s+(\d+)")
OP_COUNT_ASSERT = re.compile(r"static_assert\(GGML_OP_COUNT == (\d+)")


def server_binary(build: LlamaBuild) -> Path:
    exe = build.bin / "ggml-rpc-server"
    if not exe.is_file():
        pytest.fail(
            f"no ggml-rpc-server in {build.bin}: build the tree with -DGGML_RPC=ON and the "
            "ggml-rpc-server target (tests/evals/dca/trees.py does when the tests build it)",
            pytrace=False,
        )
    return exe


@pytest.fixture
def dca_servers(dca_build: LlamaBuild, tmp_path: Path) -> Iterator[tuple[RpcServer, RpcServer]]:
    exe = server_binary(dca_build)
    with (
        RpcServer(exe, tmp_path / "rpc-a.log", threads=SERVER_THREADS) as a,
        RpcServer(exe, tmp_path / "rpc-b.log", threads=SERVER_THREADS) as b,
    ):
        yield a, b


# ---------------------------------------------------------------------------------------------
# logits: two servers + the local CPU equal the local run


def _rows(plan: Plan, dump: Dump) -> tuple[np.ndarray, np.ndarray]:
    """Masks over the dump's rows (all sequences concatenated): prefill rows (fed by a call of
    more than one token) and decode rows (single-token calls and greedy generation)."""
    n_seq = len(dump.tokens)
    fed = [0] * n_seq
    single: list[list[bool]] = [[] for _ in range(n_seq)]
    for step in plan.steps:
        words = step.split()
        if words[0] == "call":
            for part in words[1:]:
                seq, n = (int(x) for x in part.split(":"))
                single[seq] += [n == 1] * n
                fed[seq] += n
        elif words[0] == "gen":
            single[int(words[1])] += [True] * int(words[2])
    decode = np.concatenate(
        [np.array(s[: len(t)], dtype=bool) for s, t in zip(single, dump.tokens, strict=True)]
    )
    return ~decode, decode


@dataclass(frozen=True)
class Compared:
    prefill: float
    decode: float
    tokens_equal: bool


def compare(got: Dump, want: Dump, plan: Plan) -> Compared:
    g, w = np.concatenate(got.logits()), np.concatenate(want.logits())
    prefill, decode = _rows(plan, want)
    assert prefill.any() and decode.any(), "the plan must have prefill and decode rows"
    return Compared(
        prefill=rel_err_all([g[prefill]], [w[prefill]]),
        decode=rel_err_all([g[decode]], [w[decode]]),
        tokens_equal=got.tokens == want.tokens,
    )


@dataclass(frozen=True)
class RpcRun:
    """One configuration: the local run (2 threads), the same with 1 thread, the split run and
    the split run with --dca-local-window one more, compared with the local run."""

    local: Dump
    remote: Dump
    spread: Compared  # 1 thread vs 2 threads, both local
    got: Compared  # the split vs local
    moved: Compared  # the split with the local window one more vs local

    @property
    def tolerances(self) -> tuple[float, float]:
        """(prefill, decode): SPREAD_FACTOR x the thread spread."""
        return SPREAD_FACTOR * self.spread.prefill, SPREAD_FACTOR * self.spread.decode


def rpc_run(
    config: str, tool: Path, servers: Sequence[RpcServer], models: TinyModels, work: Path
) -> RpcRun:
    model = models.write(SPEC)
    plan = multichunk_plan()
    args = (*MULTI_ARGS, *CONFIGS[config], *DCA_ON)
    local = run_tool(tool, plan, model, args, work / "local")
    local_t1 = run_tool(tool, plan, model, (*args, "-t", "1"), work / "local-t1")
    split = rpc_args(servers, N_GPU_LAYERS)
    remote = run_tool(tool, plan, model, (*args, *split, *LOG_INFO), work / "rpc")
    wrong = ("--dca-local-window", "9")  # DCA_ON's is 8
    moved = run_tool(tool, plan, model, (*args, *split, *wrong), work / "rpc-moved")
    return RpcRun(
        local=local,
        remote=remote,
        spread=compare(local_t1, local, plan),
        got=compare(remote, local, plan),
        moved=compare(moved, local, plan),
    )


@pytest.mark.parametrize("config", list(CONFIGS))
def test_dca_split_over_two_rpc_servers_equals_local(
    config: str,
    dca_tool: Path,
    dca_servers: tuple[RpcServer, RpcServer],
    models_dir: TinyModels,
    tmp_path: Path,
) -> None:
    r = rpc_run(config, dca_tool, dca_servers, models_dir, tmp_path)

    # the split is what the test says: both servers and the CPU hold attention layers (KV)
    for server in dca_servers:
        assert f"{server.endpoint}] KV buffer size" in r.remote.log, (
            f"no attention layer on {server.endpoint}:\n{r.remote.log[-3000:]}"
        )
    assert " CPU KV buffer size" in r.remote.log, r.remote.log[-3000:]
    if "fa-on" in config:
        assert FALLBACK_WARNING not in r.remote.log, "DCA nodes of server layers ran on the CPU"

    assert r.spread.tokens_equal, "1 and 2 threads give different greedy tokens"
    tol_prefill, tol_decode = r.tolerances
    assert r.got.tokens_equal, "greedy tokens over RPC differ from the local run"
    assert r.got.prefill <= tol_prefill, (
        f"{config}: prefill rows over RPC {r.got.prefill:.3g} from local > {tol_prefill:.3g} "
        f"({SPREAD_FACTOR} x the 1-vs-2-thread spread {r.spread.prefill:.3g})"
    )
    assert r.got.decode <= tol_decode, (
        f"{config}: decode rows over RPC {r.got.decode:.3g} from local > {tol_decode:.3g} "
        f"({SPREAD_FACTOR} x the 1-vs-2-thread spread {r.spread.decode:.3g})"
    )
    if tol_prefill == 0.0 and tol_decode == 0.0:
        assert r.remote.raw == r.local.raw, "logit bytes differ although both spreads are zero"

    # the power of this comparison: the same split with a local window one more is outside it
    for what, err, tol in (
        ("prefill", r.moved.prefill, tol_prefill),
        ("decode", r.moved.decode, tol_decode),
    ):
        assert err > 0.0 and err >= MISTAKE_MARGIN * tol, (
            f"{config}: local window + 1 over RPC only {err:.3g} from local ({what}; tol {tol:.3g})"
        )


# ---------------------------------------------------------------------------------------------
# protocol version: patched and unpatched refuse each other


def _header(build: LlamaBuild, pattern: re.Pattern[str]) -> int:
    text = (build.src / "ggml" / "include" / "ggml-rpc.h").read_text()
    found = pattern.search(text)
    assert found is not None, f"{pattern.pattern} not in {build.src}/ggml/include/ggml-rpc.h"
    return int(found[1])


def _op_count(build: LlamaBuild) -> int:
    """The number of ggml_op enumerators before GGML_OP_COUNT in ggml.h."""
    text = (build.src / "ggml" / "include" / "ggml.h").read_text()
    body = text[text.index("enum ggml_op {") : text.index("GGML_OP_COUNT,")]
    return len(re.findall(r"^\s*GGML_OP_\w+", body, flags=re.MULTILINE))


def test_patched_rpc_major_is_100_plus_upstreams(
    dca_build: LlamaBuild, upstream_rpc_build: LlamaBuild
) -> None:
    """The series adds ops, so its protocol major differs from upstream's (what both HELLO checks
    compare), by the rule ggml-rpc.h states (100 + upstream's major: upstream's next major must
    not pass for it either; a rebase onto a new upstream major fails here until it is applied),
    and its op-count assert names the tree's real op count."""
    assert _header(dca_build, VERSION_LINE) == 100 + _header(upstream_rpc_build, VERSION_LINE)
    assert _op_count(dca_build) == _header(dca_build, OP_COUNT_ASSERT)
    assert _op_count(dca_build) > _op_count(upstream_rpc_build)


def _tiny_run(
    tool: Path, model: Path, server: RpcServer, work: Path
) -> subprocess.CompletedProcess[str]:
    plan = single_plan(8)
    work.mkdir(parents=True, exist_ok=True)
    plan_file = work / "plan.txt"
    plan_file.write_text(plan.render())
    cmd = [
        str(tool), str(plan_file), str(work / "logits.bin"), "--",
        "-m", str(model), "-t", "2", "-c", "64", *rpc_args([server], N_GPU_LAYERS),
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)


def test_patched_client_refuses_upstream_server(
    dca_tool: Path, upstream_rpc_build: LlamaBuild, models_dir: TinyModels, tmp_path: Path
) -> None:
    model = models_dir.write(SPEC)
    with RpcServer(server_binary(upstream_rpc_build), tmp_path / "up.log") as up:
        proc = _tiny_run(dca_tool, model, up, tmp_path / "run")
        assert up.alive(), "the upstream server died"
        major, minor, patch = up.version()
    assert proc.returncode != 0, "the patched client ran its graph on an upstream server"
    assert (
        f"RPC server version mismatch: {major}.{minor}.{patch} (this client speaks" in proc.stderr
    ), proc.stderr[-3000:]
    assert "RPC handshake failed" in proc.stderr


def test_upstream_client_refuses_patched_server(
    dca_build: LlamaBuild, upstream_rpc_build: LlamaBuild, tmp_path: Path
) -> None:
    hello = compile_native("rpc_hello.c", upstream_rpc_build, link_flags=("-lggml-rpc",))
    with RpcServer(server_binary(dca_build), tmp_path / "dca.log") as patched:
        proc = subprocess.run(
            [str(hello), patched.endpoint], capture_output=True, text=True, check=False, timeout=60
        )
        assert patched.alive(), "the patched server died"
        major, minor, patch = patched.version()
    assert proc.returncode != 0, f"the upstream client accepted a patched server: {proc.stdout}"
    assert f"RPC server version mismatch: {major}.{minor}.{patch}" in proc.stderr, proc.stderr[
        -3000:
    ]


@pytest.mark.parametrize("side", ["upstream", "patched"])
def test_rpc_client_and_server_of_one_build_connect(
    side: str, dca_build: LlamaBuild, upstream_rpc_build: LlamaBuild, tmp_path: Path
) -> None:
    """The control of the two refusals: the same client against its own build's server."""
    build = upstream_rpc_build if side == "upstream" else dca_build
    hello = compile_native("rpc_hello.c", build, link_flags=("-lggml-rpc",))
    with RpcServer(server_binary(build), tmp_path / "server.log") as server:
        proc = subprocess.run(
            [str(hello), server.endpoint], capture_output=True, text=True, check=False, timeout=60
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("connected free="), proc.stdout


# ---------------------------------------------------------------------------------------------
# a server killed mid-decode


def test_killed_server_mid_decode_is_an_error_not_a_hang(
    dca_tool: Path,
    dca_servers: tuple[RpcServer, RpcServer],
    models_dir: TinyModels,
    tmp_path: Path,
) -> None:
    model = models_dir.write(SPEC)
    plan = single_plan(32, n_gen=20000)  # far more decode steps than the seconds before the kill
    plan_file, log = tmp_path / "plan.txt", tmp_path / "client.log"
    plan_file.write_text(plan.render())
    cmd = [
        str(dca_tool), str(plan_file), str(tmp_path / "logits.bin"), "--",
        "-m", str(model), "-t", "2", "-c", "20480", "-fa", "on", *DCA_ON,
        *rpc_args(dca_servers, N_GPU_LAYERS), *LOG_INFO,
    ]  # fmt: skip
    with log.open("wb") as err:
        client = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 120
        # the context exists (DCA reports its settings there); then give decode a moment
        while not re.search(r"\bdca\s+= on", log.read_text(errors="replace")):
            assert client.poll() is None, f"client ended early:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "client never built its context"
            time.sleep(0.1)
        time.sleep(2.0)
        assert client.poll() is None, "the client finished before the kill: lengthen the plan"
        dca_servers[1].kill()
        try:
            rc = client.wait(timeout=KILL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the client hangs {KILL_TIMEOUT_S:.0f} s after its RPC server was killed")
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(timeout=20)
    text = log.read_text(errors="replace")
    assert rc != 0, f"the client exited 0 after its server was killed:\n{text[-3000:]}"
    assert rc != -signal.SIGPIPE, "the client died of SIGPIPE, with no message"
    assert "Remote RPC server crashed" in text, text[-3000:]


# ---------------------------------------------------------------------------------------------
# --split-mode tensor: refused with DCA, over RPC devices as on GPUs


def test_split_mode_tensor_over_rpc_is_refused_naming_the_fix(
    dca_tool: Path,
    dca_servers: tuple[RpcServer, RpcServer],
    models_dir: TinyModels,
    tmp_path: Path,
) -> None:
    """RPC devices are not CPU devices, so a CPU-only machine reaches the context's check (on a
    CPU alone the model load refuses tensor split first): --dca on with -sm tensor ends with the
    message naming --split-mode layer (or --dca off) before any graph runs."""
    model = models_dir.write(SPEC)
    servers = ",".join(s.endpoint for s in dca_servers)
    args = ("-c", "512", "-fa", "on", *DCA_ON, "--rpc", servers, "-ngl", "99", "-sm", "tensor")
    proc, out = run_tool_proc(dca_tool, single_plan(8), model, args, tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "--dca on is not supported with --split-mode tensor" in proc.stderr, proc.stderr[-3000:]
    assert "--split-mode layer" in proc.stderr
    assert not out.exists()
    assert all(s.alive() for s in dca_servers)
