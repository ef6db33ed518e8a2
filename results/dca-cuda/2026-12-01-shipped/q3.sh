#!/usr/bin/env bash
set -uo pipefail
W=$HOME/lead; cd $W/repo; source scripts/device/common.sh
while [ ! -f $W/build.rc ]; do sleep 2; done
echo "$(date +%T) build rc=$(cat $W/build.rc)" >> $W/q3.log
export LD_LIBRARY_PATH=$W/build/bin
m=$(python3 scripts/dca_shapes.py path --work $W/shapes --gguf-py $W/cr/gguf-py --cells qwen2.5-0.5b/f16 | tail -1)
mkdir -p $W/mem; python3 scripts/device/gpu_mem.py $W/mem/dca-memory.json --bin $W/build/bin --model $m --ctx 131072,1048576 > $W/mem/dca-memory.txt 2>&1
echo "$(date +%T) mem rc=$?" >> $W/q3.log
bash $W/diag.sh > $W/diag.log 2>&1; echo "$(date +%T) diag done" >> $W/q3.log
mkdir -p $W/outL $W/outB
( cd $W/repo && OUT=$W/outL LLAMA_SERVER=$W/build/bin/llama-server QWEN_GGUF=$W/files/Qwen2.5-Coder-0.5B-Instruct.gguf BUDGET_S=${LB:-110} PROBES="" \
  LONGCTX_DATA=$W/longctx bash scripts/device/longctx_run.sh --methods dca,dca-mscale --multiples 2,4 --haystacks 3 > $W/outL/driver.log 2>&1; echo "$(date +%T) longctx rc=$?" >> $W/q3.log ) &
OUT=$W/outB bash scripts/device/dca_shapes_cuda.sh > $W/outB/shapes-cuda.log 2>&1; echo "$(date +%T) shapes_cuda rc=$?" >> $W/q3.log
wait
touch $W/q3.done
