# Sourced by scripts/bench.sh and scripts/test.sh: picks a Python that has what tilewright needs, installing it
# when missing. Sets PY (the interpreter) and, on a machine without a usable GPU, TRITON_INTERPRET=1.
#  * A machine whose python3 already has CUDA torch + triton (the GPU box, no network): use it as it is.
#  * Otherwise (fresh CPU machine, CI): a venv in .venv with the known-good CPU stack
#    torch 2.13.0 (CPU wheel), triton 3.6.0, numpy<2.4 (triton 3.6's interpreter breaks on numpy 2.4), plus the
#    optional pieces the tests exercise: NVRTC (the no-nvcc CUDA build path) and the `test` extra (pytest and the
#    tools' pandas + matplotlib, which `import tilewright` itself does not need).
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
if python3 -c "import torch, triton, pandas; assert torch.cuda.is_available()" 2>/dev/null; then
  PY=python3
  export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
else
  if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with the CPU stack (torch 2.13.0 CPU, triton 3.6.0, numpy<2.4)" >&2
    python3 -m venv .venv
  fi
  if ! .venv/bin/python -c "import torch, triton, numpy, pandas, pytest, xdist, matplotlib, tilewright" 2>/dev/null; then
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q "torch==2.13.0" "triton==3.6.0" "numpy<2.4" nvidia-cuda-nvrtc
    # numpy pinned again: the extras' pandas must not lift it past what the interpreter runs on
    .venv/bin/python -m pip install -q -e ".[test]" "numpy<2.4"
  fi
  PY=.venv/bin/python
  if ! $PY -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    export TRITON_INTERPRET=1
  fi
fi
