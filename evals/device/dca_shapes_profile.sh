#!/usr/bin/env bash
# Device: CUPTI profile of shape-matrix cells (dca_profile.sh: pp512 and tg16, DCA off and on, at DEPTH), for
# the cells that miss or are closest to the target. About 40 s per cell at depth 32768 (4 llama-bench runs, each with its
# own depth fill, plus the tracer); the GGUFs are those of dca_shapes.sh ($W/shapes), written again if missing.
# usage: bash evals/device/dca_shapes_profile.sh DEPTH CELL...   e.g. 32768 qwen2.5-0.5b/f16 qwen2.5-7b/f16
# -> $OUT/prof-<cell>.txt (the 4 summaries) and $OUT/prof-<cell>.tar.gz (their JSON): 2 files per cell
set -uo pipefail
source evals/device/common.sh
depth=$1; shift
export LD_LIBRARY_PATH="$(build_dir)bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for cell in "$@"; do
  name=$(echo "$cell" | tr '/@' '--')
  model=$(python3 evals/dca/shape_matrix.py path --work "$W/shapes" --gguf-py "$CR/gguf-py" --cells "$cell" | tail -1)
  mkdir -p "$W/prof-$name"
  OUT="$W/prof-$name" bash evals/device/dca_profile.sh "$model" "$name" "$depth" > "$W/prof-$name.log" 2>&1
  echo "dca_profile $cell rc=$?"
  for f in "$W/prof-$name"/*.txt; do echo "=== $(basename "$f")"; cat "$f"; done > "$OUT/prof-$name.txt"
  tar czf "$OUT/prof-$name.tar.gz" -C "$W/prof-$name" .
  grep -E "host_gap|span_us|kernel_us|n_kernels|^\| " "$OUT/prof-$name.txt" | head -40
done
