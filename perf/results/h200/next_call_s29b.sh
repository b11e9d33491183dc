#!/bin/bash
# Next session's second call (one GPU, ~9 min): the sm_90a attention kernels' wgmma descriptors formed once in
# uniform registers (session 29, a helper; CPU-only so far: SASS -72 to -264 instructions a forward build, -56 to
# -192 a backward kernel, the same HGMMAs in the same order, 0 spills).
# BEFORE calling: make main's tree of the old kernels beside this one (untracked, carried to the device; delete it
# after, never commit it):  rm -rf headsrc && mkdir headsrc && git archive a4b7ecf src | tar -x -C headsrc
# (1) the attention GPU tiers (tolerance checks against references), two pytest processes on the one GPU;
# (2) the A/B through the public op against cuDNN, old tree then new, and the bit-exactness check of the two trees'
#     outputs (`sum` lines: out, LSE, dK, dV; dQ / dK / dV in deterministic mode).
export PYTHONPATH=$PWD/src
T0=$(date +%s)
test -d headsrc/src || { echo "headsrc/src missing: see the header"; exit 1; }
(timeout 300 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_attention_sm90_gpu.py \
  tests/cuda/test_attention_bwd_sm90_gpu.py tests/test_attention_gpu.py > $OUT/gpu_attn.txt 2>&1; echo rc=$? >> $OUT/gpu_attn.txt) &
(timeout 300 python -m pytest -m gpu -q -p no:cacheprovider tests/cuda/test_attention_varlen_sm90_gpu.py \
  tests/cuda/test_attention_band_sm90_gpu.py > $OUT/gpu_attn_varlen_band.txt 2>&1; echo rc=$? >> $OUT/gpu_attn_varlen_band.txt) &
wait; echo "tiers $(( $(date +%s) - T0 ))s"; tail -n 2 $OUT/gpu_attn*.txt
PYTHONPATH=$PWD/headsrc/src timeout 220 python perf/results/h200/attention/descriptor_ab_2026-11-29.py base > $OUT/desc_ab_base.txt 2>&1
PYTHONPATH=$PWD/src timeout 220 python perf/results/h200/attention/descriptor_ab_2026-11-29.py new > $OUT/desc_ab_new.txt 2>&1
echo "ab $(( $(date +%s) - T0 ))s"
diff <(grep ' sum' $OUT/desc_ab_base.txt | cut -d' ' -f2-) <(grep ' sum' $OUT/desc_ab_new.txt | cut -d' ' -f2-) && echo BIT-IDENTICAL
grep -hE "^(base|new) fwd|^#" $OUT/desc_ab_base.txt $OUT/desc_ab_new.txt
