#!/bin/bash
# budget sensitivity at 1x on SmolLM2: rounds of one more haystack per method until END (epoch s), one lane
set -u
B=$1; END=$2; R=/work/rooms-lead/qb; cd /work/main
k=1; resume=()
while :; do
  left=$(( END - $(date +%s) ))
  [ $left -lt 400 ] && break
  echo "round $k: haystacks $k, budget ${left}s, $(date -u +%T)" >> $R/driver.log
  /work/main/.venv/bin/python -m evals.longctx run --server $B/llama-server --model smollm2-135m --multiples 1 \
    --haystacks $k --methods dca \
    --methods "dca-sparse-q=--dca on --sparse-prefill on --sparse-threshold 1024 --sparse-vertical 250 --sparse-slash 1524" \
    --methods "dca-sparse-h=--dca on --sparse-prefill on --sparse-threshold 1024 --sparse-vertical 500 --sparse-slash 3048" \
    --tasks passkey,mk_niah --mk-keys 8 --cost cpu-135m --lanes 1 --budget-s $left \
    --corpus /work/rooms-sparseqa/lc/corpus.json.xz --token-cache /work/rooms-sparseqa/lc/tokens.json.xz \
    --server-args "-t 1 -tb 1 -fa on" --label cpu-2core "${resume[@]}" \
    --out $R/round$k.json --summary $R/round$k-summary.json --work $R/logs-round$k >> $R/round$k.log 2>&1
  rc=$?; echo "round $k: exit $rc, $(date -u +%T)" >> $R/driver.log; [ $rc -ne 0 ] && break
  resume+=(--resume $R/round$k.json); k=$((k+1))
done
echo "done $(date -u +%T)" >> $R/driver.log
