#!/usr/bin/env bash
# Device: the sparse prefill speed table. One llama-bench prefill of N tokens (no decode) on the
# model of CELL (evals/dca/shape_matrix.py --matrix sparse: qwen2.5-0.5b/f16, the default, or
# qwen3-next-attn/f16; random weights, f16 KV), one process alone on the GPU, for each arm:
#   dca-dense (--dca on), dca-sparse (--dca on --sparse-prefill on), plain-dense, plain-sparse,
# with the published defaults (vertical 1000, slash 6096, threshold 32768, last_q 64).
# Each run is capped at CAP_S seconds (a capped run is recorded with rc 124 and its wall time).
# GPU memory: nvidia-smi samples memory.used every 200 ms during each run; the row keeps the peak and
# the reading before the run (the card is otherwise idle: one process alone on the GPU).
# After start_build.sh + gen_models.sh (the model) and wait_build.sh.
# -> $OUT/sparse-speed-$TAG.jsonl (one JSON line per run: the command, rc, wall, llama-bench's avg_ns,
#    gpu_mem_idle_mib / gpu_mem_peak_mib)
# usage: SIZES="32768 131072" ARMS="dca-dense dca-sparse" [CELL=...] [CAP_S=300] [UB=2048] [TAG=a]
#        bash evals/device/sparse_speed.sh
set -uo pipefail
source evals/device/common.sh
bin="$(build_dir)bin"
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cell=${CELL:-qwen2.5-0.5b/f16}
model=$(python3 evals/dca/shape_matrix.py path --matrix sparse --work "$W/shapes" --gguf-py "$CR/gguf-py" --cells "$cell" | tail -1)
tree=$(cd "$CR" 2>/dev/null && git rev-parse --short=8 HEAD 2>/dev/null || echo unknown)
out="$OUT/sparse-speed-${TAG:-a}.jsonl"
ub=${UB:-2048}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
for n in ${SIZES:-32768 131072}; do
  for arm in ${ARMS:-dca-dense dca-sparse plain-dense plain-sparse}; do
    case $arm in
      dca-dense)    flags=(-dca 1 -sparse 0) ;;
      dca-sparse)   flags=(-dca 1 -sparse 1) ;;
      plain-dense)  flags=(-dca 0 -sparse 0) ;;
      plain-sparse) flags=(-dca 0 -sparse 1) ;;
      *) echo "unknown arm $arm"; exit 2 ;;
    esac
    # llama-bench's warmup is a whole second prefill: kept below 128k (kernel and graph set-up would
    # otherwise count), skipped from 128k on, where it would double a run of minutes
    warm=(); [ "$n" -ge 131072 ] && warm=(--no-warmup)
    cmd=("$bin/llama-bench" -m "$model" -fa 1 -ngl 99 -p "$n" -n 0 -r 1 -ub "$ub" -b "$ub" "${flags[@]}" "${warm[@]}" -o json)
    rm -f "$W/sp.json" "$W/sp.err" "$W/sp.mem"
    idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$W/sp.mem" 2>/dev/null &
    smi=$!
    s=$(date +%s.%N)
    timeout "${CAP_S:-300}" "${cmd[@]}" > "$W/sp.json" 2> "$W/sp.err"; rc=$?
    e=$(date +%s.%N)
    kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
    W="$W" python3 - "$out" "$n" "$arm" "$rc" "$s" "$e" "$tree" "$gpu" "${cmd[*]}" "$cell" "$idle" <<'EOF'
import json, os, sys
from pathlib import Path
out, n, arm, rc, s, e, tree, gpu, cmd, cell, idle = sys.argv[1:]
row = {"cell": cell, "n": int(n), "arm": arm, "rc": int(rc), "wall_s": round(float(e) - float(s), 2), "tree": tree,
       "gpu": gpu, "command": cmd, "avg_ns": None}
mp = Path(os.environ["W"]) / "sp.mem"
mem = [int(x) for x in mp.read_text().split() if x.isdigit()] if mp.exists() else []
row["gpu_mem_idle_mib"] = int(idle) if idle.strip().isdigit() else None
row["gpu_mem_peak_mib"] = max(mem) if mem else None
p = Path(os.environ["W"]) / "sp.json"
try:
    runs = json.loads(p.read_text())
    row["avg_ns"] = runs[0]["avg_ns"]
    row["prefill_s"] = round(runs[0]["avg_ns"] / 1e9, 3)
except (ValueError, IndexError, KeyError, OSError):
    err = (Path(os.environ["W"]) / "sp.err").read_text(errors="replace").splitlines()[-3:]
    row["stderr_tail"] = err
with open(out, "a") as f:
    f.write(json.dumps(row) + "\n")
print(json.dumps(row))
EOF
  done
done
