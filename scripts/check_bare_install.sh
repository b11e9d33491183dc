#!/usr/bin/env bash
# `import tilewright` and a kernel call need torch + triton + numpy only. Installs exactly pyproject's dependencies
# into a fresh venv (the CPU stack of setup.sh, no pandas, no matplotlib), then checks that
#  * installing tilewright with its dependencies brought neither pandas nor matplotlib (pyproject lists neither),
#  * `import tilewright` and a small matmul under the Triton interpreter run and load neither,
#  * `tilewright info` runs, and `tilewright bench` fails with one line naming the extra to install.
# Run by .ci/run after the tests. BARE_VENV=DIR reuses (or creates) that venv instead of a temporary one.
set -eo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
VENV=${BARE_VENV:-$WORK/venv}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q "torch==2.13.0" "triton==3.6.0" "numpy<2.4"
"$VENV/bin/python" -m pip install -q -e "$ROOT"
cd "$WORK"  # away from the checkout: what is imported is the installed package
export TRITON_INTERPRET=1
"$VENV/bin/python" - <<'PY'
import importlib.util
import sys

for name in ("pandas", "matplotlib"):
    assert importlib.util.find_spec(name) is None, f"{name} was installed as a dependency of tilewright"

import torch

import tilewright

a = torch.randn(33, 40, dtype=torch.float16)
b = torch.randn(40, 24, dtype=torch.float16)
torch.testing.assert_close(tilewright.matmul(a, b).float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("pandas", "matplotlib"))
assert not loaded, f"import tilewright / matmul loaded {loaded}"
print(f"bare install ok: tilewright {tilewright.__version__}, torch {torch.__version__}, no pandas/matplotlib")
PY
"$VENV/bin/tilewright" info >/dev/null
rc=0
msg=$("$VENV/bin/tilewright" bench --op gemm 2>&1) || rc=$?
if [ "$rc" -ne 1 ] || ! grep -q "pip install 'tilewright\[bench\]'" <<<"$msg"; then
  echo "tilewright bench without pandas: expected exit 1 and the extra named, got exit $rc:" >&2
  echo "$msg" >&2
  exit 1
fi
echo "bare install ok: tilewright info runs; bench says: $(tail -1 <<<"$msg")"
