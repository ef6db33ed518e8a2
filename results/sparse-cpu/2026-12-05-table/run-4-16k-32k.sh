set -x
while kill -0 4470 2>/dev/null; do sleep 5; done
cd /work/wt-sparsecpu
COMMON="--bin /work/main/cleanroom/llamafile.builds/ecbda0b77cfbe56fec3da5515b09bae650a87dfc-85021e1e321e/bin --work /work/rooms-sparsecpu/models --gguf-py /work/main/cleanroom/llamafile/gguf-py --threads 2 --tree ecbda0b77cfbe56fec3da5515b09bae650a87dfc --stop-at 1796471580"
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON --contexts 16384 --reps 3 --out /work/rooms-sparsecpu/out/table-16k-b.json
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON --contexts 32768 --reps 1 --out /work/rooms-sparsecpu/out/table-32k-b.json
uptime
