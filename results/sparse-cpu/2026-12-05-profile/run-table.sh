set -x
cd /work/wt-cpusparse
COMMON="--bin /work/rooms-cpusparse/build/bin --work /work/rooms-cpusparse/models --gguf-py /work/rooms-cpusparse/tree/gguf-py --threads 2 --tree 49f6a15efec550c74bca08b24c0d61c14dfd55eb --stop-at 1796490720"
ARMS="--arms dense-plain,dense-dca,sparse-plain-low,sparse-dca-low"
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON $ARMS --contexts 16384 --reps 2 --out /work/rooms-cpusparse/out/table-16k.json
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON $ARMS --contexts 32768 --reps 2 --out /work/rooms-cpusparse/out/table-32k.json
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON $ARMS --contexts 65536 --reps 1 --out /work/rooms-cpusparse/out/table-64k.json
uptime
