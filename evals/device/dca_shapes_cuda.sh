#!/usr/bin/env bash
# Device: the DCA configuration tests on CUDA, every layer on the GPU (-ngl 99), with the GPU tolerances of
# model_runs.tolerance (3x the same build's plain-attention error):
#  - test_dca_shapes.py: production chunk shapes (chunk_size 320 / 576, local window 64, i.e. chunk_len 256 / 512;
#    1316 tokens, prefill ubatches of 128 and decode steps across chunk boundaries) vs the float64 reference, and the
#    plans the ubatches took read from the debug log: windows without a mask, the merged successive+inter call and
#    decoded tokens with two regimes (the one-launch vector kernel on CUDA);
#  - test_dca_config.py: defaults, mscale, YaRN priority, non-causal batches, --split-mode tensor refusal and the
#    compute buffer never outgrowing its reservation with 4 interleaved sequences (llama-server's slots).
# The deliberate-mistake checks are CPU-only (ON_GPU). Needs the clean room + build from start_build.sh
# (~2.5 min). Prints the pytest summary; the full output goes to $OUT/dca-shapes-cuda.txt.
set -uo pipefail
source evals/device/common.sh
export PATCHCTL_DCA_SRC=$CR PATCHCTL_DCA_BUILD=$W/build PATCHCTL_DCA_TOOL_ARGS="-ngl 99"
export PATCHCTL_UPSTREAM_SRC=$CR PATCHCTL_UPSTREAM_BUILD=$W/build   # unused by the selected tests
python3 -m pytest -q -p no:cacheprovider --durations=5 tests/evals/dca/test_dca_shapes.py tests/evals/dca/test_dca_config.py \
  > "$OUT/dca-shapes-cuda.txt" 2>&1
rc=$?
tail -25 "$OUT/dca-shapes-cuda.txt"
exit $rc
