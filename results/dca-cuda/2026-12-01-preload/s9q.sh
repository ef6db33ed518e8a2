#!/usr/bin/env bash
# next device session (issue 15 close-out on the preload tree, then issue 16): waits for the build, then ALONE on the GPU:
# the 4 decode cells at 32k (default lazy loading; then CUDA_MODULE_LOADING=EAGER), the first-token profile, the whole
# matrix, SmolLM2/Gemma-3 benches; then in parallel the CUDA op/shape tests and the long-context harness.
set -uo pipefail
W=$HOME/lead; cd $W/repo; source scripts/device/common.sh
log() { echo "$(date +%T) $*" >> $W/queue.log; }
while [ ! -f $W/build.rc ]; do sleep 2; done
log "build rc=$(cat $W/build.rc)"
bin=$W/build/bin; export LD_LIBRARY_PATH=$bin; F=$W/files
A=$W/outA; mkdir -p $A/diag $A/diag-eager; cp $W/build.json $A/ 2>/dev/null
TREE=$(grep -A12 "id: 0078-dca" patches/llamafile/series.yaml | awk '/post_tree:/ {print substr($2,1,8); exit}')
diag() {  # diag DIR [ENV=VAL]
  d=$1; shift
  for spec in "llama3-8b/q4_0 q4_0" "qwen3-0.6b/f16 f16" "qwen2.5-3b/f16 f16" "llama3.2-1b/f16 f16"; do
    set -- $spec; cell=$1; kv=$2; name=$(echo $cell | tr '/' '-')
    m=$(python3 scripts/dca_shapes.py path --work $W/shapes --gguf-py $W/cr/gguf-py --cells $cell | tail -1)
    echo "${EAGER:+CUDA_MODULE_LOADING=EAGER }$bin/llama-bench -m $m -fa 1 -ngl 99 -p 0 -n 64,256 -d 32768 -dca 0,1 -r 4 -ctk $kv -ctv $kv -o json" > $d/cmd-$name.txt
    env ${EAGER:+CUDA_MODULE_LOADING=EAGER} $bin/llama-bench -m $m -fa 1 -ngl 99 -p 0 -n 64,256 -d 32768 -dca 0,1 -r 4 -ctk $kv -ctv $kv -o json > $d/tg-$name.json 2> $d/tg-$name.err
    log "diag $d $cell rc=$?"
  done
}
diag $A/diag
EAGER=1 diag $A/diag-eager
OUT=$A bash scripts/device/dca_shapes_profile.sh 32768 llama3-8b/q4_0 > $A/prof32.log 2>&1; log "prof32 rc=$?"
python3 scripts/dca_shapes.py run --matrix gpu --bin $bin --work $W/shapes --gguf-py $W/cr/gguf-py --reps 4 \
  --budget-s ${MATRIX_S:-330} --tree $TREE --out $A/dca-shapes.json > $A/dca-shapes.txt 2>&1; log "matrix rc=$?"
OUT=$A R=4 bash scripts/device/dca_bench.sh $F/SmolLM2-135M-Instruct.Q4_1.gguf smollm2 > $A/bench-smollm2.log 2>&1; log "bench smollm2 rc=$?"
OUT=$A R=4 bash scripts/device/dca_bench.sh $F/gemma-3-270m-q4_k_m.gguf gemma3 > $A/bench-gemma3.log 2>&1; log "bench gemma3 rc=$?"
cp $W/summary-*.json $A/ 2>/dev/null
touch $W/queueA.done
B=$W/outB; mkdir -p $B $W/outL
( OUT=$W/outL LLAMA_SERVER=$bin/llama-server QWEN_GGUF=$F/Qwen2.5-Coder-0.5B-Instruct.gguf BUDGET_S=${LBUDGET:-300} PROBES="" \
   LONGCTX_DATA=$W/longctx bash scripts/device/longctx_run.sh > $W/outL/driver.log 2>&1; log "longctx rc=$?"; touch $W/longctx.done ) &
for o in FLASH_ATTN_EXT_LSE_MERGE FLASH_ATTN_EXT_LSE; do $bin/test-backend-ops test -b CUDA0 -o $o > $B/tbo-$o.txt 2>&1; log "tbo $o rc=$? $(tail -1 $B/tbo-$o.txt)"; done
OUT=$B bash scripts/device/dca_shapes_cuda.sh > $B/shapes-cuda.log 2>&1; log "shapes_cuda rc=$?"
OUT=$B bash scripts/device/dca_cuda_tests.sh > $B/cuda-tests.log 2>&1; log "cuda_tests rc=$?"
touch $W/queueB.done
wait
