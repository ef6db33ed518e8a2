"""`Llama(model, dca=True, ...)` from the wheel built from the exported sdist computes
what llama.cpp itself computes on the same tree, and what the float64 reference says.

For each model: the multi-chunk prompt (300 tokens, chunk 64 / window 8: 6 chunks, ubatches of
40 crossing chunk boundaries) through `Llama.eval` with `logits_all`, DCA on and off, exact mode
(f32 KV, flash attention off), against
- the native dump tool (tests/evals/dca/native/dca_logits.cpp) built on the llamafile series'
  tree, which is the exported sdist's vendor/llama.cpp (checked): the same computation, so
  equal up to float noise of two builds of the same source;
- the float64 numpy reference (tests/evals/dca/reference.py) with and without DCA;
and greedy generation from a text prompt spanning several chunks gives the bytes llama-completion
(the upstream tool, built on that tree) prints for the same prompt and flags.
DCA on must also differ from DCA off by far more than the tolerance: the flag reached the C
struct. `dca_mscale` (None = auto, True, False) reaches it too: on a model whose GGUF names an
original training length shorter than the prompt, auto and True scale the logits as the
reference does and False does not. Bad values are refused by Python (ValueError) or by the C side
(context creation fails). Two other model shapes (head size 112 / GQA 7; Gemma 4's 512 / 256
heads) give the native tool's logits through `Llama.eval` too.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from patchctl.gitlayer.git import Git
from patchctl.series.model import load_series
from patchctl.series.stack import load_stack

from . import reference as ref
from . import wheel as wheel_build
from .builds import LlamaBuild, series_dir
from .model_runs import Plan, build_tool, model_path, random_tokens, reference_logits, run_tool
from .test_dca_config import LOG_INFO, MSCALE_DCA, MSCALE_ORIG, tiny
from .test_dca_model import DCA, DCA_ON, EXACT, SPEC_EXACT_TOL
from .test_dca_model_shapes import CHUNK, SHAPES, dca_flags
from .tiny_models import TinyModels
from .wheel import Wheel, python_series

ARCHS = ("qwen2", "gemma3")  # every layer DCA; DCA on the global layers of an iSWA model
N_TOKENS = 300
CONTEXT = {"n_ctx": 512, "n_batch": 512, "n_ubatch": 40, "n_threads": 2, "n_threads_batch": 2}
NATIVE_ARGS = ("-c", "512", "-b", "512", "-ub", "40", *EXACT)
PYTHON_EXACT = {"type_k": 0, "type_v": 0, "flash_attn": False}  # GGML_TYPE_F32 KV, FA off
SAME_SOURCE_TOL = 1e-5  # two builds of one source: float noise only
DCA_KWARGS = {"dca": True, "dca_chunk_size": DCA.chunk_size, "dca_local_window": DCA.local_window}

LLAMA_LOGITS = r"""
import json, sys
import numpy as np
from llama_cpp import Llama
cfg = json.loads(sys.argv[1])
llm = Llama(model_path=cfg["model"], logits_all=True, verbose=False, **cfg["kwargs"])
llm.eval(cfg["tokens"])
np.save(cfg["out"], np.asarray(llm.scores[: len(cfg["tokens"])], dtype=np.float32))
"""


def run_python(site: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """The test venv's Python with the installed wheel first on its path."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=timeout,
    )


def llama_logits(
    site: Path, model: Path, tokens: tuple[int, ...], kwargs: dict[str, object], out: Path
) -> npt.NDArray[np.float32]:
    config = {"model": str(model), "tokens": list(tokens), "kwargs": kwargs, "out": str(out)}
    proc = run_python(site, "-c", LLAMA_LOGITS, json.dumps(config))
    assert proc.returncode == 0, proc.stderr[-4000:]
    logits: npt.NDArray[np.float32] = np.load(out)
    return logits


