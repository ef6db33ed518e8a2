#!/usr/bin/env bash
# device driver for this session (not part of the repo): lead.sh setup | chunk NN... | build | wait N | sh CMD
set -uo pipefail
HERE=$PWD
W=$HOME/lead; mkdir -p $W/stage $W/files
case "$1" in
setup)
  mkdir -p $W/repo && tar xzf .device/dcaint.tgz -C $W/repo
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .device/whl/*.whl 2>&1 | tail -2
  cp .device/fm/manifest.json $W/stage/manifest.json
  python3 -c "import sys; sys.path.insert(0,'/tmp/site'); import pytest, gguf; print('pytest', pytest.__version__, 'gguf ok')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; df -h $HOME | tail -1
  ;;
setup10)  # session 10: binaries built on the CPU machine (patchctl build --cuda sm_90), no sdist
  mkdir -p $W/repo && tar xzf .device/dcaint.tgz -C $W/repo
  [ -d .device/whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .device/whl/*.whl 2>&1 | tail -2
  cp .device/fm/manifest.json $W/stage/manifest.json
  mkdir -p $W/build $W/cr && tar xJf .device/bin10/bin.tar.xz -C $W/build && tar xzf .device/bin10/gguf-py.tgz -C $W/cr
  cp .device/bin10/build.json $W/build.json
  rm -rf $W/drv && cp -r .device/drv $W/drv
  export LD_LIBRARY_PATH=$W/build/bin:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib
  ldd $W/build/bin/libggml-cuda.so | grep -E "not found|cublas|cudart|libcuda"
  cd $W/repo && m=$(python3 scripts/dca_shapes.py path --work $W/shapes --gguf-py $W/cr/gguf-py --cells qwen2.5-0.5b-l4/f16 | tail -1)
  $W/build/bin/llama-bench -m $m -ngl 99 -fa 1 -p 512 -n 16 -r 1 -dca 0,1 2>&1 | tail -4
  if $W/build/bin/llama-bench -m $m -ngl 99 -fa 1 -p 64 -n 4 -r 1 -o json 2>/dev/null | grep -q avg_ts; then echo 0 > $W/build.rc; echo BINARIES OK; else echo BINARIES FAIL; fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; df -h $HOME | tail -1
  ;;
chunk)
  shift
  for n in "$@"; do [ -f .device/ferry/c$n/chunk ] && cp .device/ferry/c$n/chunk $W/stage/c$n; done
  [ -d .device/longctx ] && rm -rf $W/longctx && cp -r .device/longctx $W/longctx
  nice -n 19 python3 scripts/device/ferry.py unpack $W/stage $W/files 2>&1 | grep -v "^missing" | tail -6
  # drop chunks whose files are all complete
  ls $W/stage
  ;;
build)
  cd $W/repo; source scripts/device/common.sh
  rm -f $W/build.rc $W/build.json
  mkdir -p "$PATCHCTL_CACHE_DIR/sha256/$SDIST_SHA"
  cp $W/files/$SDIST_NAME "$PATCHCTL_CACHE_DIR/sha256/$SDIST_SHA/$SDIST_NAME"
  python3 -m patchctl cleanroom apply --series patches/llamafile --workdir "$CR" --json > "$OUT/cleanroom-apply.json" 2>&1; echo "apply rc=$?"; tail -c 600 "$OUT/cleanroom-apply.json"
  setsid nohup bash -c "cd '$W/repo' && export PYTHONPATH='$PYTHONPATH' PATCHCTL_CACHE_DIR='$PATCHCTL_CACHE_DIR'; \
    python3 -m patchctl build --series patches/llamafile --workdir '$CR' --cuda sm_90 --jobs 16 --build-dir '$W/build' \
      -t llama -t llama-common -t llama-completion -t llama-bench -t llama-server -t test-backend-ops --json \
    > '$W/build.json' 2> '$W/build.log'; echo \$? > '$W/build.rc'" > /dev/null 2>&1 < /dev/null &
  sleep 15; tail -3 "$W/build.log"
  ;;
bg)  # bg NAME CMD: run CMD in $W/repo in the background, log to $W/bg-NAME.log, rc to $W/bg-NAME.rc
  name=$2; shift 2
  setsid nohup bash -c "cd '$W/repo' && export OUT='$W/out-$name' && mkdir -p \$OUT && { $*; } > '$W/bg-$name.log' 2>&1; echo \$? > '$W/bg-$name.rc'" > /dev/null 2>&1 < /dev/null &
  echo "started $name"
  ;;
sh)  # sh CMD: run CMD in $W/repo with OUT set to this call's $OUT
  shift; cd $W/repo; bash -c "$*"
  ;;
esac
