set -x
cd /work/wt-sparsecpu
COMMON="--bin /work/main/cleanroom/llamafile.builds/ecbda0b77cfbe56fec3da5515b09bae650a87dfc-85021e1e321e/bin --work /work/rooms-sparsecpu/models --gguf-py /work/main/cleanroom/llamafile/gguf-py --threads 2 --tree ecbda0b77cfbe56fec3da5515b09bae650a87dfc --stop-at 1796472120"
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON --contexts 65536 --reps 2 --arms dense-plain,dense-dca,sparse-plain,sparse-dca --out /work/rooms-sparsecpu/out/table-64k.json
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON --contexts 32768 --reps 2 --out /work/rooms-sparsecpu/out/table-32k.json
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON --contexts 16384 --reps 2 --out /work/rooms-sparsecpu/out/table-16k-b.json
uptime
