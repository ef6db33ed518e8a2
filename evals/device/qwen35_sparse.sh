#!/usr/bin/env bash
# Device: Qwen3.5 throughput and memory, and sparse prefill on CUDA, ONE call after the build
# (start_build.sh) and the models (gen_models.sh):
#   (a) the qwen35 cells of the shape matrix: the 8-layer Qwen3.5-9B shape (2 attention layers of 8,
#       Gated DeltaNet between), f16 and q8_0 KV, depths 32k and 128k, DCA on vs off       ~1.5 min
#   (b) device memory per process of the full Qwen3.5-9B shape (32 layers, vocabulary 248,320) at
#       256k / 512k / 1M tokens with f16 / q8_0 / q4_0 KV, DCA off and on, the training length
#       set to Qwen3.5's 262,144 so that DCA picks the real model's chunks               ~3 min
#   (c) sparse prefill on CUDA: one llama-bench prefill of 8,192 and of 32,768 tokens on the
#       Qwen2.5-0.5B shape (24 layers), sparse off / on (threshold 1024, so nearly every ubatch is
#       sparse), DCA off / on; each run capped at CAP_S seconds (default 200)
# -> $OUT: qwen35-shapes.json, qwen35-shapes.txt, qwen35-memory-{f16,q8_0,q4_0}.json, qwen35-memory.txt,
#    sparse-cuda.txt (7 files)
# usage: [PARTS=abc] [R=4] [INSTANCES=2] [CAP_S=200] [TREE=post_tree id] bash evals/device/qwen35_sparse.sh
#   PARTS picks the parts to run (a call is at most 10 minutes: (c) can take 4 x CAP_S per size)
set -uo pipefail
source evals/device/common.sh
t0=$(date +%s)
bin="$(build_dir)bin"
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
tree=$(cd "$CR" 2>/dev/null && git rev-parse --short=8 HEAD 2>/dev/null || echo unknown)
w=0; while [ ! -f "$W/gen.rc" ] && [ "$w" -lt 300 ]; do sleep 5; w=$((w+5)); done
echo "models: rc=$(cat "$W/gen.rc" 2>/dev/null || echo none) after waiting ${w} s"; tail -4 "$W/gen.log"

parts=${PARTS:-abc}
if [[ $parts == *a* ]]; then
echo "== (a) qwen35 shape cells"
python3 evals/dca/shape_matrix.py run --matrix gpu --cells qwen3.5-9b/f16,qwen3.5-9b/q8_0 --bin "$bin" \
  --work "$W/shapes" --gguf-py "$CR/gguf-py" --reps "${R:-4}" --instances "${INSTANCES:-2}" \
  --tree "${TREE:-$tree}" --out "$OUT/qwen35-shapes.json" > "$OUT/qwen35-shapes.txt" 2>&1
echo "shape cells rc=$? (0: every cell >= 0.95)"; tail -12 "$OUT/qwen35-shapes.txt"

fi
if [[ $parts == *b* ]]; then
echo "== (b) Qwen3.5-9B memory"
mem=$(python3 evals/dca/shape_matrix.py path --matrix memory --work "$W/shapes" --gguf-py "$CR/gguf-py" --cells qwen3.5-9b-full/any | tail -1)
for kv in q4_0 q8_0 f16; do
  echo "-- KV $kv"
  python3 evals/device/gpu_mem.py "$OUT/qwen35-memory-$kv.json" --bin "$bin" --model "$mem" --kv "$kv" \
    --ctx 262144,524288,1048576 --n 4 --extra "--override-kv qwen35.context_length=int:262144"
  echo "gpu_mem $kv rc=$?"
done > "$OUT/qwen35-memory.txt" 2>&1
grep -E "^ctx|rc=|KV" "$OUT/qwen35-memory.txt"

fi
if [[ $parts == *c* ]]; then
echo "== (c) sparse prefill on CUDA"
small=$(python3 evals/dca/shape_matrix.py path --work "$W/shapes" --gguf-py "$CR/gguf-py" --cells qwen2.5-0.5b/f16 | tail -1)
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  for n in ${SIZES:-8192 32768}; do
    for dca in 0 1; do
      for sp in 0 1; do
        cmd=("$bin/llama-bench" -m "$small" -fa 1 -ngl 99 -p "$n" -n 0 -r 1 -ub 512 -b 2048 -dca "$dca"
             -sparse "$sp" --sparse-threshold 1024 -o json)
        echo "## n=$n dca=$dca sparse=$sp: ${cmd[*]}"
        s=$(date +%s.%N)
        timeout "${CAP_S:-200}" "${cmd[@]}" > "$W/sp.json" 2> "$W/sp.err"; rc=$?
        e=$(date +%s.%N)
        echo "rc=$rc wall_s=$(python3 -c "print(round($e-$s,1))")"
        python3 -c "import json,sys; r=json.load(open('$W/sp.json')); [print('avg_ts', x['avg_ts'], 'avg_ns', x['avg_ns']) for x in r]" 2>/dev/null || tail -3 "$W/sp.err"
      done
    done
  done
} > "$OUT/sparse-cuda.txt" 2>&1
grep -E "^##|rc=|avg_" "$OUT/sparse-cuda.txt"
fi
echo "total $(( $(date +%s) - t0 )) s"
