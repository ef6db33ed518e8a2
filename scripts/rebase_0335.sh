#!/usr/bin/env bash
# Redo patches/llamafile-0.3.35: the shipped series (patches/llamafile) rebased with patchctl onto
# the llama.cpp vendored in llama-cpp-python 0.3.35, its conflicts resolved by replaying the
# recorded resolutions (patches/llamafile-0.3.35/resolutions.diff), then verified and built for the
# CPU. Run from the project root after 0078-dca changed; docs/UPSTREAM_SYNC.md says what each
# resolution does ("0078-dca onto llama-cpp-python 0.3.35").
#
#   1. the series directory becomes a fresh copy of patches/llamafile (ABOUT.md and
#      resolutions.diff kept) and `patchctl docs` gives it its own generated docs (a copy
#      carries the original's README and has no registry section: verify would say stale);
#   2. `patchctl cleanroom apply` puts cleanroom/llamafile-0.3.35 on the copy's pin (0.3.36 + the
#      series; the rebase starts from there), then `patchctl rebase --onto llama-cpp-python==0.3.35`
#      stops at the conflicts (exit 3);
#   3. resolutions.diff (from the conflict blocks and 0.3.36-only code git's merge leaves, to the
#      resolved files) is applied to the clean room with patch(1). When 0078-dca changed where a
#      resolution applies, patch refuses (nothing is changed): resolve the conflict blocks in
#      cleanroom/llamafile-0.3.35 by hand, as the sync log describes, run the rest of this script
#      with SKIP_TO=continue, and refresh resolutions.diff (see REFRESH below);
#      (Should the rebase not stop at all, the 0.3.36-only code the diff also fixes is still in the
#      patch: the CPU build of step 4 names it; fix it in the clean room and `patchctl refresh`.)
#   4. `patchctl rebase --continue`, `patchctl verify --all`, and the CPU build of the libraries and
#      test-backend-ops (ccache), at most JOBS (default 2) compile jobs.
#
# REFRESH: to record new resolutions, run steps 1-2 into a scratch series/clean room
# (`--series DIR --workdir ROOM`) and `diff -u --label a/F --label b/F ROOM/F cleanroom/llamafile-0.3.35/F`
# for every file the old resolutions.diff names plus the ones you edited.
set -euo pipefail
pc=${PATCHCTL:-.venv/bin/patchctl}
series=patches/llamafile-0.3.35
room=cleanroom/llamafile-0.3.35
jobs=${JOBS:-2}
keep=$(mktemp -d)
trap 'rm -rf "$keep"' EXIT

if [ "${SKIP_TO:-}" != continue ]; then
  for f in ABOUT.md resolutions.diff; do cp "$series/$f" "$keep/$f"; done
  rm -rf "$series" && cp -r patches/llamafile "$series"
  cp "$keep/ABOUT.md" "$keep/resolutions.diff" "$series/"
  echo "== patchctl docs --series $series (the copy's own README and registry section)"
  "$pc" docs --series "$series"
  echo "== patchctl cleanroom apply --series $series (the room back on the copy's 0.3.36 pin)"
  "$pc" cleanroom apply --series "$series"
  echo "== patchctl rebase --onto llama-cpp-python==0.3.35 --series $series"
  rc=0; "$pc" rebase --onto llama-cpp-python==0.3.35 --series "$series" || rc=$?
  if [ "$rc" = 3 ]; then
    echo "== replaying $series/resolutions.diff in $room"
    patch -d "$room" -p1 --dry-run -s < "$series/resolutions.diff" \
      || { echo "resolutions.diff does not apply: resolve by hand in $room, then SKIP_TO=continue $0" >&2; exit 3; }
    patch -d "$room" -p1 --no-backup-if-mismatch -s < "$series/resolutions.diff"
  elif [ "$rc" != 0 ]; then
    exit "$rc"
  fi
fi
if [ "${rc:-3}" = 3 ]; then  # stopped at the conflicts (or SKIP_TO=continue): take the resolved tree
  if grep -rlsI '^<<<<<<< patchctl/merge/' "$room" --include='*.c*' --include='*.h*' --include='*.txt' >/dev/null; then
    echo "conflict markers left in $room" >&2; exit 3
  fi
  echo "== patchctl rebase --continue --series $series"
  "$pc" rebase --continue --series "$series"
fi
echo "== patchctl verify --all --series $series"
"$pc" verify --all --series "$series"
echo "== patchctl build --series $series (CPU, -j $jobs)"
nice -n 10 "$pc" build --series "$series" --launcher ccache -j "$jobs" \
  --build-dir "$room.builds/dev" -t ggml -t llama -t llama-common -t test-backend-ops
