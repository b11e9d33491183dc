#!/usr/bin/env bash
# Main job: the side-by-side benchmark of every op against its peers (GPU), or the interpreter on a tiny suite
# (no GPU). Extra arguments go to `tilewright bench` (default: --op all).
set -eo pipefail
source "$(dirname "$0")/setup.sh"
$PY -m tilewright.cli bench ${@:---op all}
