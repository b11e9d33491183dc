#!/usr/bin/env bash
# Test tiers: CPU (interpreter numerics, AOT/SASS checks, CUDA build-check) everywhere; GPU tests where CUDA is.
# Extra arguments go to pytest.
set -eo pipefail
source "$(dirname "$0")/setup.sh"
set +e
$PY -m pytest tests -q -ra "$@"
rc=$?
[ $rc -eq 5 ] && { echo "no tests collected" >&2; exit 1; }
exit $rc
