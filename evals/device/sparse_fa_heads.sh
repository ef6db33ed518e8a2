#!/usr/bin/env bash
# Device: CUDA sparse flash attention at head sizes 64 and 128 (0095-cuda-sparse-fa-heads), in ONE call after
# start_build.sh + wait_build.sh (the build has test-backend-ops; ~5 min):
#   1. test-backend-ops test -o FLASH_ATTN_EXT -p vs_budget: one KV group under a vertical-slash mask at every sparse
#      tile of head sizes 64/128 (and one where the bound keeps it dense), CUDA0 vs CPU
#   2. test -o FLASH_ATTN_EXT_LSE -p 'n_kv_max=[1-9]': the LSE op on the sparse kernels (DCA's regimes)
#   3. test -o FLASH_ATTN_EXT,FLASH_ATTN_EXT_LSE: every case, so the dense kernels are seen unchanged
#   4. perf -o FLASH_ATTN_EXT -p vs_budget=7096: dense (n_kv_max=0) vs sparse (n_kv_max=7096) under the same mask,
#      Qwen2.5-0.5B shape (head 64, GQA 7) at 32k-1M keys, head 128 with GQA 4 (32k-512k) and 7 (128k-512k)
# Raw output -> $OUT/sparse-fa-heads-*.txt (5 files); exit 1 when a step fails.
set -uo pipefail
source evals/device/common.sh
b=$W/build
bin=$b/bin/test-backend-ops
[ -x "$bin" ] || { echo "missing $bin (run start_build.sh, then wait_build.sh)"; exit 2; }
rc=0
step() {  # step NAME CMD... ; raw output to $OUT/sparse-fa-heads-NAME.txt, its tail on stdout
  local name=$1; shift
  echo "== $name: $*"
  "$@" > "$OUT/sparse-fa-heads-$name.txt" 2>&1 || rc=1
  grep -E "tests passed|FAIL|error" "$OUT/sparse-fa-heads-$name.txt" | tail -4
}
step vs "$bin" test -b CUDA0 -o FLASH_ATTN_EXT -p 'vs_budget'
step lse "$bin" test -b CUDA0 -o FLASH_ATTN_EXT_LSE -p 'n_kv_max=[1-9]'
step all "$bin" test -b CUDA0 -o FLASH_ATTN_EXT,FLASH_ATTN_EXT_LSE
step perf "$bin" perf -b CUDA0 -o FLASH_ATTN_EXT -p 'vs_budget=7096'
grep -E "us/run" "$OUT/sparse-fa-heads-perf.txt" | sed -E 's/ +/ /g' | tee "$OUT/sparse-fa-heads-perf-summary.txt"
exit $rc
