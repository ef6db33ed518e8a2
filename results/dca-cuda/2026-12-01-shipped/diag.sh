#!/usr/bin/env bash
# issue 15 diagnostic: the tg64@32k cells that missed, decode of 64 vs 256 tokens at the same depth, DCA off/on, alone
set -uo pipefail
W=$HOME/lead; cd $W/repo; source scripts/device/common.sh
export LD_LIBRARY_PATH=$W/build/bin
D=$W/diag; mkdir -p $D
for spec in "llama3-8b/q4_0 q4_0" "qwen3-0.6b/f16 f16" "qwen2.5-3b/f16 f16" "llama3.2-1b/f16 f16"; do
  set -- $spec; cell=$1; kv=$2; name=$(echo $cell | tr '/' '-')
  m=$(python3 scripts/dca_shapes.py path --work $W/shapes --gguf-py $W/cr/gguf-py --cells $cell | tail -1)
  echo "$W/build/bin/llama-bench -m $m -fa 1 -ngl 99 -p 0 -n 64,256 -d 32768 -dca 0,1 -r 4 -ctk $kv -ctv $kv -o json" > $D/cmd-$name.txt
  $W/build/bin/llama-bench -m $m -fa 1 -ngl 99 -p 0 -n 64,256 -d 32768 -dca 0,1 -r 4 -ctk $kv -ctv $kv -o json > $D/tg-$name.json 2> $D/tg-$name.err
  echo "$cell rc=$?"
done
