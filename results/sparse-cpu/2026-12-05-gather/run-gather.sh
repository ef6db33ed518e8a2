set -x
cd /work/wt-sparsefa
COMMON="--bin /work/rooms-sparsefa/build/bin --work /work/rooms-sparsefa/models --gguf-py /work/rooms-sparsefa/room/gguf-py --threads 2 --tree e0d602a5ce29c81489fe277d18af295040edcead --stop-at 1796480520"
ARMS="--arms dense-plain,dense-dca,sparse-plain-low,sparse-dca-low"
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON $ARMS --contexts 16384 --reps 2 --out /work/rooms-sparsefa/out/table-16k.json
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON $ARMS --contexts 32768 --reps 2 --out /work/rooms-sparsefa/out/table-32k.json
uptime
