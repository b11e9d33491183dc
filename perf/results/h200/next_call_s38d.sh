#!/bin/bash
# Session 38, fourth call (one GPU, ~3 min): the B1 x S512 model rows three times more in one process each (the
# host moves these rows by 10-15% between machines and runs; session 38's third call had compiled Llama B1 forward
# at 0.80x torch.compile where its second had 0.97x, with nothing traced changed between them).
source perf/results/h200/call_steps.sh
nvidia-smi --query-gpu=name --format=csv,noheader
for i in 1 2 3; do
  TAILN=14 step model_b1_$i 80 python -m tilewright.bench.model --no-max-autotune --cases llama-small,vit-small \
    --csv $OUT/model_b1_$i.csv
done
