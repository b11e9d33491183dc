#!/bin/bash
# Next session, one GPU (~5 min; issue 16): the short decode rows' split count / step / warps / ring around the
# default (decode/short_rows_splits_2026-11-29.py, written in session 32, not yet run), cuDNN beside; if a setting wins
# a row by > 3% everywhere it applies, change default_splits / launch_shape for that band and rerun the decode bench
# (`tilewright bench --op decode`) and tests/test_kvcache_gpu.py.
export PYTHONPATH=$PWD/src
timeout 420 python perf/results/h200/decode/short_rows_splits_2026-11-29.py > $OUT/short_rows_splits.txt 2>&1
echo "rc=$?"; grep -v "^    " $OUT/short_rows_splits.txt
