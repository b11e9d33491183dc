#!/bin/bash
# Session 28, fifth call (one GPU, carry .whl): the folded RMSNorm-linear's replay (GPU tests; Llama prefill forward
# host and wall against torch.compile), then pyinstrument trees of the ViT-L and Llama prefill fwd + bwd steps.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD/src
T0=$(date +%s)
timeout 150 python -m pytest -q -m gpu -p no:cacheprovider tests/cuda/test_rstd_gemm_sm90_gpu.py tests/test_fast_gpu.py \
  > $OUT/gpu_tests.txt 2>&1; echo "tests rc=$? $(( $(date +%s) - T0 ))s"; tail -3 $OUT/gpu_tests.txt
timeout 100 python perf/results/h200/model/host_stall_2026-11-29.py llama-prefill fwd tilewright_eager > $OUT/stall_llama_fwd.txt 2>&1
grep "host " $OUT/stall_llama_fwd.txt
timeout 120 python perf/results/h200/model/kernels_2026-11-29.py llama-prefill fwd torch_compile,tilewright_eager > $OUT/k_llama_fwd.txt 2>&1
grep "=====" $OUT/k_llama_fwd.txt; echo "$(( $(date +%s) - T0 ))s"
for c in vit-prefill llama-prefill; do
  PYTHONPATH=/tmp/site:$PWD/src timeout 90 python perf/results/h200/model/host_tree_2026-11-29.py $c fwd+bwd > $OUT/tree_$c.txt 2>&1
  echo "$c rc=$? $(( $(date +%s) - T0 ))s"; grep "host ms" $OUT/tree_$c.txt
done
