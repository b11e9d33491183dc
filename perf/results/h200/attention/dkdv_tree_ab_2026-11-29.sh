#!/bin/bash
# Session 26, one GPU: the dK / dV kernel alone (stats_ab_2026-11-29.py: launch_dkdv, variant b with dQ in the pass,
# a float64 check first) in several source trees carried under scratch/trees/<name>: builds in parallel, then two
# interleaved timed rounds into $OUT/trees_ab.csv; with TESTS set, the backward GPU tests (pytest -k "$TESTS"; "all":
# the whole file) on the last tree. The session's calls, in order:
#   dkdv_tree_ab_2026-11-29.sh base prefetch staged direct       (-> stats_ab_2026-11-29_0047.csv)
#   dkdv_tree_ab_2026-11-29.sh base baselaunder staged direct    (-> stats_ab2_2026-11-29_0056.csv)
#   TESTS=all dkdv_tree_ab_2026-11-29.sh head writers            (-> dq_writers_ab_2026-11-29_0135.csv)
#   TESTS="pass or split or deterministic" dkdv_tree_ab_2026-11-29.sh head reorder  (-> dq_reorder_ab_..._0158.csv)
S=perf/results/h200/attention/stats_ab_2026-11-29.py
nvidia-smi --query-gpu=name --format=csv,noheader
for t in "$@"; do
  (PYTHONPATH=scratch/trees/$t/src timeout 280 python $S $t --build-only > $OUT/build_$t.txt 2>&1; echo "$t build rc=$?" >> $OUT/build_$t.txt) &
done
wait
cat $OUT/build_*.txt | grep -v "Warning\|run_backward" | tail -8
for r in 1 2; do
  for t in "$@"; do
    PYTHONPATH=scratch/trees/$t/src timeout 100 python $S $t$r 2>&1 | grep -v "Warning\|run_backward" | tee -a $OUT/trees_ab.csv
  done
done
if [ -n "$TESTS" ]; then
  last="${@: -1}"
  select=(); [ "$TESTS" != all ] && select=(-k "$TESTS")
  PYTHONPATH=scratch/trees/$last/src timeout 200 python -m pytest -m gpu -q -p no:cacheprovider -x \
    tests/cuda/test_attention_bwd_sm90_gpu.py "${select[@]}" > $OUT/gpu_$last.txt 2>&1; echo "rc=$?" >> $OUT/gpu_$last.txt
  tail -3 $OUT/gpu_$last.txt
fi
