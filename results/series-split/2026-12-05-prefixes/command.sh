#!/usr/bin/env bash
# The every-prefix run as it ran (from the repository root, on the branch that added it).
set -uo pipefail
out=$(pwd)/results/series-split/2026-12-05-prefixes
PATH=$(pwd)/.venv/bin:$PATH PREFIX_CHECKS_OUT=$out/checks.jsonl \
  .venv/bin/patchctl check-prefixes --series patches/llamafile --workdir /work/rooms-series31/llamafile \
  --launcher ccache -j 2 --cpu portable -D GGML_RPC=ON \
  -t ggml -t llama -t llama-common -t llama-completion -t llama-server -t llama-bench \
  -t test-backend-ops -t ggml-rpc-server \
  --keep-going --run "bash $(pwd)/scripts/prefix_checks.sh" --json > $out/check-prefixes.json
