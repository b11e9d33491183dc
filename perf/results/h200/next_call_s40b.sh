#!/bin/bash
# Prepared in session 39 for the next session's second call (one GPU, ~6 min): the model bench on session 39's code
# (the residual tile and one-path builds, apply_rotary replayed under autograd, matmul's one-call hit) for the README
# table - B8 and B1 rows (the B1 rows move with the host: compare with model_b1_2026-12-02_s38f.csv and the in-process
# A/B model/rotary_grad_replay_ab_s39.txt), then the rotary A/B once more on that host.
source perf/results/h200/call_steps.sh
TAILN=24 step model 260 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv
TAILN=14 step model_b1 100 python -m tilewright.bench.model --no-max-autotune --cases llama-small,vit-small \
  --csv $OUT/model_b1.csv
(cd perf/results/h200/model && TAILN=4 step rotary_grad_replay_ab 100 python rotary_grad_replay_ab_2026-12-02.py)
