#!/usr/bin/env bash
# Device: the long-context quality harness (evals/longctx; docs/dca.md "Long-context quality")
# in one call, against a llama-server built with CUDA from the patched tree.
#
# usage: LLAMA_SERVER=/path/bin/llama-server QWEN_GGUF=/path/qwen.gguf \
#          [MODEL=qwen|gemma|smol] [GEMMA_GGUF=...] [SMOL_GGUF=...] [BUDGET_S=420] [LANES=2] \
#          [TIER=onecall] [PROBES="dca@32 dca-q8@32"] [SERVER_ARGS="-ngl 99 -fa on -ub 1024 -b 2048"] \
#          [LONGCTX_DATA=.device/longctx] bash evals/device/longctx_run.sh [harness run args...]
#
# TIER onecall (default): the cells of evals/longctx/plan.py ONECALL in priority order (every
#   method at 1x-8x the trained length, then DCA with mscale on, then more haystacks, then DCA at
#   16x/32x) taken by LANES server processes; a cell starts only when all its haystacks are
#   expected to end within BUDGET_S seconds of this script's start (estimates from the cost model
#   h200-0.5b, scaled by measured/expected as cells finish). `python3 -m evals.longctx plan
#   --tier onecall --lanes 2 --budget-s 420` prints the queue with its estimates.
# TIER fill: the cells onecall leaves out or short (0.5x, 16x for every method, DCA at 32x, then
#   haystacks up to 20 per cell), the same queue rules; give --resume with the published file.
# PROBES: memory probes (METHOD@MULTIPLE) run first, alone: 1M tokens with f16 and q8_0 KV.
# The script stops the harness at BUDGET_S + 60 s at the latest (SIGTERM: servers killed, every
# finished haystack already written).
# LONGCTX_DATA: corpus.json.xz and tokens-<model>.json.xz (`python3 -m evals.longctx corpus` /
#   `tokens`, see evals/device/README.md); without them the corpus is built here (~10 s) from this
#   machine's files and tokenized on the fly. A LONGCTX_DATA named but lacking corpus.json.xz is an
#   error (exit 2): its haystacks would silently come from another corpus.
#
# writes to $OUT (each JSON rewritten after every haystack, so a timeout keeps what finished):
#   longctx-MODEL.json          every trial, every job (the raw data; `publish` splits it by cell)
#   longctx-MODEL-summary.json  jobs, budget, cells with Wilson intervals, measured prefill rates
#   command.txt                 the exact harness command, environment and plan estimates
#   run.log                     the harness's progress;  logs.tar.xz  the server logs (at the end)
# Then, on the CPU machine: python3 -m evals.longctx publish FILES_AT/longctx-MODEL.json
set -uo pipefail
t0=$(date +%s)
: "${LLAMA_SERVER:?set LLAMA_SERVER to the CUDA llama-server of the patched tree}"
OUT=${OUT:-/tmp/longctx-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
case ${MODEL:-qwen} in
  qwen)  name=qwen2.5-coder-0.5b; gguf=${QWEN_GGUF:-} ;;
  gemma) name=gemma3-270m; gguf=${GEMMA_GGUF:-} ;;
  smol)  name=smollm2-135m; gguf=${SMOL_GGUF:-} ;;
  *) echo "MODEL must be qwen, gemma or smol, not ${MODEL}" >&2; exit 2 ;;
esac
[ -f "$gguf" ] || { echo "no GGUF for MODEL=${MODEL:-qwen}: set ${MODEL:-qwen}_GGUF (upper case)" >&2; exit 2; }
[ -x "$LLAMA_SERVER" ] || { echo "LLAMA_SERVER=$LLAMA_SERVER is not an executable" >&2; exit 2; }
budget=${BUDGET_S:-420}
data=${LONGCTX_DATA:-.device/longctx}
if [ -n "${LONGCTX_DATA:-}" ] && [ ! -f "$data/corpus.json.xz" ]; then
  # a named data folder that is not there would silently give haystacks from another corpus
  echo "LONGCTX_DATA=$data has no corpus.json.xz: carry the folder (python3 -m evals.longctx corpus) or unset LONGCTX_DATA to build the corpus here" >&2
  exit 2
fi
[ -f "$data/corpus.json.xz" ] || echo "note: no $data/corpus.json.xz: the corpus is built from this machine's files (its haystacks differ from the shipped corpus's)" >&2
work=$(mktemp -d /tmp/longctx.XXXXXX)
extra=()
[ -f "$data/corpus.json.xz" ] && extra+=(--corpus "$data/corpus.json.xz")
# the token cache only when it was made for this model file and corpus (read and written: a copy)
if [ -f "$data/corpus.json.xz" ] && [ -f "$data/tokens-$name.json.xz" ] && python3 - \
    "$data/tokens-$name.json.xz" "$data/corpus.json.xz" "$gguf" <<'PY'
import json, lzma, sys
from pathlib import Path
from patchctl.fsio import sha256_file
from evals.longctx.corpus import load_corpus
cache = json.loads(lzma.decompress(Path(sys.argv[1]).read_bytes()))
ok = (cache.get("corpus_sha256") == load_corpus(Path(sys.argv[2])).sha256
      and cache.get("model_sha256") == sha256_file(Path(sys.argv[3])))
print("token cache:", "used" if ok else "made for another model or corpus, not used")
sys.exit(0 if ok else 1)
PY
then
  cp "$data/tokens-$name.json.xz" "$work/"; extra+=(--token-cache "$work/tokens-$name.json.xz")
fi
for p in ${PROBES-dca@32 dca-q8@32}; do extra+=(--probe "$p"); done
left=$((budget - ($(date +%s) - t0) - 2))  # 2 s: python starting, before the clock
cmd=(python3 -m evals.longctx run --server "$LLAMA_SERVER" --model "$name" --model-file "$gguf"
     --unpinned --tier "${TIER:-onecall}" --lanes "${LANES:-2}" --budget-s "$left"
     --server-args "${SERVER_ARGS:--ngl 99 -fa on -ub 1024 -b 2048}" --label h200
     --out "$OUT/longctx-$name.json" --summary "$OUT/longctx-$name-summary.json"
     --work "$work/logs" "${extra[@]}" "$@")
{
  echo "# $(date -u +%FT%TZ) $(git rev-parse HEAD 2>/dev/null) budget ${budget}s"
  printf '%q ' "${cmd[@]}"; echo
  env | grep -E '^(LLAMA_SERVER|MODEL|QWEN_GGUF|GEMMA_GGUF|SMOL_GGUF|BUDGET_S|LANES|TIER|PROBES|SERVER_ARGS|LONGCTX_DATA)=' | sort
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1
  "$LLAMA_SERVER" --version 2>&1 | grep -i version
  python3 -m evals.longctx plan --tier "${TIER:-onecall}" --lanes "${LANES:-2}" --budget-s "$left" \
    --model "$name" 2>&1
} > "$OUT/command.txt"
cat "$OUT/command.txt"
timeout -s TERM -k 15 $((budget + 60 - ($(date +%s) - t0))) "${cmd[@]}" > "$work/table.md" 2> "$OUT/run.log"
rc=$?
tail -25 "$OUT/run.log"; cat "$work/table.md"
echo "longctx run rc=$rc ($(( $(date +%s) - t0 )) s)"
tar cJf "$OUT/logs.tar.xz" -C "$work" logs 2> /dev/null
exit $rc
