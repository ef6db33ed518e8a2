#!/usr/bin/env bash
# Device: where DCA's time goes, kernel by kernel (the device image has no nsys: evals/device/cupti_prof.c is a
# CUPTI activity tracer injected with CUDA_INJECTION64_PATH).
# usage: dca_profile.sh MODEL NAME DEPTH
#   -> $OUT/prof-NAME-DEPTH-{pp512,tg16}-dca{0,1}.{txt,json} (8 files): for one llama-bench run each (FA on, all layers on the
#      GPU), the last step (pp512: the timed ubatch) or the median of the last 16 decoded tokens: host gap before the
#      step, GPU span, kernel time and count, input copies, and the last step's kernels by name.
set -uo pipefail
source evals/device/common.sh
model=$1; name=$2; depth=$3; bin="$(build_dir)bin"
cuda=${CUDA_HOME:-/usr/local/cuda}
libdir=$(dirname "$(find "$cuda"/ /usr/local/cuda*/ -name 'libcupti.so*' 2>/dev/null | head -1)")
prof="$W/libcupti_prof.so"
if [ ! -f "$prof" ]; then
  gcc -O2 -shared -fPIC -o "$prof" evals/device/cupti_prof.c -I"$cuda/include" -I"$cuda/extras/CUPTI/include" \
    -L"$libdir" -lcupti -Wl,-rpath,"$libdir" || { echo "cupti_prof: build failed"; exit 1; }
fi
for dca in 0 1; do
  for test in pp512 tg16; do
    if [ "$test" = pp512 ]; then args=(-p 512 -n 0); last=1; else args=(-p 0 -n 16); last=16; fi
    trace="$W/trace-$name-$depth-$test-$dca.csv"
    out="$OUT/prof-$name-$depth-$test-dca$dca"
    CUDA_INJECTION64_PATH="$prof" CUPTI_PROF_OUT="$trace" "$bin/llama-bench" -m "$model" -ngl 99 -fa 1 "${args[@]}" \
      -d "$depth" -dca $dca -r 1 > "$trace.bench.txt" 2>&1; echo "llama-bench $test dca=$dca rc=$?"
    { grep -E "^\| .*(pp|tg)[0-9]+" "$trace.bench.txt"; python3 evals/device/cupti_summary.py "$trace" --last $last \
        --json "$out.json"; } > "$out.txt" 2>&1
    head -30 "$out.txt"
  done
done
