#!/bin/bash
# Next session's first call (one GPU, ~8 min): the head-dim-64 backward's dQ staging without bank conflicts
# (TW_DQ_STAGE_SPLIT, session 30, a helper; CPU only so far: 0 spills, +72 SASS instructions, STS.64 16 -> 0, 32-bit STS
# 17 -> 49; a bank simulation gives 2 wavefronts a (chunk, row half) where the 64-bit stores took 4).
# (1) the sm_90a backward GPU tier with the split staging (tolerances against the references, the dQ paths);
# (2) through the op against cuDNN, one process per setting, the same five rows as session 30's attention rows (D64
#     full, D128 full / causal / GQA, 16k causal): the 64-bit staging, the split staging, and dQ by its own kernel
#     (TILEWRIGHT_CUDA_ATTN_BWD_DQ=kernel: no staging at all, S and dP recomputed); `sum` lines of b64 and split
#     compared (out, LSE, dK, dV must be equal; dQ is summed in a varying order outside deterministic mode - the
#     sum-det lines run the dQ kernel, equal in all three).
export PYTHONPATH=$PWD/src
T0=$(date +%s)
# (0) also the band tier (windows, offsets, soft cap with both backwards): its head-dim-64 cases run the c3 forward
#     since session 30, which ran the op / numerics tiers on c3 but not this one (varlen keeps variant c); and the
#     variants' numerics cases with session 30's added head-dim-64 fp16 GQA strided case
(TILEWRIGHT_CUDA_ATTN_BWD_DQ_STAGE=split timeout 200 python -m pytest -m gpu -q -p no:cacheprovider \
  tests/cuda/test_attention_bwd_sm90_gpu.py > $OUT/gpu_bwd_split.txt 2>&1; echo rc=$? >> $OUT/gpu_bwd_split.txt) &
(timeout 200 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_attention_band_sm90_gpu.py \
  tests/cuda/test_attention_sm90_gpu.py -k "band or numerics_cases" > $OUT/gpu_band_c3.txt 2>&1;
 echo rc=$? >> $OUT/gpu_band_c3.txt) &
wait; echo "tiers $(( $(date +%s) - T0 ))s"; tail -n 3 $OUT/gpu_bwd_split.txt $OUT/gpu_band_c3.txt
S=perf/results/h200/attention/descriptor_ab_2026-11-29.py
timeout 130 python $S b64 > $OUT/dq_b64.txt 2>&1
TILEWRIGHT_CUDA_ATTN_BWD_DQ_STAGE=split timeout 130 python $S split > $OUT/dq_split.txt 2>&1
TILEWRIGHT_CUDA_ATTN_BWD_DQ=kernel timeout 130 python $S dqkernel > $OUT/dq_kernel.txt 2>&1
echo "ab $(( $(date +%s) - T0 ))s"
diff <(grep ' sum ' $OUT/dq_b64.txt | cut -d' ' -f2- | sed 's/ dq [0-9a-f]*//') \
     <(grep ' sum ' $OUT/dq_split.txt | cut -d' ' -f2- | sed 's/ dq [0-9a-f]*//') && echo "b64 / split: out, LSE, dK, dV equal"
grep -hE "fwd\+bwd|^#" $OUT/dq_b64.txt $OUT/dq_split.txt $OUT/dq_kernel.txt
