#!/usr/bin/env bash
# queue A: waits for the build, then the throughput work ALONE on the GPU, in order; then queue B in parallel.
set -uo pipefail
W=$HOME/lead; cd $W/repo; source scripts/device/common.sh
A=$W/outA; mkdir -p $A
log() { echo "$(date +%T) $*" >> $W/queue.log; }
while [ ! -f $W/build.rc ]; do sleep 2; done
log "build rc=$(cat $W/build.rc)"
cp $W/build.json $A/ 2>/dev/null
bin=$W/build/bin; export LD_LIBRARY_PATH=$bin
F=$W/files
OUT=$A R=4 bash scripts/device/dca_bench.sh $F/SmolLM2-135M-Instruct.Q4_1.gguf smollm2 > $A/bench-smollm2.log 2>&1; log "bench smollm2 rc=$?"
OUT=$A R=4 bash scripts/device/dca_bench.sh $F/gemma-3-270m-q4_k_m.gguf gemma3 > $A/bench-gemma3.log 2>&1; log "bench gemma3 rc=$?"
cp $W/summary-*.json $A/ 2>/dev/null
python3 scripts/dca_shapes.py run --matrix gpu --bin $bin --work $W/shapes --gguf-py $W/cr/gguf-py --reps 4 \
  --budget-s ${MATRIX_S:-330} --tree 18a2af37 --out $A/dca-shapes.json > $A/dca-shapes.txt 2>&1; log "matrix rc=$?"
OUT=$A bash scripts/device/dca_shapes_profile.sh 32768 llama3-8b/q4_0 > $A/prof32.log 2>&1; log "prof32 rc=$?"
OUT=$A bash scripts/device/dca_shapes_profile.sh 131072 qwen2.5-0.5b-l4/q8_0 > $A/prof128.log 2>&1; log "prof128 rc=$?"
touch $W/queueA.done