@pytest.fixture(scope="session")
def same_tree(dca_build: LlamaBuild) -> LlamaBuild:
    """The native build, checked to be of the exported sdist's vendor/llama.cpp tree."""
    python = load_stack(load_series(python_series()))
    inherited = python.inherited()
    assert (
        inherited
        and python.base is not None
        and python.base.dir.resolve() == series_dir().resolve()
    )
    want = inherited[-1].patch.post_tree
    if os.environ.get("PATCHCTL_DCA_SRC") is None:
        assert Git(dca_build.src).tree_of("HEAD") == want, "the native build is of another tree"
    return dca_build


@pytest.fixture(scope="session")
def native_tool(same_tree: LlamaBuild) -> Path:
    return build_tool(same_tree)


@pytest.mark.parametrize("arch", ARCHS)
def test_llama_dca_matches_llama_cpp_and_the_reference(
    arch: str, python_site: Path, native_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    model = model_path(models_dir, arch)
    tokens = random_tokens(N_TOKENS, seed=1)
    plan = Plan(seqs=(tokens,), steps=(f"call 0:{N_TOKENS}",))
    on = llama_logits(
        python_site, model, tokens, {**CONTEXT, **PYTHON_EXACT, **DCA_KWARGS}, tmp_path / "on.npy"
    )
    off = llama_logits(
        python_site, model, tokens, {**CONTEXT, **PYTHON_EXACT}, tmp_path / "off.npy"
    )
    native_on = run_tool(
        native_tool, plan, model, (*NATIVE_ARGS, *DCA_ON), tmp_path / "n-on"
    ).logits()[0]
    native_off = run_tool(
        native_tool, plan, model, (*NATIVE_ARGS, "--dca", "off"), tmp_path / "n-off"
    ).logits()[0]
    assert ref.rel_err(on, native_on) <= SAME_SOURCE_TOL
    assert ref.rel_err(off, native_off) <= SAME_SOURCE_TOL
    (want_on,) = reference_logits(model, (tokens,), ref.RunConfig(dca=DCA, kv_type="f32"))
    (want_off,) = reference_logits(model, (tokens,), ref.RunConfig(kv_type="f32"))
    plain_err = ref.rel_err(off, want_off)
    tolerance = exact_tolerance(plain_err)
    assert plain_err <= 1e-4
    assert ref.rel_err(on, want_on) <= tolerance
    assert ref.rel_err(on, off) >= 100 * tolerance, "dca=True did not change the computation"


SHAPE_CASES = ("qwen3-d112-gqa7", "gemma4-d512-swa256")  # test_dca_model_shapes.SHAPES
SHAPE_TOKENS = 200  # chunk_len 40: five chunks, in ubatches of 13 that cross the boundaries


@pytest.mark.parametrize("shape", SHAPE_CASES)
def test_llama_dca_on_other_shapes_matches_llama_cpp(
    shape: str, python_site: Path, native_tool: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """A shape test_dca_model_shapes.py checks against the float64 reference (head size 112 /
    GQA 7; Gemma 4's 512 / 256 heads, proportional rope, V = K) through `Llama.eval`: the native
    dump tool's logits up to float noise of two builds, and >= 100x further from the native run
    with the local window one larger (the sizes reached the C struct and the positions)."""
    model = models_dir.write(SHAPES[shape])
    tokens = random_tokens(SHAPE_TOKENS, seed=11)
    dca = {"dca": True, "dca_chunk_size": CHUNK.chunk_size, "dca_local_window": CHUNK.local_window}
    kwargs: dict[str, object] = {**CONTEXT, "n_ubatch": 13, **PYTHON_EXACT, **dca}
    python = llama_logits(python_site, model, tokens, kwargs, tmp_path / "py.npy")
    plan = Plan(seqs=(tokens,), steps=(f"call 0:{SHAPE_TOKENS}",))
    args = ("-c", "512", "-b", "512", "-ub", "13", *EXACT)
    flags = dca_flags(CHUNK)
    native = run_tool(native_tool, plan, model, (*args, *flags), tmp_path / "n").logits()[0]
    moved_flags = (*flags[:-1], str(CHUNK.local_window + 1))
    moved = run_tool(native_tool, plan, model, (*args, *moved_flags), tmp_path / "m").logits()[0]
    assert ref.rel_err(python, native) <= SAME_SOURCE_TOL
    assert ref.rel_err(python, moved) >= 100 * SAME_SOURCE_TOL


GREEDY = r"""
import json, sys
from llama_cpp import Llama, llama_cpp
cfg = json.loads(sys.argv[1])
llm = Llama(model_path=cfg["model"], verbose=False, **cfg["kwargs"])
prompt = llm.tokenize(cfg["prompt"].encode(), add_bos=True)
out = []
for token in llm.generate(prompt, temp=0.0):
    if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token) or len(out) == cfg["n"]:
        break
    out.append(token)
print(len(prompt), llm.detokenize(out, prev_tokens=prompt).hex())
"""
GREEDY_PROMPT = " ".join(f"word{i}" for i in range(120))  # ~170 tokens: 3+ chunks of 56
N_PREDICT = 24
END_OF_TEXT = b" [end of text]"


def test_llama_greedy_generation_matches_llama_completion(
    python_site: Path, same_tree: LlamaBuild, models_dir: TinyModels, tmp_path: Path
) -> None:
    """`Llama(model, dca=True)` and `llama-completion --dca on` with the same sizes, context,
    batch sizes and exact path, greedy: the same generated bytes."""
    model = model_path(models_dir, "qwen2")
    config = {
        "model": str(model),
        "prompt": GREEDY_PROMPT,
        "n": N_PREDICT,
        "kwargs": {**CONTEXT, **PYTHON_EXACT, **DCA_KWARGS},
    }
    proc = run_python(python_site, "-c", GREEDY, json.dumps(config))
    assert proc.returncode == 0, proc.stderr[-4000:]
    n_prompt, hex_text = proc.stdout.split()
    assert int(n_prompt) > 2 * DCA.chunk_len, "the prompt does not span several chunks"
    python_text = bytes.fromhex(hex_text)
    assert python_text, "Llama generated nothing"
    cmd = [
        str(same_tree.bin / "llama-completion"), "-m", str(model), "-p", GREEDY_PROMPT,
        "-n", str(N_PREDICT), "--temp", "0", "-no-cnv", "--no-display-prompt", "-t", "2",
        *LOG_INFO,  # llama.cpp's INFO lines: the DCA values the context resolved
        *NATIVE_ARGS, *DCA_ON,
    ]  # fmt: skip
    native = subprocess.run(
        cmd, capture_output=True, check=False, timeout=300, stdin=subprocess.DEVNULL
    )
    log = native.stderr.decode(errors="replace")
    assert native.returncode == 0, log[-4000:]
    assert "dca = on: chunk_size = " in log, "llama-completion ran without DCA"
    printed = native.stdout.rstrip(b"\n")
    assert printed.removesuffix(END_OF_TEXT) == python_text, (printed, python_text)


def exact_tolerance(plain_err: float) -> float:
    """test_dca_model's exact-mode bound: 3x the same build's plain-attention error, floored."""
    return min(max(3.0 * plain_err, 1e-5), SPEC_EXACT_TOL)


def test_llama_dca_mscale_reaches_llama_cpp(
    python_site: Path, models_dir: TinyModels, tmp_path: Path
) -> None:
    """The GGUF names the original length 128 (auto = on); the 300-token prompt runs past it."""
    model = tiny(models_dir, "qwen2", dca_orig=MSCALE_ORIG)
    tokens = random_tokens(N_TOKENS, seed=1)
    base: dict[str, object] = {**CONTEXT, **PYTHON_EXACT}
    plain = llama_logits(python_site, model, tokens, base, tmp_path / "plain.npy")
    scaled = {
        mscale: llama_logits(
            python_site,
            model,
            tokens,
            {**base, **DCA_KWARGS, "dca_mscale": mscale},
            tmp_path / f"{mscale}.npy",
        )
        for mscale in (None, True, False)
    }
    (want_plain,) = reference_logits(model, (tokens,), ref.RunConfig(kv_type="f32"))
    tolerance = exact_tolerance(ref.rel_err(plain, want_plain))
    (want_on,) = reference_logits(model, (tokens,), ref.RunConfig(dca=MSCALE_DCA, kv_type="f32"))
    no_mscale = ref.DcaConfig(MSCALE_DCA.chunk_size, MSCALE_DCA.local_window)
    (want_off,) = reference_logits(model, (tokens,), ref.RunConfig(dca=no_mscale, kv_type="f32"))
    assert np.array_equal(scaled[None], scaled[True]), "auto is on for this GGUF"
    assert ref.rel_err(scaled[True], want_on) <= tolerance
    assert ref.rel_err(scaled[False], want_off) <= tolerance
    assert ref.rel_err(scaled[True], scaled[False]) >= 100 * tolerance, "dca_mscale was dropped"


BAD = (
    ({"dca": True, "dca_chunk_size": 0}, "ValueError: dca_chunk_size must be a positive integer"),
    (
        {"dca": True, "dca_local_window": -8},
        "ValueError: dca_local_window must be a positive integer",
    ),
    ({"dca": True, "dca_mscale": 1}, "ValueError: dca_mscale must be True, False or None"),
    # valid for Python, refused by llama.cpp: the window must be below chunk_len
    (
        {"dca": True, "dca_chunk_size": 64, "dca_local_window": 40},
        "ValueError: Failed to create llama_context: failed to initialize the context: "
        "dca_local_window (40) must be smaller than chunk_len",
    ),
)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    BAD,
    ids=["chunk-0", "window-negative", "mscale-int", "window-too-wide"],
)
def test_bad_dca_values_are_refused(
    kwargs: dict[str, object],
    message: str,
    python_site: Path,
    models_dir: TinyModels,
    tmp_path: Path,
) -> None:
    model = model_path(models_dir, "qwen2")
    config = {
        "model": str(model),
        "tokens": [1, 2, 3],
        "kwargs": {**CONTEXT, **kwargs},
        "out": str(tmp_path / "x.npy"),
    }
    script = LLAMA_LOGITS.replace("verbose=False", "verbose=True")
    proc = run_python(python_site, "-c", script, json.dumps(config))
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-3000:]


