#!/usr/bin/env bash
# Device: put the carried sdist (ferried or split, see README.md) into patchctl's cache, create
# the clean room of the shipped series (`patchctl cleanroom apply`) and start `patchctl build
# --cuda $ARCHS` (default sm_90, the H200; set ARCHS=sm_86,sm_90 for the two-arch build) of the
# targets the device scripts use (llama-server for longctx_run.sh), in the background:
# it outlives this call (setsid) and logs to $W/build.log; wait_build.sh waits for it.
set -euo pipefail
source evals/device/common.sh
install_wheels
mkdir -p "$PATCHCTL_CACHE_DIR/sha256/$SDIST_SHA"
if [ -f "$W/ferried/$SDIST_NAME" ]; then  # rebuilt by ferry_stage (README.md); sha256 checked again
  join_parts "$PATCHCTL_CACHE_DIR/sha256/$SDIST_SHA/$SDIST_NAME" "$SDIST_SHA" "$W/ferried/$SDIST_NAME"
else                                      # or plain split parts, staged
  join_parts "$PATCHCTL_CACHE_DIR/sha256/$SDIST_SHA/$SDIST_NAME" "$SDIST_SHA" "$W"/stage/$SDIST_NAME.0*
  rm -f "$W"/stage/$SDIST_NAME.0*
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -m patchctl cleanroom apply --series patches/llamafile --workdir "$CR" --json | tee "$OUT/cleanroom-apply.json"
cp -r "$PWD" "$W/repo"          # keep the scripts/tests beside the build for later calls
setsid nohup bash -c "cd '$W/repo' && export PYTHONPATH='$PYTHONPATH' PATCHCTL_CACHE_DIR='$PATCHCTL_CACHE_DIR'; \
  python3 -m patchctl build --series patches/llamafile --workdir '$CR' --cuda ${ARCHS:-sm_90} --jobs 16 --build-dir '$W/build' \
    -t llama -t llama-completion -t llama-bench -t test-backend-ops -t llama-server --json \
  > '$W/build.json' 2> '$W/build.log'; echo \$? > '$W/build.rc'" > /dev/null 2>&1 < /dev/null &
sleep 20; tail -3 "$W/build.log"
