#!/usr/bin/env bash
# The CPU build of the rebased series (from the repository root), at the lowest priority so that the
# every-prefix run beside it keeps the CPU.
PATH=$(pwd)/.venv/bin:$PATH nice -n 19 .venv/bin/patchctl build --series patches/llamafile-0.3.35 \
  --workdir /work/rooms-series31/llamafile-0.3.35 --launcher ccache -j 2 --cpu portable -D GGML_RPC=ON \
  -t ggml -t llama -t llama-common -t test-backend-ops --json
