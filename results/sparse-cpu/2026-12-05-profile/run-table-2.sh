# after the 16k run of run-table.sh (the load rose to 190-280 from other work, so the plan was cut to
# 32k x 1 and 64k x 1 first, then a second 32k repetition while time allowed)
set -x
cd /work/wt-cpusparse
while kill -0 28707 2>/dev/null; do sleep 5; done
COMMON="--bin /work/rooms-cpusparse/build/bin --work /work/rooms-cpusparse/models --gguf-py /work/rooms-cpusparse/tree/gguf-py --threads 2 --tree 49f6a15efec550c74bca08b24c0d61c14dfd55eb --stop-at 1796490720"
ARMS="--arms dense-plain,dense-dca,sparse-plain-low,sparse-dca-low"
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON $ARMS --contexts 32768 --reps 1 --out /work/rooms-cpusparse/out/table-32k.json
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON $ARMS --contexts 65536 --reps 1 --out /work/rooms-cpusparse/out/table-64k.json
uptime
ARMS="--arms sparse-dca-low,sparse-plain-low,dense-dca,dense-plain"
python3 evals/dca/sparse_cpu_table.py run $COMMON $ARMS --contexts 32768 --reps 1 --out /work/rooms-cpusparse/out/table-32k-rep2.json
uptime
