#!/bin/bash
# Session 35, first call (one GPU, ~7 min). 1. Issue 14: why the compiled tilewright Llama forward runs 4% behind
# its own eager one (session 34: 2.81 vs 2.69 ms at B 8 x 2k; torch.compile 2.69): per-kernel GPU time of eager,
# compiled and torch.compile. 2. Issue 15: the op-level attention bench (fwd and fwd + bwd against cuDNN) with
# session 34's defaults (cp on short causal rows, the backward's "defer" at head dim 128) - the done-when table.
# 3. The decode bench's paged rows once more (issue 16: paged16 within 5% of contiguous).
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
(cd perf/results/h200/model && TAILN=40 step k_llama_fwd_compile 200 python kernels_2026-11-29.py llama-prefill fwd \
  tilewright_compile,tilewright_eager,torch_compile)  # (compiled first: no fold kept by an eager call before it)
step attention_bench 300 python -m tilewright.cli bench --op attention --no-plots --out /tmp/attn
grep -E "^attention" $OUT/attention_bench.txt | head -60
