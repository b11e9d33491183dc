#!/bin/bash
# Next session's first call (one GPU, ~7 min; carry .whl with pyinstrument 5.1.3 - see s27_call8.sh for the download):
# (1) the model bench (issue 14's headline) with session 27's host changes (the backward replay, the bound launch's
# parameter array); (2) the attention step's host tree with the backward on the calling thread, with the replay
# (issue 15: the part of a step's host time its pieces do not add up to).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
timeout 330 python -m tilewright.bench.model --no-max-autotune --csv $OUT/model.csv > $OUT/model.log 2>&1; echo "model rc=$?"
grep -E "fwd |fwd\+bwd|done" $OUT/model.log | head -60
PROFILER=pyinstrument PYTHONPATH=/tmp/site:$PWD/src timeout 90 python perf/results/h200/attention/bwd_host_profile_2026-11-29.py \
  > $OUT/bwd_host_tree.txt 2>&1; echo "tree rc=$?"; grep "us/step" $OUT/bwd_host_tree.txt
echo "total: $(( $(date +%s) - T0 )) s"
