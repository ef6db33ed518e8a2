"""CI (CPU): what Dual Chunk Attention does on Qwen3.5 (qwen35, qwen35moe) beyond the logits that
test_dca_model.py compares (there: --dca off byte identity, one chunk = plain, multi-chunk vs the
float64 reference in every mode, each deliberate mistake caught, for these archs too).

- Hybrid models (attention every 2nd layer, Gated DeltaNet between): DCA touches the attention
  layers only. The first layer (recurrent, before any attention) gives bit-identical outputs with
  DCA on and off, for a 300-token prompt over 6 chunks in ubatches of 64; the first attention
  layer's output does differ (DCA is active), so the check cannot pass by DCA being off.
- M-RoPE positions: a text token has all four components (t, h, w, e) at its position, and DCA
  moves every one of them. Image embeddings (h and w differ from t) have no DCA definition: a batch
  holding them is refused by llama_decode with an error that says so (as a non-causal batch across
  chunks is); the same batch decodes with --dca off, and text embeddings decode with DCA on.
- The reference's interleaved M-RoPE: with equal components it is the NEOX rope on the rotated
  dims; Qwen3.5's sections give every component pairs; it refuses hybrid models.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from . import reference as ref
from .builds import LlamaBuild
from .model_runs import build_tool, random_tokens
from .tiny_models import HYBRID_VARIANTS, TinyModels, TinySpec, write_tiny_gguf

DCA_ON = ("--dca", "on", "--dca-chunk-size", "64", "--dca-local-window", "8")  # chunk_len 56
BASE = ("-c", "512", "-b", "512", "-ub", "64", "-t", "2")
FA = {"exact": ("-ctk", "f32", "-ctv", "f32", "-fa", "off"), "flash": ("-fa", "on")}


@pytest.fixture(scope="session")
def qwen35_tool(dca_build: LlamaBuild) -> Path:
    """tests/evals/dca/native/dca_qwen35.cpp built against the DCA tree."""
    return build_tool(dca_build, "dca_qwen35.cpp")


def layer_output(
    tool: Path, model: Path, node: str, tokens: tuple[int, ...], args: tuple[str, ...], work: Path
) -> npt.NDArray[np.float32]:
    """Every value the graph node `node` takes while the tokens are decoded (float32)."""
    work.mkdir(parents=True, exist_ok=True)
    toks, out = work / "tokens.txt", work / f"{node}.bin"
    toks.write_text(" ".join(map(str, tokens)) + "\n")
    cmd = [str(tool), "tensor", node, str(toks), str(out), "--", "-m", str(model), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, f"dca_qwen35 failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return np.fromfile(out, dtype=np.float32)


@pytest.mark.parametrize("mode", list(FA))
@pytest.mark.parametrize("variant", HYBRID_VARIANTS)
def test_recurrent_layers_are_untouched_by_dca(
    variant: str, mode: str, qwen35_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    model = models_dir.write(TinySpec(variant))
    assert TinySpec(variant).recurrent_layers()[:2] == [True, False]
    tokens = random_tokens(300, seed=4)
    args = (*BASE, *FA[mode])
    off = (*args, "--dca", "off")
    on = (*args, *DCA_ON)
    rec_off = layer_output(qwen35_tool, model, "l_out-0", tokens, off, tmp_path / "r-off")
    rec_on = layer_output(qwen35_tool, model, "l_out-0", tokens, on, tmp_path / "r-on")
    assert rec_off.size == 300 * TinySpec(variant).n_embd
    assert np.array_equal(rec_on, rec_off), "the recurrent layer's output changed under DCA"
    att_off = layer_output(qwen35_tool, model, "l_out-1", tokens, off, tmp_path / "a-off")
    att_on = layer_output(qwen35_tool, model, "l_out-1", tokens, on, tmp_path / "a-on")
    assert ref.rel_err(att_on, att_off) > 1e-3, "DCA did not change the attention layer"


def run_embd(
    tool: Path, model: Path, kind: str, args: tuple[str, ...]
) -> subprocess.CompletedProcess[str]:
    cmd = [str(tool), "embd", kind, "24", "--", "-m", str(model), *BASE, *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)


@pytest.mark.parametrize("arch", ["qwen35", "qwen35-hybrid"])
def test_image_positions_are_refused_under_dca(
    arch: str, qwen35_tool: Path, models_dir: TinyModels
) -> None:
    model = models_dir.write(TinySpec(arch))
    refused = run_embd(qwen35_tool, model, "image", DCA_ON)
    assert refused.returncode == 3, f"expected llama_decode to refuse:\n{refused.stderr[-3000:]}"
    assert "decode = -1" in refused.stdout
    assert "M-RoPE position components that differ" in refused.stderr
    assert "--dca off" in refused.stderr
    plain = run_embd(qwen35_tool, model, "image", ("--dca", "off"))
    assert plain.returncode == 0, plain.stderr[-3000:]
    text = run_embd(qwen35_tool, model, "text", DCA_ON)
    assert text.returncode == 0, text.stderr[-3000:]


def test_reference_imrope_with_equal_components_is_neox() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 2, 64))
    pos = np.arange(1000, 1040, dtype=np.int64)
    sections = TinySpec("qwen35", head_dim=64, n_rot=32).rope_sections()
    got = ref.rope_multi(x, np.stack([pos] * 4), 1e7, 32, sections)
    assert ref.rel_err(got, ref.rope(x, pos, 1e7, neox=True, n_rot=32)) == 0.0
    moved = ref.rope_multi(x, np.stack([pos, pos + 1, pos, pos]), 1e7, 32, sections)
    assert ref.rel_err(moved, got) > 1e-3


def test_reference_imrope_sections_give_every_component_pairs() -> None:
    sections = TinySpec("qwen35", head_dim=256, n_rot=64).rope_sections()
    assert sections == [11, 11, 10, 0]  # Qwen3.5's mrope_section over its 32 rotated pairs
    comp = ref.imrope_components(32, sections)
    assert [int(np.sum(comp == c)) for c in range(4)] == [11, 11, 10, 0]


def test_reference_refuses_the_hybrid_models(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Gated DeltaNet"):
        ref.load_model(write_tiny_gguf(TinySpec("qwen35-hybrid"), tmp_path))
