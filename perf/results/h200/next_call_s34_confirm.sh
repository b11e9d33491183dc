#!/bin/bash
# Session 34, second device call (one GPU, ~8 min): what the first call's numbers changed.
# 1. The fp16 GELU + residual epilogue no longer contracted (gemm_common.cuh __fmul_rn): the sums-of-squares GEMM's
#    tests (2 of 25 failed: output one fp16 ulp off the plain GEMM's) and the plain GEMM's GPU tier.
# 2. cp picked on short causal rows (attention_sm90.PERSISTENT_BY_HEAD_DIM): the op test with gradients; the short
#    split decode rows (kvcache_attention.SHORT_SPLIT_KEYS): the decode GPU tier, the sweep again (its "default" is now
#    the band's launch), the decode bench.
# 3. A/Bs for next decisions: the backward's "defer" on eight head-dim-128 rows; the rstd-GEMM's tiles at 3000 x 5120.
# 4. The model bench (llama-prefill's causal 2k attention now takes cp).
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
step gpu_sumsq 120 python -m pytest -m gpu -q -p no:cacheprovider -x tests/cuda/test_gemm_sumsq_sm90_gpu.py
step gpu_gemm 120 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_gemm_sm90_gpu.py
step gpu_attn_pick 80 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_attention_sm90_gpu.py \
  -k "wide_key_variant"
step gpu_kvcache 80 python -m pytest -m gpu -q -p no:cacheprovider tests/test_kvcache_gpu.py
TAILN=12 step short_rows 60 python perf/results/h200/decode/short_rows_splits_2026-11-29.py
TAILN=12 step rstd_tiles 60 python perf/results/h200/rms_norm_linear/rstd_tiles_2026-11-29.py
TAILN=30 step bwd_defer_hd128 90 python perf/results/h200/attention/bwd_sync_ab_2026-11-29.py \
  --settings default,A,ABC --rows hd128
step decode_bench 90 python -m tilewright.cli bench --op decode --out $OUT
grep -E "^(decode|  op)" $OUT/decode_bench.txt | head -40
step model 150 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv
grep -E "^model" $OUT/model.txt | grep -v first_call | cut -c1-170
