"""The memory lines llama.cpp logs beside what evals/dca/kv_memory.py computes (MiB), for the
tiny models of tests/evals/dca/test_kv_memory.py, run through the dump tool of the DCA build
named by PATCHCTL_DCA_SRC / PATCHCTL_DCA_BUILD. From the repository root:

    PATCHCTL_DCA_SRC=TREE PATCHCTL_DCA_BUILD=BUILD \\
        python results/dca-memory/2026-12-05-qwen35-9b/llama_logs.py > llama-logs.txt
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, ".")
from evals.dca import kv_memory as km  # noqa: E402
from tests.evals.dca import test_kv_memory as t  # noqa: E402
from tests.evals.dca.builds import env_build  # noqa: E402
from tests.evals.dca.model_runs import build_tool, run_tool_proc, single_plan  # noqa: E402
from tests.evals.dca.tiny_models import TinySpec, write_tiny_gguf  # noqa: E402

build = env_build("DCA")
assert build is not None, "set PATCHCTL_DCA_SRC and PATCHCTL_DCA_BUILD"
tool = build_tool(build)
work = Path(tempfile.mkdtemp())


def show(stderr: str) -> None:
    for line in stderr.splitlines():
        if " size = " in line and ("llama_kv_cache" in line or "llama_memory_recurrent" in line):
            print("   logged:", line.split(" I ", 1)[-1].strip())


model = t.write_tiny_qwen35(work / "tiny-qwen35.gguf")
print("tiny qwen35:", t.QWEN35_TINY)
for n_seq in (1, 3):
    for kv in km.KV_TYPES:
        args = ("-c", "4096", "-np", str(n_seq), "-ctk", kv, "-ctv", kv, "-fa", "on", "-lv", "4")
        proc, _ = run_tool_proc(tool, single_plan(4), model, args, work / f"q{n_seq}{kv}")
        kvf = (
            f"{km.kv_bytes(t.QWEN35_TINY, 4096, kv) / 2**20:.4f}"
            if n_seq == 1
            else "(per-sequence streams, not computed)"
        )
        rec = km.recurrent_bytes(t.QWEN35_TINY, n_seq) / 2**20
        print(f"-c 4096 -np {n_seq} {kv}: computed KV {kvf}, recurrent {rec:.4f}")
        show(proc.stderr)
for n_head, n_head_kv, head_dim in ((2, 1, 64), (4, 2, 128)):
    spec = TinySpec(
        "qwen2", n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim, n_embd=n_head * head_dim
    )
    model = write_tiny_gguf(spec, work)
    for n_ctx in (256, 1000, 4096):
        for kv in km.KV_TYPES:
            args = ("-c", str(n_ctx), "-ctk", kv, "-ctv", kv, "-fa", "on", "-lv", "4")
            proc, _ = run_tool_proc(tool, single_plan(4), model, args, work / f"{head_dim}{n_ctx}{kv}")
            want = km.kv_bytes(t.tiny_shape(spec), n_ctx, kv) / 2**20
            print(f"tiny qwen2 heads {n_head_kv}x{head_dim} -c {n_ctx} {kv}: computed KV {want:.4f}")
            show(proc.stderr)
