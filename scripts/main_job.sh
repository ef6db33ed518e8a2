#!/usr/bin/env bash
# The main job on a series (default: the shipped patches/llamafile), as `make run` runs it:
#   1-2. `patchctl ci`, the gate a fork's own CI runs: materialize the pinned upstream and
#      apply the series strictly in its clean room, verify every patch round-trips byte for
#      byte (forward, reverse, re-export, markers), the generated docs current;
#   3. build the clean room for the CPU (ccache when available), with the RPC backend and its
#      server (ggml-rpc.h asserts the op count: a series that adds ggml ops without updating the
#      RPC protocol fails here; about 10 CPU-seconds more than the build without it), and run
#      something real from it: test-backend-ops for the flash-attention ops the series touches.
# Any failure stops the job with patchctl's exit code.
set -euo pipefail
series=${1:-patches/llamafile}
pc=${PATCHCTL:-.venv/bin/patchctl}
launcher=(); command -v ccache >/dev/null && launcher=(--launcher ccache)

echo "== patchctl ci --series $series (cleanroom apply, verify --all, docs)"
"$pc" ci --series "$series"
echo "== patchctl build --series $series ${launcher[*]} -D GGML_RPC=ON (CPU)"
manifest=$("$pc" build --series "$series" "${launcher[@]}" -D GGML_RPC=ON \
  -t test-backend-ops -t llama-completion -t ggml-rpc-server --json)
bin=$(printf '%s' "$manifest" | python3 -c 'import json,sys; print(json.load(sys.stdin)["build_dir"] + "/bin")')
echo "   bin dir: $bin"
printf '%s' "$manifest" | python3 -c 'import json,sys
c = json.load(sys.stdin).get("cpu_check")
if isinstance(c, dict):
    ok = [x for x in c.get("cases", []) if x["result"] == "ok"]
    c = "%d quantized matmuls agree; extra buffer types: %s" % (len(ok), c.get("extra_bufts"))
print("   cpu check:", c)'
# optimised CPU paths vs the reference path: the unchanged op on a subset of its thousands of
# cases (head dims 64/128, kv 512, batch 1/3/32/75; ~3 min), the series' new ops on all of their cases
checks=("FLASH_ATTN_EXT|hsk=(64|128),.*kv=512,nb=(1|3|32|75),")
for op in FLASH_ATTN_EXT_LSE FLASH_ATTN_EXT_LSE_MERGE; do  # present only in a series that adds them
  grep -qs "$op" "$bin"/libggml-base.so* "$bin/test-backend-ops" && checks+=("$op|.*")
done
for check in "${checks[@]}"; do
  op=${check%%|*}; filter=${check#*|}
  log="$bin/../test-backend-ops-$op.log"
  echo "== test-backend-ops test -b CPU -o $op -p '$filter'"
  "$bin/test-backend-ops" test -b CPU -o "$op" -p "$filter" > "$log" 2>&1 \
    || { tail -20 "$log"; echo "test-backend-ops -o $op failed (log: $log)" >&2; exit 1; }
  grep -E "tests passed" "$log" | tail -1
done
echo "== main job passed"
