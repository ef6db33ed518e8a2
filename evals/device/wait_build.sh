#!/usr/bin/env bash
# Device: wait (at most $1 seconds) for the background build; copy its manifest/log tail to $OUT.
set -uo pipefail
source evals/device/common.sh
limit=${1:-500}; t=0
while [ ! -f "$W/build.rc" ] && [ "$t" -lt "$limit" ]; do sleep 10; t=$((t+10)); done
tail -c 3000 "$W/build.log" | tr '\r' '\n' | tail -15
if [ -f "$W/build.rc" ]; then
  echo "build rc=$(cat "$W/build.rc")"; cp "$W/build.json" "$OUT/build-cuda.json"
  true
else echo "build still running after ${limit}s"; fi
