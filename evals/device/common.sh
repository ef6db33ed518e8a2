# Sourced by the device scripts: where things live on the GPU machine (state survives between
# calls only while the machine stays warm; see README.md here).
W=${W:-$HOME/lead}
export PATCHCTL_CACHE_DIR=$W/cache
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
CR=$W/cr                       # the clean room of the shipped series
SDIST_SHA=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
SDIST_NAME=llama_cpp_python-0.3.36.tar.gz
mkdir -p "$W/stage" "${OUT:-$W/out}"
install_wheels() {
  [ -d .whl ] || return 0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
}
stage() {  # copy carried files (.device/...) into $W/stage, flat
  for d in "$@"; do [ -d "$d" ] && cp -f "$d"/* "$W/stage/"; done; ls -la "$W/stage"
}
ferry_stage() {  # ferry_stage .device/ferry/cNN... : copy carried ferry.py chunks into $W/stage as cNN
  local d                        # (with manifest.json), then rebuild every complete file into $W/ferried
  for d in "$@"; do
    [ -f "$d/chunk" ] && cp -f "$d/chunk" "$W/stage/$(basename "$d")"
    [ -f "$d/manifest.json" ] && cp -f "$d/manifest.json" "$W/stage/"
  done
  local rc=0
  python3 evals/device/ferry.py unpack "$W/stage" "$W/ferried" || rc=$?
  [ "$rc" -le 1 ]                # 1: some files still miss chunks (later calls); 2: a sha256 differs
}
join_parts() {  # join_parts OUTFILE SHA256 PART... ; checks the sha256
  local out=$1 sha=$2; shift 2
  cat "$@" > "$out"
  echo "$sha  $out" | sha256sum -c -
}
build_dir() {  # the (single) build dir of the clean room
  echo "$W/build/"
}
