#!/usr/bin/env bash
# session 10's queue: issue 15's acceptance (the two-context matrix, the benches) alone on the GPU, then issue 16's
# fill plan (Qwen resumed from the published file, SmolLM2 beside it). Binaries from setup10 (built on the CPU machine).
set -uo pipefail
W=$HOME/lead; cd $W/repo; source scripts/device/common.sh
log() { echo "$(date +%T) $*" >> $W/queue.log; }
waitfile() { while [ ! -f "$1" ]; do sleep 2; done; }
waitfile $W/build.rc; log "build rc=$(cat $W/build.rc)"
bin=$W/build/bin; export LD_LIBRARY_PATH=$bin:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib; F=$W/files
A=$W/outA; mkdir -p $A/diag; cp $W/build.json $A/ 2>/dev/null
TREE=$(grep -A12 "id: 0078-dca" patches/llamafile/series.yaml | awk '/post_tree:/ {print substr($2,1,8); exit}')
waitfile $W/bg-gen.rc; log "gen rc=$(cat $W/bg-gen.rc)"
python3 scripts/dca_shapes.py run --matrix gpu --bin $bin --work $W/shapes --gguf-py $W/cr/gguf-py --reps 2 --instances 2 \
  --budget-s ${MATRIX_S:-420} --tree $TREE --out $A/dca-shapes.json > $A/dca-shapes.txt 2>&1; log "matrix rc=$?"
waitfile $F/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=$A bash scripts/device/dca_bench.sh $F/SmolLM2-135M-Instruct.Q4_1.gguf smollm2 > $A/bench-smollm2.log 2>&1; log "bench smollm2 rc=$?"
waitfile $F/gemma-3-270m-q4_k_m.gguf
OUT=$A bash scripts/device/dca_bench.sh $F/gemma-3-270m-q4_k_m.gguf gemma3 > $A/bench-gemma3.log 2>&1; log "bench gemma3 rc=$?"
cp $W/summary-*.json $A/ 2>/dev/null
m=$(python3 scripts/dca_shapes.py path --work $W/shapes --gguf-py $W/cr/gguf-py --cells llama3-8b/q4_0 | tail -1)
for g in 0 1; do  # session 9's +7.7 % span of this cell: with and without CUDA graphs
  echo "GGML_CUDA_DISABLE_GRAPHS=$g llama-bench -m $m -fa 1 -ngl 99 -p 0 -n 64 -d 32768 -dca 0,1,1,0 -r 5 -ctk q4_0 -ctv q4_0" > $A/diag/cmd-graphs$g.txt
  env $( [ $g = 1 ] && echo GGML_CUDA_DISABLE_GRAPHS=1 ) $bin/llama-bench -m $m -fa 1 -ngl 99 -p 0 -n 64 -d 32768 -dca 0,1,1,0 -r 5 \
    -ctk q4_0 -ctv q4_0 -o json > $A/diag/tg-graphs$g.json 2> $A/diag/tg-graphs$g.err; log "graphs=$g rc=$?"
done
touch $W/queueA.done
waitfile $F/Qwen2.5-Coder-0.5B-Instruct.gguf
LB=$(cat $W/lbudget 2>/dev/null || echo 600); log "longctx budget $LB"
mkdir -p $W/outL $W/outS
( OUT=$W/outL LLAMA_SERVER=$bin/llama-server QWEN_GGUF=$F/Qwen2.5-Coder-0.5B-Instruct.gguf BUDGET_S=$LB TIER=fill \
   LONGCTX_DATA=$W/longctx bash scripts/device/longctx_run.sh \
   --resume docs/benchmarks/longctx-2026-12-01/qwen2.5-coder-0.5b-h200.json > $W/outL/driver.log 2>&1; log "longctx qwen rc=$?" ) &
( OUT=$W/outS MODEL=smol SMOL_GGUF=$F/SmolLM2-135M-Instruct.Q4_1.gguf LLAMA_SERVER=$bin/llama-server BUDGET_S=${SBUDGET:-240} \
   TIER=fill LANES=1 PROBES="" LONGCTX_DATA=$W/longctx bash scripts/device/longctx_run.sh \
   --resume docs/benchmarks/longctx-2026-12-01/smollm2-135m-h200.json > $W/outS/driver.log 2>&1; log "longctx smol rc=$?" ) &
wait
touch $W/longctx.done $W/queueB.done
