#!/usr/bin/env bash
# Device: the CUDA-graph crash DCA once caused. Runs tests/evals/dca/test_dca_graphs.py on the GPU: the crashing tiny
# qwen2 (2 layers, 4 heads, 2 KV heads, head dim 64), 1400 prompt tokens + 160 decoded ones across a chunk boundary,
# -c 2048 -b 512, --dca-chunk-size 320 --dca-local-window 64, every layer on the GPU (-ngl 99), for -ub 32/96/128/200/512
# x KV f32/f16 with FA off and f32/f16/q8_0 with FA on (25 cases; the crash was -ub 128, f32, FA off). Each
# case: CUDA graphs on (the default) must give the logits of GGML_CUDA_DISABLE_GRAPHS=1 bit for bit and of
# LLAMA_GRAPH_REUSE_DISABLE=1 bit for bit, and stay within 3x the same build's plain-attention error of the float64
# reference. Needs the clean room + build of start_build.sh (the dca_logits tool is compiled here against it).
# ~4 min. Output: $OUT/dca-cuda-graphs.txt (pytest -rA: one line per case).
set -uo pipefail
source evals/device/common.sh
export PATCHCTL_DCA_SRC=$CR PATCHCTL_DCA_BUILD=$W/build PATCHCTL_DCA_TOOL_ARGS="-ngl 99"
export PATCHCTL_UPSTREAM_SRC=$CR PATCHCTL_UPSTREAM_BUILD=$W/build   # unused by these tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/dca-cuda-graphs-gpu.txt" 2>&1
python3 -m pytest -q -rA -p no:cacheprovider tests/evals/dca/test_dca_graphs.py > "$OUT/dca-cuda-graphs.txt" 2>&1
rc=$?
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" "$OUT/dca-cuda-graphs.txt" | tail -30
exit $rc
