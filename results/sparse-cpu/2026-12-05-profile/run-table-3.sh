# run-table-2.sh was stopped after its 32k run (its 64k and second 32k steps never started): with the machine at
# load 12-50 there was time for one 64k pair at most, so the plain-attention pair runs first
set -x
cd /work/wt-cpusparse
while kill -0 5422 2>/dev/null; do sleep 5; done
COMMON="--bin /work/rooms-cpusparse/build/bin --work /work/rooms-cpusparse/models --gguf-py /work/rooms-cpusparse/tree/gguf-py --threads 2 --tree 49f6a15efec550c74bca08b24c0d61c14dfd55eb --stop-at 1796490840"
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON --arms dense-plain,sparse-plain-low,dense-dca,sparse-dca-low --contexts 65536 --reps 1 --out /work/rooms-cpusparse/out/table-64k.json
uptime
