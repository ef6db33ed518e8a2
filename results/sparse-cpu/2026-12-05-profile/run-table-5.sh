# the machine went quiet (load ~2) at 17:02: a third 16k repetition and a second 64k one, arms in the reverse order,
# while time allowed
set -x
cd /work/wt-cpusparse
COMMON="--bin /work/rooms-cpusparse/build/bin --work /work/rooms-cpusparse/models --gguf-py /work/rooms-cpusparse/tree/gguf-py --threads 2 --tree 49f6a15efec550c74bca08b24c0d61c14dfd55eb --stop-at 1796490780"
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON --arms sparse-dca-low,sparse-plain-low,dense-dca,dense-plain --contexts 16384 --reps 1 --out /work/rooms-cpusparse/out/table-16k-rep3.json
uptime
python3 evals/dca/sparse_cpu_table.py run $COMMON --arms sparse-dca-low,dense-dca,sparse-plain-low,dense-plain --contexts 65536 --reps 1 --out /work/rooms-cpusparse/out/table-64k-rep2.json
uptime
