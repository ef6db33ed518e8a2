#!/usr/bin/env bash
# Device: DCA on vs off throughput (llama-bench pp512 / tg64 at depth 32k and 128k, FA on, all layers
# on the GPU) and device memory (the buffer sizes llama.cpp logs), same build, same run.
# usage: [R=2] [ORDER=0,1,1,0] dca_bench.sh MODEL NAME   (raw output -> $OUT/bench-NAME.json, $OUT/mem-NAME.txt)
#   ORDER: llama-bench's -dca list. Each entry is one context (a new llama_context) of R repetitions; the default runs
#     each arm in two contexts in balanced order, 4 repetitions per arm in all. Decode rates differ by a few per cent
#     between two contexts of one process (the preload run, results/dca-cuda/2026-12-01-preload/README.md), which the
#     repetitions inside one context do not sample; throughput_summary.py pools an arm's contexts.
set -uo pipefail
source evals/device/common.sh
model=$1; name=$2; bin="$(build_dir)bin"
"$bin/llama-bench" -m "$model" -ngl 99 -fa 1 -p 512 -n 64 -d 32768,131072 -dca "${ORDER:-0,1,1,0}" -r "${R:-2}" -o json \
  > "$OUT/bench-$name.json" 2> "$OUT/bench-$name.err"; echo "llama-bench rc=$?"
# DCA / plain per cell (the summary JSON stays in $W: $OUT keeps at most 8 files per call)
python3 evals/device/throughput_summary.py "$W/summary-$name.json" "$name=$OUT/bench-$name.json"
for dca in off on; do  # -v: the buffer sizes are info-level log lines
  echo "== mem dca=$dca: llama-completion -m MODEL -ngl 99 -fa on -c 131072 -n 4 -no-cnv -p Hello --dca $dca -v"
  "$bin/llama-completion" -m "$model" -ngl 99 -fa on -c 131072 -n 4 -no-cnv -p "Hello" --dca $dca -v \
    > "$W/mem-$name-$dca.log" 2>&1; echo "llama-completion rc=$?"
  grep -E "buffer size|memory breakdown|CUDA0 \(|Host  " "$W/mem-$name-$dca.log"
done 2>&1 | tee "$OUT/mem-$name.txt"
