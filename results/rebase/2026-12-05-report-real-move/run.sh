#!/bin/sh
# The shipped 0.3.35 series moved onto llama-cpp-python 0.3.36 with `patchctl rebase`, every
# conflict block resolved mechanically (ours, then theirs: a stand-in for a maintainer's edit,
# not a correct resolution), to record the report and the stops of a real move.
# Usage: sh run.sh WORK OUT   (WORK: an empty scratch folder; OUT: where the logs go)
set -u
WORK=$1; OUT=$(mkdir -p "$2" && cd "$2" && pwd); HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../../.." && pwd)
PATCHCTL="$REPO/.venv/bin/patchctl"
mkdir -p "$WORK/proj/patches" "$OUT"
cp -r "$REPO/patches/llamafile-0.3.35" "$WORK/proj/patches/"
cd "$WORK/proj"
S=patches/llamafile-0.3.35; ROOM="$WORK/room"
/usr/bin/time -f "%e s" -o "$OUT/apply.time" "$PATCHCTL" cleanroom apply --series $S --workdir "$ROOM" > "$OUT/apply.log" 2>&1
/usr/bin/time -f "%e s" -o "$OUT/step-0.time" "$PATCHCTL" rebase --onto llama-cpp-python==0.3.36 --series $S --workdir "$ROOM" > "$OUT/step-0.log" 2>&1
n=0
while :; do
  files=$(cd "$ROOM" && git diff --name-only --diff-filter=U)
  [ -z "$files" ] && break
  n=$((n + 1))
  (cd "$ROOM" && git status --porcelain > "$OUT/step-$n.status" && python3 "$HERE/keep_both.py" $files)
  /usr/bin/time -f "%e s" -o "$OUT/step-$n.time" "$PATCHCTL" rebase --continue --series $S --workdir "$ROOM" > "$OUT/step-$n.log" 2>&1
done
"$PATCHCTL" rebase --status --series $S --json > "$OUT/report.json"
cp $S/rebase-0.3.35-0.3.36.html "$OUT/report.html"
