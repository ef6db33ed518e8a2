#!/usr/bin/env bash
# Device: where DCA's extra time goes (issue 6 follow-up; NOT yet run on the device).
# usage: dca_profile.sh MODEL NAME DEPTH  -> $OUT/prof-NAME-DEPTH-dca{0,1}.txt
# With nsys: per-kernel GPU time of one pp512 + tg16 at DEPTH, DCA off and on (cuda_gpu_kern_sum), so
# extra kernels, slower FA calls and host gaps (wall minus kernel sum) can be told apart.
# Without nsys: llama-bench with CUDA graphs on and off (launch overhead) as a cheaper hint.
set -uo pipefail
source scripts/device/common.sh
model=$1; name=$2; depth=$3; bin="$(build_dir)bin"
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null || true)
for dca in 0 1; do
  out="$OUT/prof-$name-$depth-dca$dca.txt"
  if [ -n "$nsys" ]; then
    "$nsys" profile -o "$W/prof-$name-$dca" --force-overwrite true --stats=false \
      "$bin/llama-bench" -m "$model" -ngl 99 -fa 1 -p 512 -n 16 -d "$depth" -dca $dca -r 1 > "$W/prof-$name-$dca.log" 2>&1
    "$nsys" stats -r cuda_gpu_kern_sum,cuda_api_sum --format csv "$W/prof-$name-$dca.nsys-rep" > "$out" 2>&1
  else
    for graphs in 0 1; do
      echo "== GGML_CUDA_DISABLE_GRAPHS=$((1 - graphs))" >> "$out"
      GGML_CUDA_DISABLE_GRAPHS=$((1 - graphs)) "$bin/llama-bench" -m "$model" -ngl 99 -fa 1 -p 512 -n 64 \
        -d "$depth" -dca $dca -r 2 >> "$out" 2>&1
    done
  fi
  echo "== dca=$dca -> $out"; head -25 "$out"
done
