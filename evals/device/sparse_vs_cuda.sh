#!/usr/bin/env bash
# Device: sparse prefill's selection on CUDA (0093-ggml-sparse-vs), in ONE call after start_build.sh +
# wait_build.sh (the build has test-backend-ops; ~3 min):
#   1. test-backend-ops test -o SPARSE_VS_ACC / SPARSE_VS_MASK / SPARSE_VS_SELECT: CUDA0 vs CPU (scores by NMSE; the
#      masks and selections exactly, every -inf where the CPU has one); then flash attention under a selection
#      (0097-sparse-vs-index-lists: the cases with vertical= in their name, CUDA's sparse kernel from 16384 keys)
#   2. test_sparse_vs.py on CUDA0: the graph llama_sparse_select builds (LSE, chunked scores, the two ops) vs the
#      float64 reference of the per-KV-group method (scores held to the type CUDA multiplies in: f16 for f32 keys)
#   3. test_sparse_prefill.py: sparse prefill of the tiny models with every layer on the GPU vs the float64 reference
#      (near ties within the GPU's rounding gap compared under the side the GPU took, found by matching)
#   4. perf: one KV group's selection (ACC over the window, MASK) beside its dense flash attention over the same
#      window, its LSE and one score chunk (the cases make_test_cases_perf lists under 0093-ggml-sparse-vs); and the
#      Qwen2.5-0.5B shape (7 query heads of 64 on one KV head, 2048-token ubatch) at 131072, 524288 and 1048576
#      keys: ACC over one 37376-key chunk, MASK over the window, the group's dense flash attention (causal mask)
# Raw output -> $OUT/sparse-vs-*.txt (6 files); exit 1 when a step fails.
set -uo pipefail
source evals/device/common.sh
b=$W/build
bin=$b/bin/test-backend-ops
[ -x "$bin" ] || { echo "missing $bin (run start_build.sh, then wait_build.sh)"; exit 2; }
export PATCHCTL_DCA_SRC=$CR PATCHCTL_DCA_BUILD=$b PATCHCTL_DCA_TOOL_ARGS="-ngl 99"
rc=0
step() {  # step NAME CMD... ; raw output to $OUT/sparse-vs-NAME.txt, its tail on stdout
  local name=$1; shift
  echo "== $name: $*"
  "$@" > "$OUT/sparse-vs-$name.txt" 2>&1 || rc=1
  grep -E "tests passed|FAIL|passed|failed|error" "$OUT/sparse-vs-$name.txt" | tail -4
}
step ops "$bin" test -b CUDA0 -o SPARSE_VS_ACC,SPARSE_VS_MASK,SPARSE_VS_SELECT
step fa-sel "$bin" test -b CUDA0 -o FLASH_ATTN_EXT,FLASH_ATTN_EXT_LSE -p 'vertical='
step probe env PATCHCTL_SPARSE_VS_BACKEND=CUDA0 python3 -m pytest -q -p no:cacheprovider tests/evals/dca/test_sparse_vs.py
step prefill python3 -m pytest -q -p no:cacheprovider tests/evals/dca/test_sparse_prefill.py
step perf "$bin" perf -b CUDA0 -o SPARSE_VS_ACC,SPARSE_VS_MASK,FLASH_ATTN_EXT,FLASH_ATTN_EXT_LSE,MUL_MAT \
  -p '(n_kv=(32768|131072),T=512|hsk=128,hsv=128,nh=1,nr23=\[4,1\],kv=(32768|131072),nb=(64|512),mask=1,sinks=0|type_a=f16,type_b=f32,m=65536,n=256,k=128|T=2048,n_rows=2048|causal=1)'
grep -E "us/run" "$OUT/sparse-vs-perf.txt" | sed -E 's/ +/ /g' | tee "$OUT/sparse-vs-perf-summary.txt"
exit $rc
