#!/usr/bin/env bash
# Runs 0093's CUDA kernels (ggml/src/ggml-cuda/sparse-vs.cu of a patched tree) emulated on the host against the
# CPU ops. Usage: run.sh SRC BUILD OUTDIR [acc|mask|align|quick]   (SRC: the patched tree, BUILD: its CPU cmake build)
set -euo pipefail
src=$1 build=$2 out=$3 which=${4:-all}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
python3 "$here/prep.py" "$src/ggml/src/ggml-cuda/sparse-vs.cu" "$out/sparse-vs-emu.cpp"
g++ -std=c++20 -O1 -I"$src/ggml/include" -I"$src/ggml/src" -I"$here" -o "$out/harness" "$here/harness.cpp" \
  "$out/sparse-vs-emu.cpp" -L"$build/bin" -lggml -lggml-base -lggml-cpu -Wl,-rpath,"$build/bin" -lpthread
"$out/harness" "$which"
