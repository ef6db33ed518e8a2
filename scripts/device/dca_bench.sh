#!/usr/bin/env bash
# Device: DCA on vs off throughput (llama-bench pp512 / tg64 at depth 32k and 128k, FA on, all layers
# on the GPU) and device memory (the buffer sizes llama.cpp logs), same build, same run.
# usage: [R=4] dca_bench.sh MODEL NAME   (raw output -> $OUT/bench-NAME.json, $OUT/mem-NAME.txt)
#   R: llama-bench repetitions per cell (decode varies by a few % between repetitions; -r 2 until the 4th session)
set -uo pipefail
source scripts/device/common.sh
model=$1; name=$2; bin="$(build_dir)bin"
"$bin/llama-bench" -m "$model" -ngl 99 -fa 1 -p 512 -n 64 -d 32768,131072 -dca 0,1 -r "${R:-4}" -o json \
  > "$OUT/bench-$name.json" 2> "$OUT/bench-$name.err"; echo "llama-bench rc=$?"
python3 - "$OUT/bench-$name.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
get = lambda r, k, d=None: r.get(k, d)
for r in rows:
    kind = "pp" if r["n_prompt"] else "tg"
    print(f'{kind}{r["n_prompt"] or r["n_gen"]:<4} d={r["n_depth"]:<7} dca={int(get(r,"dca",0))} {r["avg_ts"]:10.1f} t/s')
PY
for dca in off on; do  # -v: the buffer sizes are info-level log lines
  echo "== mem dca=$dca: llama-completion -m MODEL -ngl 99 -fa on -c 131072 -n 4 -no-cnv -p Hello --dca $dca -v"
  "$bin/llama-completion" -m "$model" -ngl 99 -fa on -c 131072 -n 4 -no-cnv -p "Hello" --dca $dca -v \
    > "$W/mem-$name-$dca.log" 2>&1; echo "llama-completion rc=$?"
  grep -E "buffer size|memory breakdown|CUDA0 \(|Host  " "$W/mem-$name-$dca.log"
done 2>&1 | tee "$OUT/mem-$name.txt"
