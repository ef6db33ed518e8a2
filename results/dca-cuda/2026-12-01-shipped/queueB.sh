#!/usr/bin/env bash
# queue B: after queue A, in parallel: longctx (bg), memory at 128k/1M, the CUDA shape tests
set -uo pipefail
W=$HOME/lead; cd $W/repo; source scripts/device/common.sh
while [ ! -f $W/queueA.done ]; do sleep 2; done
B=$W/outB; mkdir -p $B $W/outL
log() { echo "$(date +%T) $*" >> $W/queue.log; }
bin=$W/build/bin
( OUT=$W/outL LLAMA_SERVER=$bin/llama-server QWEN_GGUF=$W/files/Qwen2.5-Coder-0.5B-Instruct.gguf BUDGET_S=${LBUDGET:-520} \
   LONGCTX_DATA=$W/longctx bash scripts/device/longctx_run.sh > $W/outL/driver.log 2>&1; log "longctx rc=$?"; touch $W/longctx.done ) &
sleep 20
export LD_LIBRARY_PATH=$bin
mem_model=$(python3 scripts/dca_shapes.py path --work $W/shapes --gguf-py $W/cr/gguf-py --cells qwen2.5-0.5b/f16 | tail -1)
python3 scripts/device/gpu_mem.py $B/dca-memory.json --bin $bin --model "$mem_model" --ctx 131072,1048576 > $B/dca-memory.txt 2>&1; log "gpu_mem rc=$?"
OUT=$B bash scripts/device/dca_shapes_cuda.sh > $B/shapes-cuda.log 2>&1; log "shapes_cuda rc=$?"
touch $W/queueB.done
wait
