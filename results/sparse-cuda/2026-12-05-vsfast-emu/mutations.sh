#!/usr/bin/env bash
# Shows that the harness fails on wrong kernels: two deliberate mistakes in the emulated sparse-vs.cu, each run on the
# `quick` cases. Usage: mutations.sh SRC BUILD OUTDIR (after run.sh made OUTDIR/sparse-vs-emu.cpp)
set -uo pipefail
src=$1 build=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
mutate() {  # mutate NAME OLD NEW
  python3 - "$out/sparse-vs-emu.cpp" "$out/$1.cpp" "$2" "$3" <<'PY'
import sys
s = open(sys.argv[1]).read()
assert s.count(sys.argv[3]) == 1, sys.argv[3]
open(sys.argv[2], 'w').write(s.replace(sys.argv[3], sys.argv[4]))
PY
  g++ -std=c++20 -O1 -I"$src/ggml/include" -I"$src/ggml/src" -I"$here" -o "$out/h_$1" "$here/harness.cpp" "$out/$1.cpp" \
    -L"$build/bin" -lggml -lggml-base -lggml-cpu -Wl,-rpath,"$build/bin" -lpthread
  echo "== $1: '$2' -> '$3'"
  "$out/h_$1" quick
  echo "rc=$? (1 = the harness caught it)"
}
mutate tie-rank '(eq && rank < n_eq)' '(eq && rank <= n_eq)'
mutate tail 'if (threadIdx.x < 8 ? j < a0 : j < n_kv) {' 'if (threadIdx.x < 8 ? j < a0 : j < n_kv - 1) {'
