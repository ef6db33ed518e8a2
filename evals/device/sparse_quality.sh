#!/usr/bin/env bash
# Device: sparse prefill's retrieval quality against its dense method (the long-context harness,
# evals/longctx), Qwen2.5-Coder-0.5B, in phases that share one deadline; a later call resumes.
#
# usage: LLAMA_SERVER=$W/build/bin/llama-server QWEN_GGUF=$W/ferried/qwen.gguf \
#          [BUDGET_S=540] [PHASES="a b c"] [HAYSTACKS=20] [LANES=2] \
#          [SERVER_ARGS="-ngl 99 -fa on -ub 2048 -b 2048"] [LONGCTX_DATA=.device/longctx] \
#          bash evals/device/sparse_quality.sh
#
# Phases (each one harness grid; one combined haystack = a pass key and 8 MK-NIAH keys):
#   a  1x (32k): dca, naive and their sparse forms with --sparse-threshold 4096 (at the trained
#      length no ubatch passes the default 32768 threshold, so only a lower one makes sparse act)
#   b  2x and 4x: dca against dca-sparse (published defaults: threshold 32768, 1000 + 6096)
#   c  8x: dca against dca-sparse
#   d  1x (32k), selection per query head (--sparse-per-head on): dca-sparse-head-4k and
#      naive-sparse-head-4k (--sparse-threshold 4096) alone, to pair with phase a's dense methods
#      on the same haystacks (the harness's seed fixes them; the dense graph is the same)
#   e  2x: dca-sparse-head (published budgets, per query head) alone, to pair with phase b's dca
#   f  1x: dca again, as many haystacks as time allows: its answers must equal phase a's
#   g  1x (32k), twice the published budgets (--sparse-vertical 2000 --sparse-slash 12192, per KV group):
#      dca-sparse-2b-4k (--sparse-threshold 4096) alone, to pair with phase a's dca
#   h  2x, twice the published budgets: dca-sparse-2b alone, to pair with phase b's dca
# Every phase writes $W/sq/PHASE.json after each haystack; a phase whose file is there from an
# earlier call resumes it (--resume: its haystacks are not run again, the new file holds all).
# A haystack starts only when it is expected to end before BUDGET_S (the harness's budget);
# the script stops the harness at BUDGET_S + 45 s at the latest.
# $OUT: PHASE.json (every trial), command.txt (each phase's command), run.log.
set -uo pipefail
t0=$(date +%s)
source evals/device/common.sh
: "${LLAMA_SERVER:?set LLAMA_SERVER to the CUDA llama-server of the patched tree}"
: "${QWEN_GGUF:?set QWEN_GGUF to Qwen2.5-Coder-0.5B-Instruct.gguf}"
[ -x "$LLAMA_SERVER" ] || { echo "LLAMA_SERVER=$LLAMA_SERVER is not an executable" >&2; exit 2; }
[ -f "$QWEN_GGUF" ] || { echo "QWEN_GGUF=$QWEN_GGUF is not a file" >&2; exit 2; }
data=${LONGCTX_DATA:-.device/longctx}
for f in corpus.json.xz tokens-qwen2.5-coder-0.5b.json.xz; do
  # another corpus would give other haystacks than the CPU runs': refuse rather than differ
  [ -f "$data/$f" ] || { echo "$data/$f missing: carry $data (evals/device/README.md)" >&2; exit 2; }
done
budget=${BUDGET_S:-540}
for v in "BUDGET_S=$budget" "HAYSTACKS=${HAYSTACKS:-20}" "LANES=${LANES:-2}"; do
  [[ ${v#*=} =~ ^[1-9][0-9]{0,6}$ ]] || { echo "${v%%=*} must be a positive integer, not '${v#*=}'" >&2; exit 2; }
done
export PYTHONUNBUFFERED=1
mkdir -p "$W/sq"; cp "$data/tokens-qwen2.5-coder-0.5b.json.xz" "$W/sq/tokens.json.xz"
case $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) in
  *H200*) label=h200 ;; *H100*) label=h100 ;; *) label=gpu ;;
esac
sp4="--sparse-prefill on --sparse-threshold 4096"
perhead="--sparse-per-head on"
budget2="--sparse-vertical 2000 --sparse-slash 12192"
phase_args() {
  case $1 in
    a) echo "--multiples 1 --methods dca --methods naive" ;;
    b) echo "--multiples 2,4 --methods dca,dca-sparse" ;;
    c) echo "--multiples 8 --methods dca,dca-sparse" ;;
    d) echo "--multiples 1" ;;
    e) echo "--multiples 2" ;;
    f) echo "--multiples 1 --methods dca" ;;
    g) echo "--multiples 1" ;;
    h) echo "--multiples 2" ;;
    *) echo "unknown phase $1 (a to h)" >&2; return 2 ;;
  esac
}
rc=0
for ph in ${PHASES:-a b c}; do
  args=$(phase_args "$ph") || exit 2
  extra=()
  [ "$ph" = a ] && extra+=(--methods "dca-sparse-4k=--dca on $sp4" --methods "naive-sparse-4k=$sp4")
  [ "$ph" = d ] && extra+=(--methods "dca-sparse-head-4k=--dca on $sp4 $perhead" --methods "naive-sparse-head-4k=$sp4 $perhead")
  [ "$ph" = e ] && extra+=(--methods "dca-sparse-head=--dca on --sparse-prefill on $perhead")
  [ "$ph" = g ] && extra+=(--methods "dca-sparse-2b-4k=--dca on $sp4 $budget2")
  [ "$ph" = h ] && extra+=(--methods "dca-sparse-2b=--dca on --sparse-prefill on $budget2")
  if [ -f "$W/sq/$ph.json" ]; then cp "$W/sq/$ph.json" "$W/sq/$ph.prev.json"; extra+=(--resume "$W/sq/$ph.prev.json"); fi
  left=$((budget - ($(date +%s) - t0) - 3))
  [ "$left" -lt 30 ] && { echo "phase $ph: ${left}s left, not started"; continue; }
  # shellcheck disable=SC2206
  cmd=(python3 -m evals.longctx run --server "$LLAMA_SERVER" --model qwen2.5-coder-0.5b
       --model-file "$QWEN_GGUF" $args --haystacks "${HAYSTACKS:-20}" --tasks passkey,mk_niah
       --mk-keys 8 --cost h200-0.5b --lanes "${LANES:-2}" --budget-s "$left"
       --server-args "${SERVER_ARGS:--ngl 99 -fa on -ub 2048 -b 2048}" --label "$label"
       --corpus "$data/corpus.json.xz" --token-cache "$W/sq/tokens.json.xz"
       --out "$W/sq/$ph.json" --work "$W/sq/logs-$ph" "${extra[@]}")
  { echo "# phase $ph $(date -u +%FT%TZ) $(git rev-parse HEAD 2>/dev/null) left ${left}s"
    printf '%q ' "${cmd[@]}"; echo; } | tee -a "$OUT/command.txt"
  timeout -s TERM -k 15 $((budget + 45 - ($(date +%s) - t0))) "${cmd[@]}" > "$W/sq/$ph.table.md" 2>> "$OUT/run.log"
  r=$?; echo "phase $ph rc=$r ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/run.log"
  [ "$r" -ne 0 ] && rc=$r
  cat "$W/sq/$ph.table.md"
  [ -f "$W/sq/$ph.json" ] && cp "$W/sq/$ph.json" "$OUT/$ph.json"
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$OUT/command.txt"
tail -15 "$OUT/run.log"
exit $rc
