#!/usr/bin/env bash
# Device: the shape matrix, ONE call after the patched tree is built ($W/build from start_build.sh; the clean room $W/cr):
#   (a) test-backend-ops, CUDA vs CPU: -o FLASH_ATTN_EXT_LSE_MERGE (the DCA merge and the one-launch decode pairs: vector
#       kernel f16 / q8_0 / q4_0, MMA kernel under GQA > 4), -o FLASH_ATTN_EXT_LSE, and FLASH_ATTN_EXT at batch 1
#       (the vector / MMA decode paths whose launch code the pairs share)                            ~1.5 min
#   (b) device memory per process, DCA off vs on, Qwen2.5-0.5B shape (24 layers), -c 131072 and -c 1048576 ~1 min
#   (c) the shape matrix, evals/dca/shape_matrix.py run --matrix gpu, with the time that is left (it skips the cells that
#       no longer fit and keeps what it measured)                                                  ~6.5 min
# The GGUFs are written here by the project's generator (tests/evals/dca/tiny_models.py) with the tree's own gguf-py.
# -> $OUT: shapes-tests.txt, dca-memory.json, dca-memory.txt, dca-shapes.json, dca-shapes.txt (5 files)
# usage: [R=2] [INSTANCES=2] [LIMIT_S=570] [TREE=post_tree id] bash evals/device/dca_shapes.sh
#   R repetitions in each of INSTANCES llama-bench contexts per arm (see evals/dca/shape_matrix.py)
set -uo pipefail
source evals/device/common.sh
t0=$(date +%s)
bin="$(build_dir)bin"
gguf_py="$CR/gguf-py"
shapes="$W/shapes"
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
tree=$(cd "$CR" 2>/dev/null && git rev-parse --short=8 HEAD 2>/dev/null || echo unknown)

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  for args in "-o FLASH_ATTN_EXT_LSE_MERGE" "-o FLASH_ATTN_EXT_LSE" "-o FLASH_ATTN_EXT -p nb=1,"; do
    s=$(date +%s)
    echo "== test-backend-ops test -b CUDA0 $args"
    # shellcheck disable=SC2086
    "$bin/test-backend-ops" test -b CUDA0 $args > "$W/tbo.txt" 2>&1
    echo "   rc=$? $(( $(date +%s) - s )) s"
    grep -E "tests passed|Backend CUDA0|FAIL" "$W/tbo.txt" | grep -v "^ *$" | head -40
  done
} > "$OUT/shapes-tests.txt" 2>&1
tail -12 "$OUT/shapes-tests.txt"

mem_model=$(python3 evals/dca/shape_matrix.py path --work "$shapes" --gguf-py "$gguf_py" --cells qwen2.5-0.5b/f16 | tail -1)
python3 evals/device/gpu_mem.py "$OUT/dca-memory.json" --bin "$bin" --model "$mem_model" --ctx 131072,1048576 \
  > "$OUT/dca-memory.txt" 2>&1; echo "gpu_mem rc=$?"
cat "$OUT/dca-memory.txt"

left=$(( ${LIMIT_S:-570} - ($(date +%s) - t0) ))
echo "== matrix, $left s left"
python3 evals/dca/shape_matrix.py run --matrix gpu --bin "$bin" --work "$shapes" --gguf-py "$gguf_py" --reps "${R:-2}" \
  --instances "${INSTANCES:-2}" --budget-s "$left" --tree "${TREE:-$tree}" --out "$OUT/dca-shapes.json" > "$OUT/dca-shapes.txt" 2>&1
echo "dca_shapes rc=$? (0: every cell >= 0.95 and median >= 1.0; 1: target missed; 2: a run failed)"
tail -60 "$OUT/dca-shapes.txt"
echo "total $(( $(date +%s) - t0 )) s"
