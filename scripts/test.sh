#!/usr/bin/env bash
# Test tiers: CPU (interpreter numerics, AOT/SASS checks, CUDA build-check) everywhere; GPU tests where CUDA is.
# Extra arguments go to pytest.
set -eo pipefail
source "$(dirname "$0")/setup.sh"
# The CPU tier (the interpreter and the compilers: CPU-bound) runs one worker per core with pytest-xdist where it is
# installed; a test file stays on one worker (--dist loadfile), so its module-scoped build cache compiles once. The GPU
# tier runs in one process (one device). TILEWRIGHT_TEST_WORKERS overrides the count (0: no workers).
WORKERS=()
if [ "${TRITON_INTERPRET:-0}" = 1 ] && $PY -c "import xdist" 2>/dev/null && [ "${TILEWRIGHT_TEST_WORKERS:-auto}" != 0 ]; then
  WORKERS=(-n "${TILEWRIGHT_TEST_WORKERS:-auto}" --dist loadfile)
fi
set +e
$PY -m pytest tests -q -ra "${WORKERS[@]}" "$@"
rc=$?
[ $rc -eq 5 ] && { echo "no tests collected" >&2; exit 1; }
exit $rc
