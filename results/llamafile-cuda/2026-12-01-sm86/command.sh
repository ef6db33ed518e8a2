# the whole run, as executed (a wrapper that timed it; its exit status and wall time follow)
#!/bin/sh
cd /work/wt/llamafile20 || exit
export LIBRARY_PATH=/tmp/lf20/stubs PATH=/tmp/lf20/cuobjdump/nvidia/cu13/bin:$PATH
start=$(date +%s)
nice -n 10 .venv/bin/patchctl build --workdir /tmp/lf20/cr/lf --only cuda --cuda sm_86 -j 2 --json > /tmp/lf20/bench/build-cuda.json 2> /tmp/lf20/bench/stderr.log
echo "rc=$? wall=$(( $(date +%s) - start ))" > /tmp/lf20/bench/rc
# -> rc=0 wall=4584
