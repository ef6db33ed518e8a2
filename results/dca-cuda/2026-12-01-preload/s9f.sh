#!/usr/bin/env bash
# final call of session 9: profile the two missed cells, then long-context Qwen resume + SmolLM2 on GPU, concurrently
set -uo pipefail
HERE=$PWD; W=$HOME/lead; cd $W/repo; source scripts/device/common.sh
bin=$W/build/bin; export LD_LIBRARY_PATH=$bin; F=$W/files; R=$W/outF; mkdir -p $R/prof $R/q $R/s
for c in qwen3-0.6b/f16 qwen1.5-0.5b/f16; do OUT=$R/prof timeout 60 bash scripts/device/dca_shapes_profile.sh 32768 $c > $R/prof/$(echo $c|tr / -).log 2>&1; echo "prof $c rc=$?"; done
mkdir -p $W/ld; cp -r $HERE/.device/longctx/. $W/ld/ 2>/dev/null
( OUT=$R/q LLAMA_SERVER=$bin/llama-server QWEN_GGUF=$F/Qwen2.5-Coder-0.5B-Instruct.gguf BUDGET_S=280 PROBES="" LONGCTX_DATA=$W/ld \
   timeout 370 bash scripts/device/longctx_run.sh --resume $W/outL/longctx-qwen2.5-coder-0.5b.json > $R/q/driver.log 2>&1; echo "qwen rc=$?" ) &
( OUT=$R/s MODEL=smol SMOL_GGUF=$F/SmolLM2-135M-Instruct.Q4_1.gguf LLAMA_SERVER=$bin/llama-server BUDGET_S=280 PROBES="" LONGCTX_DATA=$W/ld \
   timeout 370 bash scripts/device/longctx_run.sh > $R/s/driver.log 2>&1; echo "smol rc=$?" ) &
wait
tail -4 $R/q/driver.log $R/s/driver.log
cd $W && tar czf $OUT/res2.tgz outF; ls -la $OUT
