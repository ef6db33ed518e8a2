#!/usr/bin/env bash
# Device: write the random-weight GGUFs that qwen35_sparse.sh measures, in the background while the
# build runs (after start_build.sh, whose clean room gives the tree's own gguf-py): the 8-layer
# Qwen3.5-9B shape of the shape matrix, the full 32-layer Qwen3.5-9B shape with the real vocabulary
# (device memory; ~11 GB) and the 24-layer Qwen2.5-0.5B shape (sparse prefill). Logs to $W/gen.log;
# qwen35_sparse.sh waits for $W/gen.rc.
set -uo pipefail
source evals/device/common.sh
rm -f "$W/gen.rc"
setsid nohup bash -c "cd '$PWD' && { \
  python3 evals/dca/shape_matrix.py path --work '$W/shapes' --gguf-py '$CR/gguf-py' --cells qwen3.5-9b/f16,qwen2.5-0.5b/f16 && \
  python3 evals/dca/shape_matrix.py path --matrix memory --work '$W/shapes' --gguf-py '$CR/gguf-py' --cells qwen3.5-9b-full/any; \
  } > '$W/gen.log' 2>&1; echo \$? > '$W/gen.rc'" > /dev/null 2>&1 < /dev/null &
sleep 2; echo "model generation started (log $W/gen.log)"
