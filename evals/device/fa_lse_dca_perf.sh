#!/usr/bin/env bash
# Device: cost of DCA's fully visible windows on CUDA: FLASH_ATTN_EXT_LSE WITHOUT a mask (the grouped-query MMA
# tiles the patch allows for it) vs upstream FLASH_ATTN_EXT with the plain mask, SmolLM2-like (head size 64, 3 KV
# heads, GQA 3) and Gemma-3-like (head size 256, 1 KV head, GQA 4) shapes, kv 32k / 128k, batch 1 and 512.
# usage: fa_lse_dca_perf.sh BUILD_DIR   -> $OUT/fa-lse-dca-perf.txt (raw perf lines + the side-by-side table)
set -uo pipefail
b=${1:?usage: fa_lse_dca_perf.sh BUILD_DIR}
bin="$b/bin/test-backend-ops"
out=${OUT:-$PWD/fa-lse-out}/fa-lse-dca-perf.txt
shapes='hsk=(64|256),hsv=(64|256),nh=(3|1),nr23=\[(3|4),1\],kv=(32768|131072),nb=(1|512)'
{
  "$bin" perf -b CUDA0 -o FLASH_ATTN_EXT -p "$shapes,mask=1"
  "$bin" perf -b CUDA0 -o FLASH_ATTN_EXT_LSE -p "$shapes,mask=(0|1),.*mask_mode=(plain|rand)"
} > "$out" 2>&1
python3 - "$out" <<'PY' | tee -a "$out"
import re, sys
rows = {}
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"^\s*(FLASH_ATTN_EXT(?:_LSE)?)\(hsk=(\d+),.*?kv=(\d+),nb=(\d+),mask=(\d).*?(\d+(?:\.\d+)?) us/run", line)
    if m:
        op, hs, kv, nb, mask, us = m.groups()
        rows[(int(hs), int(kv), int(nb), op, int(mask))] = float(us)
print(f"{'hs':>4} {'kv':>7} {'nb':>4} {'FA+mask':>9} {'LSE+mask':>9} {'LSE nomask':>10} {'nomask/FA':>9}")
for hs, kv, nb in sorted({k[:3] for k in rows}):
    fa, lm, ln = (rows.get((hs, kv, nb, op, m)) for op, m in
                  (("FLASH_ATTN_EXT", 1), ("FLASH_ATTN_EXT_LSE", 1), ("FLASH_ATTN_EXT_LSE", 0)))
    r = f"{ln / fa:9.3f}" if fa and ln else "      n/a"
    f = lambda x: f"{x:9.1f}" if x else "      n/a"
    print(f"{hs:>4} {kv:>7} {nb:>4} {f(fa)} {f(lm)} {f(ln):>10} {r}")
PY
