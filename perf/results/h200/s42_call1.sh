#!/bin/bash
# Session 42, call 1: the compiled Llama B1 forward's generated code, torch's and tilewright's, and the wall per step
# of the traced rotary variants (perf/results/h200/model/b1_compiled_code_s42.py).
source perf/results/h200/call_steps.sh
mkdir -p $OUT/code
TAILN=12 step b1_compiled_code 400 python perf/results/h200/model/b1_compiled_code_s42.py $OUT/code
cd $OUT/code && tar czf $OUT/code.tgz *.py && cd - >/dev/null && rm -rf $OUT/code
