#!/usr/bin/env bash
# The tests that belong to one prefix of a llama.cpp patch series, for
#   patchctl check-prefixes --run 'bash <repo>/scripts/prefix_checks.sh' ...
# check-prefixes has applied and built the prefix; this runs in its clean room with
# PATCHCTL_BUILD_DIR, PATCHCTL_BIN_DIR and PATCHCTL_PATCH_ID set. Which tests apply is decided
# by what the prefix's tree contains, never by patch id, so the script serves any series:
#   - test-backend-ops -b CPU on FLASH_ATTN_EXT (a subset: head dims 64/128, kv 512, batch 1/32:
#     decode and a prefill tile; half of `make run`'s subset, which takes ~3 min on an idle
#     2-core machine, times six prefixes), always: upstream's op must not change under any prefix;
#   - test-backend-ops -b CPU on FLASH_ATTN_EXT_LSE and FLASH_ATTN_EXT_LSE_MERGE (every case),
#     when ggml.h declares the op and test-backend-ops has cases for it;
#   - tests/evals/dca/test_fa_lse.py (the LSE op against a float64 reference, through a probe
#     linked to the built ggml), when ggml.h declares ggml_flash_attn_ext_lse and llama has DCA
#     (src/llama-dca.h): the float64 references belong to the prefixes that carry llama's DCA
#     (test-backend-ops covers the op alone before that, against the CPU reference path);
#   - tests/evals/dca/test_dca_model.py (DCA logits of tiny models against a float64
#     reference, `--dca off` byte-identical to upstream), when llama has DCA (src/llama-dca.h)
#     and common parses `--dca` (its native tool takes the llama.cpp tools' arguments through
#     common_params_parse, so it needs both).
# The build must hold what the tests load: -D GGML_RPC=ON and the targets ggml, llama,
# llama-common, test-backend-ops (see results/series-split/*-prefixes/README.md for a command).
# The pytest runs use this tree through PATCHCTL_DCA_SRC/PATCHCTL_DCA_BUILD; the unpatched
# upstream they compare with comes from PATCHCTL_UPSTREAM_SRC/BUILD when set, else the tests
# build it through patchctl once (ccache makes that cheap after the first prefix).
# Each check prints a line `ran: NAME ...` or `not applicable: NAME (why)`; with
# PREFIX_CHECKS_OUT=FILE, one JSON line per prefix is appended to FILE (checks, results,
# seconds). Any failing check fails the prefix (exit 1) after the others have run.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
py=${PREFIX_CHECKS_PYTHON:-$repo/.venv/bin/python}
src=$PWD
build=${PATCHCTL_BUILD_DIR:?run me through patchctl check-prefixes --run}
bin=${PATCHCTL_BIN_DIR:?run me through patchctl check-prefixes --run}
pid=${PATCHCTL_PATCH_ID:-?}
logs=$build/logs/prefix-checks
mkdir -p "$logs"

records=()   # one JSON object per check
failed=0

record() {  # name status seconds detail
  records+=("$(printf '{"check": "%s", "status": "%s", "seconds": %s, "detail": %s}' \
    "$1" "$2" "$3" "$("$py" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$4")")")
}

skip() {  # name why
  echo "not applicable: $1 ($2)"
  record "$1" "not-applicable" 0 "$2"
}

run_check() {  # name log command...
  local name=$1 log=$2 started ended rc summary
  shift 2
  echo "ran: $name: $*"
  started=$(date +%s.%N)
  "$@" > "$log" 2>&1
  rc=$?
  ended=$(date +%s.%N)
  summary=$(grep -E "[0-9]+/[0-9]+ tests passed|[0-9]+ (passed|failed)" "$log" | tail -1 | sed 's/^[ =]*//; s/[ =]*$//')
  local secs
  secs=$("$py" -c 'import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))' "$started" "$ended")
  if [ "$rc" -eq 0 ]; then
    echo "   ok in ${secs}s: $summary"
    record "$name" "passed" "$secs" "$summary"
  else
    echo "   FAILED (exit $rc) in ${secs}s: $summary (log: $log)"
    tail -20 "$log"
    record "$name" "failed" "$secs" "exit $rc: $summary"
    failed=1
  fi
}

has() { grep -qs -- "$2" "$src/$1"; }

# -- test-backend-ops: the unchanged op on a subset, the series' LSE ops on all their cases
if [ ! -x "$bin/test-backend-ops" ]; then
  echo "FAILED: no test-backend-ops in $bin (build the test-backend-ops target)"
  record "test-backend-ops" "failed" 0 "not built"
  failed=1
else
  run_check "test-backend-ops FLASH_ATTN_EXT" "$logs/FLASH_ATTN_EXT.log" \
    "$bin/test-backend-ops" test -b CPU -o FLASH_ATTN_EXT -p "hsk=(64|128),.*kv=512,nb=(1|32),"
  for op in FLASH_ATTN_EXT_LSE FLASH_ATTN_EXT_LSE_MERGE; do
    if ! has ggml/include/ggml.h "GGML_OP_$op,"; then
      skip "test-backend-ops $op" "ggml.h has no GGML_OP_$op"
    elif ! has tests/test-backend-ops.cpp "GGML_OP_$op"; then
      skip "test-backend-ops $op" "tests/test-backend-ops.cpp has no cases for GGML_OP_$op"
    else
      run_check "test-backend-ops $op" "$logs/$op.log" "$bin/test-backend-ops" test -b CPU -o "$op"
    fi
  done
fi

# -- the float64 references, through pytest in the patchctl repository
dca_env=(env PATCHCTL_DCA_SRC="$src" PATCHCTL_DCA_BUILD="$build")
pytest=(-m pytest -q -p no:cacheprovider --rootdir "$repo")
if ! has ggml/include/ggml.h "ggml_flash_attn_ext_lse("; then
  skip "test_fa_lse.py" "ggml.h declares no ggml_flash_attn_ext_lse"
elif [ ! -f "$src/src/llama-dca.h" ]; then
  skip "test_fa_lse.py" "no src/llama-dca.h: the float64 references run once llama has DCA"
else
  run_check "test_fa_lse.py" "$logs/test_fa_lse.log" \
    "${dca_env[@]}" bash -c 'cd "$0" && exec "$@"' "$repo" "$py" "${pytest[@]}" tests/evals/dca/test_fa_lse.py
fi
if [ ! -f "$src/src/llama-dca.h" ]; then
  skip "test_dca_model.py" "no src/llama-dca.h: llama has no DCA in this prefix"
elif ! has common/arg.cpp '"--dca"'; then
  skip "test_dca_model.py" "common/arg.cpp does not parse --dca, which its native tool needs"
else
  run_check "test_dca_model.py" "$logs/test_dca_model.log" \
    "${dca_env[@]}" bash -c 'cd "$0" && exec "$@"' "$repo" "$py" "${pytest[@]}" tests/evals/dca/test_dca_model.py
fi

if [ -n "${PREFIX_CHECKS_OUT:-}" ]; then
  joined=$(IFS=,; echo "${records[*]}")
  printf '{"id": "%s", "ok": %s, "checks": [%s]}\n' "$pid" \
    "$([ "$failed" -eq 0 ] && echo true || echo false)" "$joined" >> "$PREFIX_CHECKS_OUT"
fi
exit "$failed"
