#!/bin/bash
# Session 41: where the Llama B1 forward's host time goes (compiled 0.78x torch.compile with identical kernels).
source perf/results/h200/call_steps.sh
TAILN=2 step host_b1_nograd 150 python perf/results/h200/model/host_b1_diag_s41.py
TAILN=2 step host_b1_grad 150 python perf/results/h200/model/host_b1_diag_s41.py grad
