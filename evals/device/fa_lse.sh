#!/usr/bin/env bash
# Device (H200): GGML_OP_FLASH_ATTN_EXT_LSE correctness and cost.
# usage: fa_lse.sh BUILD_DIR      BUILD_DIR = a built CUDA tree of the patched llama.cpp (bin/test-backend-ops)
# Raw output -> $OUT/fa-lse-*.txt (or ./fa-lse-out when $OUT is unset); a summary goes to stdout.
#   1. test -o FLASH_ATTN_EXT_LSE : CUDA0 vs CPU for every LSE case (vec, tile, mma np==1/np>1,
#      parallel-block combine, stream-k fixups, KV_max; fully masked rows; DCA-like masks)
#   2. test -o FLASH_ATTN_EXT_LSE_MERGE : the DCA merge of two LSE results (rows empty in one or both halves)
#      test -o FLASH_ATTN_EXT     : regression of the unchanged op
#   3. perf FLASH_ATTN_EXT vs FLASH_ATTN_EXT_LSE: hs 128, 32 Q heads / 8 KV heads, f16 K/V,
#      kv 4096 / 32768 / 131072, batch 1 and 512 (the pairs added in make_test_cases_perf)
set -uo pipefail
b=${1:?usage: fa_lse.sh BUILD_DIR}
bin="$b/bin/test-backend-ops"
out=${OUT:-$PWD/fa-lse-out}
mkdir -p "$out"
[ -x "$bin" ] || { echo "missing $bin"; exit 2; }

perf_params='hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=(4096|32768|131072),nb=(1|512),mask=1,sinks=0,max_bias=0\.000000,logit_softcap=0\.000000,prec=f32,type_K=f16,type_V=f16,permute=\[0,1,2,3\],kv_view=1,v_is_view_of_k=0,n_kv_max=0'

rc=0
run() {  # run NAME ARGS... ; raw output to $out/fa-lse-NAME.txt
  local name=$1; shift
  echo "== $name: test-backend-ops $*"
  "$bin" "$@" > "$out/fa-lse-$name.txt" 2>&1
  local r=$?
  echo "   rc=$r"; grep -E "tests passed|Backend CUDA0|FAIL" "$out/fa-lse-$name.txt" | grep -v "^ *$" | head -20
  return $r
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$out/fa-lse-gpu.txt" 2>&1
run test-lse  test -b CUDA0 -o FLASH_ATTN_EXT_LSE || rc=1
run test-merge test -b CUDA0 -o FLASH_ATTN_EXT_LSE_MERGE || rc=1
run perf-fa   perf -b CUDA0 -o FLASH_ATTN_EXT     -p "$perf_params"                     || rc=1
run perf-lse  perf -b CUDA0 -o FLASH_ATTN_EXT_LSE -p "$perf_params,mask_mode=plain"     || rc=1
run test-fa   test -b CUDA0 -o FLASH_ATTN_EXT     || rc=1

# side by side: us/run of FA vs FA+LSE for the same shape
python3 - "$out/fa-lse-perf-fa.txt" "$out/fa-lse-perf-lse.txt" <<'PY' | tee "$out/fa-lse-perf-summary.txt"
import re, sys
def load(path):
    rows = {}
    for line in open(path, errors="replace"):
        m = re.search(r"kv=(\d+),nb=(\d+),.*?(\d+(?:\.\d+)?) us/run", line)
        if m:
            rows[(int(m.group(1)), int(m.group(2)))] = float(m.group(3))
    return rows
fa, lse = load(sys.argv[1]), load(sys.argv[2])
print(f"{'kv':>7} {'nb':>4} {'FA us/run':>11} {'LSE us/run':>11} {'LSE/FA':>7}")
for key in sorted(set(fa) | set(lse)):
    a, b = fa.get(key), lse.get(key)
    ratio = f"{b / a:7.3f}" if a and b else "    n/a"
    print(f"{key[0]:>7} {key[1]:>4} {a if a else float('nan'):>11.1f} {b if b else float('nan'):>11.1f} {ratio}")
PY
exit $rc
