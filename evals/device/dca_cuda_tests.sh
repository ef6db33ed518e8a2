#!/usr/bin/env bash
# Device: the DCA model-level equivalences on CUDA: every layer on the GPU (-ngl 99),
# chunk >= sequence equals plain, multi-chunk (exact fallback and FA) vs the float64 reference,
# split decode equals one-shot, with the GPU tolerances of test_dca_model.py (ON_GPU: 3x the same
# build's plain-attention error). Needs the clean room + build from start_build.sh. Deselected: the
# byte-identity tests (no upstream build on the device), the deliberate-mistake tests (the power of
# the tolerances, shown on the CPU) and chunk>=seq for qwen3moe (no numpy reference to compare with
# on the GPU). Then test_dca_qwen35.py and test_sparse_prefill.py whole.
set -uo pipefail
source evals/device/common.sh
export PATCHCTL_DCA_SRC=$CR PATCHCTL_DCA_BUILD=$W/build PATCHCTL_DCA_TOOL_ARGS="-ngl 99"
export PATCHCTL_UPSTREAM_SRC=$CR PATCHCTL_UPSTREAM_BUILD=$W/build   # unused by the selected tests
python3 -m pytest -q -p no:cacheprovider tests/evals/dca/test_dca_model.py \
  -k "(single_chunk or up_to_chunk or multichunk or seq_rm) and not (up_to_chunk and qwen3moe)" 2>&1 | tee "$OUT/dca-cuda-tests.txt" | tail -15
# Qwen3.5 beyond the logits (recurrent layers untouched, image positions refused) and sparse prefill
# (threshold = off, full budgets = dense, small budgets vs the float64 reference, flag errors)
python3 -m pytest -q -p no:cacheprovider tests/evals/dca/test_dca_qwen35.py tests/evals/dca/test_sparse_prefill.py \
  2>&1 | tee "$OUT/qwen35-sparse-cuda-tests.txt" | tail -15
