#!/usr/bin/env bash
# Train the recorded resolutions of the five-patch llamafile series (0.3.36, commit 9604bfd) on
# its copy moved to 0.3.35 (patches/llamafile-0.3.35), then rebase the 0.3.36 series onto 0.3.35
# again: each stop's files that also needed edits outside their blocks are taken from the moved
# copy at that patch. Run from the project root: WORK=/some/dir results/rebase/2026-12-05-resolutions/run.sh
set -euo pipefail
pc=${PATCHCTL:-$PWD/.venv/bin/patchctl}
out=${OUT:-$PWD/results/rebase/2026-12-05-resolutions}
work=${WORK:?set WORK to a scratch directory}
rm -rf "$work" && mkdir -p "$work/proj/patches" "$work/x"
git archive 9604bfd patches/llamafile | tar -x -f - -C "$work/x"
mv "$work/x/patches/llamafile" "$work/proj/patches/llamafile"
cp -r patches/llamafile-0.3.35 "$work/proj/patches/"
cd "$work/proj"
s=patches/llamafile; m=patches/llamafile-0.3.35
/usr/bin/time -f "wall %e s" "$pc" resolutions train --series $s --moved $m --dry-run --json > "$out/train.json" 2> "$out/train-time.txt"
/usr/bin/time -f "wall %e s" "$pc" resolutions train --series $s --moved $m > "$out/train.txt" 2>> "$out/train-time.txt"
"$pc" resolutions list --series $s > "$out/list.txt"
"$pc" cleanroom apply --series $s --workdir "$work/room" > /dev/null
: > "$out/rebase.txt"
rc=0; /usr/bin/time -f "wall %e s" -a -o "$out/rebase.txt" "$pc" rebase --onto llama-cpp-python==0.3.35 --series $s --workdir "$work/room" >> "$out/rebase.txt" 2>&1 || rc=$?
while [ "$rc" = 3 ]; do
  stop=$("$pc" rebase --status --json --series $s --workdir "$work/room")
  pid=$(printf '%s' "$stop" | python3 -c 'import json,sys; print(json.load(sys.stdin)["stop"]["patch"])')
  "$pc" cleanroom apply --series $m --workdir "$work/moved-room" --upto "$pid" --force > /dev/null
  printf '%s' "$stop" | python3 -c 'import json,sys; print("\n".join(json.load(sys.stdin)["stop"]["files"]))' | while read -r f; do
    echo "== taking $f from the moved copy at $pid" >> "$out/rebase.txt"; cp "$work/moved-room/$f" "$work/room/$f"; done
  rc=0; /usr/bin/time -f "wall %e s" -a -o "$out/rebase.txt" "$pc" rebase --continue --series $s --workdir "$work/room" >> "$out/rebase.txt" 2>&1 || rc=$?
done
echo "rebase exit $rc" >> "$out/rebase.txt"
"$pc" verify --all --series $s --workdir "$work/room" > "$out/verify.txt" 2>&1 || echo "verify exit $?" >> "$out/verify.txt"
for f in $s/*.patch; do n=$(basename "$f"); cmp -s "$f" "$m/$n" && echo "$n identical to the moved copy" || echo "$n differs from the moved copy"; done > "$out/compare.txt"
