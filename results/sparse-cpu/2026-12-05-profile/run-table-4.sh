# after run-table-3.sh (64k): the second 32k repetition, arms in the reverse order, while time allowed
set -x
cd /work/wt-cpusparse
while kill -0 14583 2>/dev/null; do sleep 5; done
COMMON="--bin /work/rooms-cpusparse/build/bin --work /work/rooms-cpusparse/models --gguf-py /work/rooms-cpusparse/tree/gguf-py --threads 2 --tree 49f6a15efec550c74bca08b24c0d61c14dfd55eb --stop-at 1796490840"
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON --arms sparse-dca-low,sparse-plain-low,dense-dca,dense-plain --contexts 32768 --reps 1 --out /work/rooms-cpusparse/out/table-32k-rep2.json
uptime
