#!/bin/bash
# Session 24, second call (one GPU): kernel-time breakdown of the prefill model rows' fwd+bwd step, torch eager /
# torch.compile / tilewright eager (which kernels the 3% to compile on Llama and the 9-13% on ViT-L are).
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
for tag in vit-prefill llama-prefill; do
  T0=$(date +%s)
  timeout 240 python perf/results/h100/model/prof_prefill_2026-11-27.py $tag torch_eager,torch_compile,tilewright_eager \
    > $OUT/prof_$tag.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s" >> $OUT/prof_$tag.txt
  grep -E "=====|rc=" $OUT/prof_$tag.txt
done
