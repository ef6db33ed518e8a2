#!/usr/bin/env bash
# The patched convert_hf_to_gguf.py end to end on tiny models made from the published
# Qwen2.5-14B-Instruct-1M config.json, then the GGUFs loaded by the patched llama.cpp with --dca on.
#   TREE   the patched source tree (patchctl cleanroom apply --series patches/llamafile)
#   BIN    its cmake build's bin/ (llama-completion)
#   PY     a Python with torch (CPU), safetensors, sentencepiece, numpy, transformers
#   OUT    where the models, GGUFs and full logs go (logs/<step>.log)
# Prints each command, the lines of its log that say what happened, and its exit status.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
PUBLISHED=$(cd "$HERE/../../../tests/evals/dca/data/hf-configs" && pwd)/Qwen2.5-14B-Instruct-1M.config.json
mkdir -p "$OUT/logs" && cd "$OUT" || exit 2
export PYTHONPATH=$TREE/gguf-py
# step NAME PATTERN CMD...: run CMD with its output in logs/NAME.log; show the lines matching PATTERN
step() {
  local name=$1 pattern=$2; shift 2
  echo; echo "\$ $*"
  "$@" > "logs/$name.log" 2>&1
  local rc=$?
  grep -E "$pattern" "logs/$name.log"
  echo "[exit $rc]"
}
CONV="dca|DCA|context length|ERROR|Error|exported"
RUN="llama_dca_log_config|n_ctx_train  |error"

step make '^vocab' "$PY" "$HERE/make_tiny_hf.py" "$PUBLISHED" .
# A: config.json carries the published block (as Qwen2.5-1M ship it)
step a-convert "$CONV" "$PY" "$TREE/convert_hf_to_gguf.py" with-dca --outfile a-with-dca.gguf --outtype f32
step a-keys . "$PY" "$HERE/check_keys.py" a-with-dca.gguf "$PUBLISHED" 1010000
# B: --dca-config pointed at the published 14B file for a model of another shape: refused
step b-convert "$CONV" "$PY" "$TREE/convert_hf_to_gguf.py" plain --outfile b-refused.gguf --outtype f32 --dca-config "$PUBLISHED"
test -e b-refused.gguf && echo "b-refused.gguf WAS WRITTEN" || echo "no b-refused.gguf written"
# C: --dca-config config_1m.json (the tiny model's shape, the published block and length)
step c-convert "$CONV" "$PY" "$TREE/convert_hf_to_gguf.py" plain --outfile c-dca-config.gguf --outtype f32 --dca-config config_1m.json
step c-keys . "$PY" "$HERE/check_keys.py" c-dca-config.gguf "$PUBLISHED" 1010000
# D: the plain model, no DCA config anywhere: no DCA key
step d-convert "$CONV" "$PY" "$TREE/convert_hf_to_gguf.py" plain --outfile d-plain.gguf --outtype f32
step d-keys . "$PY" "$HERE/check_keys.py" d-plain.gguf "$PUBLISHED" 32768 --absent
# E: config.json with the published block, and a sparse_attention_config.json beside it (synthetic
#    patterns: the largest vertical is 1500, the largest slash 7000)
step e-convert "$CONV|sparse" "$PY" "$TREE/convert_hf_to_gguf.py" with-sparse --outfile e-with-sparse.gguf --outtype f32
step e-keys . "$PY" "$HERE/check_keys.py" e-with-sparse.gguf with-sparse/config.json 1010000
# F: a sparse_attention_config.json that does not fit the model (3 layer entries for 2 layers): refused
mkdir -p bad-sparse && cp with-sparse/* bad-sparse/ && \
  "$PY" -c 'import json; p="bad-sparse/sparse_attention_config.json"; d=json.load(open(p)); json.dump(d + d[:1], open(p, "w"))'
step f-convert "$CONV|sparse" "$PY" "$TREE/convert_hf_to_gguf.py" bad-sparse --outfile f-refused.gguf --outtype f32
test -e f-refused.gguf && echo "f-refused.gguf WAS WRITTEN" || echo "no f-refused.gguf written"
# the GGUFs in llama.cpp: the DCA line names each value and where it came from
for m in a-with-dca c-dca-config d-plain e-with-sparse; do
  step "run-$m" "$RUN|dca: " "$BIN/llama-completion" -m $m.gguf -c 512 -n 4 -p "the tiny model number 7 reads" \
      --dca on -lv 4 --temp 0 -no-cnv
done
step run-e-sparse "$RUN|sparse prefill" "$BIN/llama-completion" -m e-with-sparse.gguf -c 512 -n 4 \
    -p "the tiny model number 7 reads" --dca on --sparse-prefill on -lv 4 --temp 0 -no-cnv