def test_the_installed_package_is_the_marked_patched_version(
    python_site: Path, python_wheel: Wheel
) -> None:
    proc = run_python(python_site, "-c", "import llama_cpp, sys; print(llama_cpp.__version__)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == python_wheel.version
    assert python_wheel.version.startswith("0.3.36+patchctl.")
    assert python_wheel.path.name.startswith(f"llama_cpp_python-{python_wheel.version}-")


def _sdist(path: Path, files: dict[str, bytes]) -> Path:
    """A tarball whose members all carry one fixed mtime, as an exported sdist's do."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"pkg-1.0/{name}")
            info.size, info.mtime = len(data), 1_000_000
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_changed_file_is_stamped_newer_than_the_last_build(tmp_path: Path) -> None:
    """The wheel build dir is reused; ninja and cmake compare mtimes, so a file the new sdist
    changed must look newer than anything built from the old one, and an unchanged file not."""
    files = {"a.cpp": b"int a;\n", "CMakeLists.txt": b"project(x)\n", "b.cpp": b"int b;\n"}
    started = time.time()
    top = wheel_build._extract(_sdist(tmp_path / "1.tar.gz", files), tmp_path / "src")
    first = {p.name: p.stat().st_mtime for p in top.iterdir()}
    assert all(stamp >= started for stamp in first.values())  # no earlier build to compare with
    time.sleep(0.05)
    built = time.time()  # the objects of the first build are this new
    changed = {**files, "CMakeLists.txt": b"project(x)\nadd_library(y)\n", "c.cpp": b"int c;\n"}
    top = wheel_build._extract(_sdist(tmp_path / "2.tar.gz", changed), tmp_path / "src")
    stamps = {p.name: p.stat().st_mtime for p in top.iterdir()}
    assert (stamps["a.cpp"], stamps["b.cpp"]) == (first["a.cpp"], first["b.cpp"]) < (built, built)
    assert stamps["CMakeLists.txt"] >= built and stamps["c.cpp"] >= built
    assert (top / "CMakeLists.txt").read_bytes() == changed["CMakeLists.txt"]
    assert sorted(p.name for p in (tmp_path).iterdir()) == ["1.tar.gz", "2.tar.gz", "src"]
