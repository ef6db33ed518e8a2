#!/bin/bash
# rounds of one more haystack per method at multiple M until END (epoch s); each round resumes the earlier ones
set -u
B=$1; M=$2; END=$3; R=/work/rooms-lead/q34/m$M; mkdir -p $R; cd /work/main
k=1; resume=()
while :; do
  left=$(( END - $(date +%s) ))
  [ $left -lt 300 ] && break
  echo "round $k: haystacks $k, budget ${left}s, $(date -u +%T)" >> $R/driver.log
  /work/main/.venv/bin/python -m evals.longctx run --server $B/llama-server --model smollm2-135m --multiples $M \
    --haystacks $k --methods dca \
    --methods "dca-sparse-4k=--dca on --sparse-prefill on --sparse-threshold 4096" \
    --tasks passkey,mk_niah --mk-keys 8 --cost cpu-135m --lanes 2 --budget-s $left \
    --corpus /work/rooms-sparseqa/lc/corpus.json.xz --token-cache /work/rooms-sparseqa/lc/tokens.json.xz \
    --server-args "-t 1 -tb 1 -fa on" --label cpu-2core "${resume[@]}" \
    --out $R/round$k.json --summary $R/round$k-summary.json --work $R/logs-round$k >> $R/round$k.log 2>&1
  rc=$?; echo "round $k: exit $rc, $(date -u +%T)" >> $R/driver.log; [ $rc -ne 0 ] && break
  resume+=(--resume $R/round$k.json); k=$((k+1))
done
echo "done $(date -u +%T)" >> $R/driver.log
