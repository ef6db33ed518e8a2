#!/usr/bin/env bash
# Device: the long-context quality harness (scripts/longctx; docs/dca.md "Long-context quality")
# against the patched tree that start_build.sh built through patchctl (it builds llama-server).
#
# usage: [MODEL=qwen2.5-coder-0.5b] [BUDGET_S=N] [LANES=2] longctx_run.sh TIER [harness args...]
#   TIER smoke: 1x and 2x, every method, 1 haystack            ~1.5 min of device time
#        core:  0.5x-4x every method, DCA at 8x/16x/32x                        ~9 min
#        full:  the whole grid (0.5x-16x every method, DCA 32x): run it again and again,
#               each call resumes from the last ($W/longctx keeps the file while the machine is
#               warm; carry an earlier result as .device/longctx/longctx-full-MODEL.json to go on
#               after a cold start)
#   every tier also probes the memory of a 32x (1M for a 32k model) DCA server, f16 and q8_0 KV
#   BUDGET_S: seconds of haystacks this call may start (defaults: smoke 100, core 450, full 500)
#
# needs in $W/stage (carried with `stage`, see README.md) the model parts
#   MODEL.gguf.NN from `python3 -m scripts.longctx pack MODEL .device/MODEL`, or $W/models/MODEL.gguf;
# and .device/longctx/ carried in this call or an earlier one: corpus.json.xz (`... corpus`) and
#   tokens-MODEL.json.xz (`... tokens`; optional, saves tokenizing the corpus here).
# writes $OUT/longctx-TIER-MODEL.json (rewritten after every haystack, so a timeout keeps what
# finished) and $OUT/longctx-TIER-MODEL-logs.tar.xz (the server logs).
set -uo pipefail
source scripts/device/common.sh
install_wheels
tier=${1:?usage: longctx_run.sh smoke|core|full [harness args]}; shift
model=${MODEL:-qwen2.5-coder-0.5b}
L=$W/longctx; mkdir -p "$L" "$W/models"
[ -d .device/longctx ] && cp -f .device/longctx/* "$L/"
gguf=$W/models/$model.gguf
if [ ! -f "$gguf" ]; then  # join the staged parts; the harness checks the pinned sha256
  python3 -m scripts.longctx join "$model" "$gguf" --parts-in "$W/stage" --remove-parts || exit 1
fi
bin="$(build_dir)bin"
t=0  # start_build.sh's background build still running: wait for it (at most 400 s)
while [ -f "$W/build.log" ] && [ ! -f "$W/build.rc" ] && [ "$t" -lt 400 ]; do sleep 10; t=$((t+10)); done
[ -f "$W/build.rc" ] && [ "$(cat "$W/build.rc")" != 0 ] && { tail -20 "$W/build.log"; exit 1; }
if [ ! -x "$bin/llama-server" ]; then  # a build from before start_build.sh named llama-server
  echo "llama-server missing: building it through patchctl into $W/build"
  python3 -m patchctl build --series patches/llamafile --workdir "$CR" --cuda "${ARCHS:-sm_90}" \
    --jobs 16 --build-dir "$W/build" -t llama-server --json > "$L/build-server.json" \
    2> "$L/build-server.log" || { tail -20 "$L/build-server.log"; exit 1; }
fi
case $tier in smoke) budget=100;; core) budget=450;; *) budget=500;; esac
out=$OUT/longctx-$tier-$model.json
resume=(); [ -f "$L/longctx-$tier-$model.json" ] && resume=(--resume "$L/longctx-$tier-$model.json")
tokens=(); [ -f "$L/corpus.json.xz" ] && tokens=(--token-cache "$L/tokens-$model.json.xz")
corpus=(); [ -f "$L/corpus.json.xz" ] && corpus=(--corpus "$L/corpus.json.xz")
PYTHONUNBUFFERED=1 python3 -m scripts.longctx run --server "$bin/llama-server" --model "$model" \
  --model-file "$gguf" --tier "$tier" --lanes "${LANES:-2}" --probe dca@32 --probe dca-q8@32 \
  --budget-s "${BUDGET_S:-$budget}" "${corpus[@]}" "${tokens[@]}" "${resume[@]}" --label h200 \
  --server-args "-ngl 99 -fa on -ub 1024 -b 2048" --out "$out" --work "$L/logs-$tier" "$@" \
  > "$L/run-$tier.txt" 2> "$L/run-$tier.log"
rc=$?
tail -40 "$L/run-$tier.log"; cat "$L/run-$tier.txt"
echo "longctx run rc=$rc"
[ -f "$out" ] && cp -f "$out" "$L/"
tar cJf "$OUT/longctx-$tier-$model-logs.tar.xz" -C "$L" "logs-$tier" "run-$tier.log" 2> /dev/null
exit $rc
