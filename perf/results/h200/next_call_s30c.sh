#!/bin/bash
# Session 30, third call (one GPU, ~8 min): (1) the three-consumer hdim-64 attention forward (variants b3 / c3, CPU
# checks only so far) on the GPU: numerics tiers, then the A/B against variant c and cuDNN; (2) the FP8 ring-depth
# sweep (set `stages`); (3) issue 17's fwd+bwd rows with CUDA-graph timing beside the loops; (4) the attention op
# tier that session 30's second call left unfinished, and every attention build compiled without spills.
export PYTHONPATH=$PWD/src
T0=$(date +%s)
timeout 150 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_attention_sm90_gpu.py \
  -k "three_consumers or b3 or c3" > $OUT/gpu_c3.txt 2>&1
echo "c3 tiers rc=$? $(( $(date +%s) - T0 ))s"; tail -3 $OUT/gpu_c3.txt
timeout 150 python perf/results/h200/attention/consumers3_ab_2026-11-29.py > $OUT/consumers3_ab.txt 2>&1
echo "c3 ab rc=$? $(( $(date +%s) - T0 ))s"; cat $OUT/consumers3_ab.txt | grep -v Warning
timeout 120 python perf/results/h200/fp8/block_fix_ab_2026-11-29.py stages > $OUT/fp8_stages.csv 2>&1
echo "fp8 stages rc=$? $(( $(date +%s) - T0 ))s"; grep "^#" $OUT/fp8_stages.csv
timeout 150 python perf/results/h200/rms_norm_linear/fwd_bwd_rows_2026-11-29.py --graphs > $OUT/rms_fwd_bwd_graphs.txt 2>&1
echo "rms rc=$? $(( $(date +%s) - T0 ))s"; grep -E "x eager|failed" $OUT/rms_fwd_bwd_graphs.txt
timeout 170 python -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_gpu.py \
  "tests/cuda/test_attention_sm90_gpu.py::test_every_build_compiles_without_spills" > $OUT/gpu_attn_op.txt 2>&1
echo "attn op tier rc=$? $(( $(date +%s) - T0 ))s"; tail -3 $OUT/gpu_attn_op.txt
