#!/bin/bash
# Session 28, third call (one GPU): kernel breakdown and queued wall of the model bench's steps where tilewright
# trails (perf/results/h200/model/kernels_2026-11-29.py): Llama prefill forward (vs torch.compile 0.95x), ViT-L
# prefill fwd + bwd (0.84x eager in the 06:00 run, 1.01x in session 26), Llama prefill fwd + bwd.
export PYTHONPATH=$PWD/src
T0=$(date +%s)
S=perf/results/h200/model/kernels_2026-11-29.py
timeout 150 python $S llama-prefill fwd torch_eager,torch_compile,tilewright_eager > $OUT/k_llama_fwd.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s"
timeout 150 python $S vit-prefill fwd+bwd torch_eager,torch_compile,tilewright_eager > $OUT/k_vit_fb.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s"
timeout 150 python $S llama-prefill fwd+bwd torch_compile,tilewright_eager > $OUT/k_llama_fb.txt 2>&1; echo "rc=$? $(( $(date +%s) - T0 ))s"
grep "=====" $OUT/k_*.txt
