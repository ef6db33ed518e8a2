"""CI (CPU): llama.cpp state files and buffers record the Dual Chunk Attention settings.

A DCA cache holds keys roped at ``p mod chunk_len``, so its state only means something to a
context with the same chunk_size / local_window. Every state path that llama-server, llama-cli and
llama-completion use is checked through tests/evals/dca/native/dca_state.cpp:

- whole-context files (``llama_state_save_file``: ``--prompt-cache``), sequence files
  (``llama_state_seq_save_file``: llama-server ``/slots`` save/restore) and sequence buffers
  (``llama_state_seq_get_data``: llama-server's in-memory prompt cache);
- a state restored with the same settings continues exactly as an uninterrupted run (same greedy
  tokens), for a plain cache (qwen2), an iSWA one (gemma3, DCA on its global layers) and a hybrid
  memory (qwen35 with Gated DeltaNet layers, DCA on its attention layers);
- a state saved with DCA settings X is refused by a context with settings Y (other chunk size,
  DCA off, or a DCA-off state into a DCA-on context), with an error naming both;
- with ``--dca off`` the state bytes are those of the unpatched upstream build (the format is
  unchanged), and the upstream build refuses a state saved with DCA on.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from .builds import LlamaBuild
from .model_runs import build_tool
from .tiny_models import TinyModels, TinySpec, tokenizer_for

KINDS = ("full", "seq", "mem")
# a plain cache, an iSWA one (DCA on its global layers) and a hybrid memory (DCA on the attention
# layers' cache, the Gated DeltaNet layers' state saved beside it)
STATE_ARCHS = ("qwen2", "gemma3", "qwen35-hybrid")
N_PROMPT, N_GEN = 700, 12  # chunk_len 256: the prompt spans three chunks, decoding crosses none
BASE = (
    "-c",
    "1024",
    "-b",
    "256",
    "-ub",
    "128",
    "-t",
    "2",
    "-ctk",
    "f32",
    "-ctv",
    "f32",
    "-fa",
    "off",
)
DCA_320 = ("--dca", "on", "--dca-chunk-size", "320", "--dca-local-window", "64")
DCA_256 = ("--dca", "on", "--dca-chunk-size", "256", "--dca-local-window", "32")
DCA_OFF = ("--dca", "off")
EXIT_REFUSED = 3
RESTORE_TOL = 1e-5


@dataclass(frozen=True)
class Run:
    rc: int
    stdout: str
    stderr: str

    @property
    def tokens(self) -> list[int]:
        line = next(ln for ln in self.stdout.splitlines() if ln.startswith("tokens:"))
        return [int(t) for t in line.split()[1:]]

    @property
    def logit_sums(self) -> list[float]:
        line = next(ln for ln in self.stdout.splitlines() if ln.startswith("logit sums:"))
        return [float(v) for v in line.split()[2:]]


@pytest.fixture(scope="session")
def state_tool(dca_build: LlamaBuild) -> Path:
    return build_tool(dca_build, "dca_state.cpp")


@pytest.fixture(scope="session")
def upstream_state_tool(upstream_build: LlamaBuild) -> Path:
    return build_tool(upstream_build, "dca_state.cpp")


@pytest.fixture(scope="session")
def state_models(
    tmp_path_factory: pytest.TempPathFactory, dca_build: LlamaBuild
) -> dict[str, Path]:
    models = TinyModels(tmp_path_factory.mktemp("state-models"), tokenizer_for(dca_build.src))
    return {arch: models.write(TinySpec(arch)) for arch in STATE_ARCHS}


def run_state(tool: Path, mode: str, file: Path, model: Path, args: Sequence[str]) -> Run:
    cmd = [str(tool), mode, str(file), str(N_PROMPT), str(N_GEN), "--", "-m", str(model)]
    cmd += [*BASE, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def ok(run: Run, what: str) -> Run:
    assert run.rc == 0, f"{what} failed ({run.rc}):\n{run.stderr[-3000:]}"
    return run


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("arch", STATE_ARCHS)
def test_restored_dca_state_continues_like_an_uninterrupted_run(
    arch: str, kind: str, state_tool: Path, state_models: dict[str, Path], tmp_path: Path
) -> None:
    model = state_models[arch]
    file = tmp_path / f"state-{kind}.bin"
    want = ok(run_state(state_tool, "run", file, model, DCA_320), "run")
    ok(run_state(state_tool, f"save-{kind}", file, model, DCA_320), "save")
    got = ok(run_state(state_tool, f"load-{kind}", file, model, DCA_320), "load")
    assert got.tokens == want.tokens
    # bit for bit on a plain cache; an iSWA cache puts its restored SWA cells elsewhere, which
    # reorders float sums (~1e-6): a wrongly restored cache is off by orders of magnitude more
    scale = max(abs(v) for v in want.logit_sums)
    worst = max(abs(a - b) for a, b in zip(got.logit_sums, want.logit_sums, strict=True))
    assert worst <= RESTORE_TOL * scale, f"restored logits differ by {worst / scale:.3g} (relative)"


MISMATCHES = {
    # saved with, loaded into, what the error must name
    "other-chunk-size": (
        DCA_320,
        DCA_256,
        ("chunk_size = 320", "local_window = 64", "chunk_size = 256"),
    ),
    "dca-off-context": (DCA_320, DCA_OFF, ("chunk_size = 320", "local_window = 64", "DCA off")),
    "dca-off-state": (DCA_OFF, DCA_320, ("without Dual Chunk Attention", "chunk_size = 320")),
}


@pytest.mark.parametrize("case", list(MISMATCHES))
@pytest.mark.parametrize("kind", KINDS)
def test_state_with_other_dca_settings_is_refused(
    kind: str, case: str, state_tool: Path, state_models: dict[str, Path], tmp_path: Path
) -> None:
    saved_with, loaded_into, named = MISMATCHES[case]
    model = state_models["qwen2"]
    file = tmp_path / f"state-{kind}.bin"
    ok(run_state(state_tool, f"save-{kind}", file, model, saved_with), "save")
    load = run_state(state_tool, f"load-{kind}", file, model, loaded_into)
    assert load.rc == EXIT_REFUSED, (
        f"a state saved with {' '.join(saved_with)} was not refused by a context with "
        f"{' '.join(loaded_into)} (rc {load.rc}):\n{load.stdout}{load.stderr[-2000:]}"
    )
    for text in named:
        assert text in load.stderr, f"the refusal does not say {text!r}:\n{load.stderr[-2000:]}"


@pytest.mark.parametrize("kind", KINDS)
def test_dca_off_state_bytes_equal_upstream(
    kind: str,
    state_tool: Path,
    upstream_state_tool: Path,
    state_models: dict[str, Path],
    tmp_path: Path,
) -> None:
    model = state_models["gemma3"]
    mine, theirs = tmp_path / "dca-off.bin", tmp_path / "upstream.bin"
    ok(run_state(state_tool, f"save-{kind}", mine, model, DCA_OFF), "save (--dca off)")
    ok(run_state(upstream_state_tool, f"save-{kind}", theirs, model, ()), "save (upstream)")
    assert mine.read_bytes() == theirs.read_bytes()


@pytest.mark.parametrize("kind", KINDS)
def test_upstream_refuses_a_dca_state(
    kind: str,
    state_tool: Path,
    upstream_state_tool: Path,
    state_models: dict[str, Path],
    tmp_path: Path,
) -> None:
    model = state_models["qwen2"]
    file = tmp_path / "dca.bin"
    ok(run_state(state_tool, f"save-{kind}", file, model, DCA_320), "save")
    load = run_state(upstream_state_tool, f"load-{kind}", file, model, ())
    assert load.rc == EXIT_REFUSED, (
        f"upstream loaded a DCA state (rc {load.rc}):\n{load.stderr[-2000:]}"
    )
