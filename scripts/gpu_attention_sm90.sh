#!/usr/bin/env bash
# One device call (H100/H200, <= ~300 s) for the sm_90a flash-attention forward: build every variant, numerics of the
# variants from simplest to full (a: 1 consumer warpgroup; b: 2 warpgroups + pingpong; c: + intra-warpgroup overlap;
# c64: c with 64-key blocks, whose softmax really overlaps the PV wgmma at hdim 128),
# gradient through CUDA forward + Triton backward, a 10,000-launch randomized stress, compute-sanitizer memcheck, and
# a benchmark against the Triton forward, cuDNN and FA2 (SDPA backends). Each phase runs under its own timeout, cut to
# the time left of BUDGET; a hang shows as a timed-out phase, and the "start <case>" lines in attn_phases.log name the
# case it hung on. Later phases use the most complete variant whose numerics passed (BEST, or set VARIANT=...).
# Files in $OUT (5): attn_summary.txt (printed last), attn_phases.log, attn_numerics.csv, attn_bench.csv,
# attn_sanitizer.log. Optional: carry .twcache (cubins built on the CPU box with the same nvcc) to skip compiles.
# Usage on the device: bash scripts/gpu_attention_sm90.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 OUT=${OUT:-out} TILEWRIGHT_AUTOTUNE=${TILEWRIGHT_AUTOTUNE:-0}
export TILEWRIGHT_CACHE_DIR=${TILEWRIGHT_CACHE_DIR:-$PWD/.twcache}
mkdir -p "$OUT"
PY="python scripts/gpu_attention_sm90.py"
LOG=$OUT/attn_phases.log SUM=$OUT/attn_summary.txt
: > "$LOG"; : > "$SUM"; rm -f "$OUT/attn_numerics.csv" "$OUT/attn_bench.csv"
BUDGET=${BUDGET:-290}
START=$SECONDS
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >> "$SUM" 2>&1

# phase NAME LIMIT CMD...: run CMD under min(LIMIT, time left); append its output to the log; one summary line.
phase() {
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - (SECONDS - START)))
  [ $limit -gt $left ] && limit=$left
  if [ $limit -le 5 ]; then echo "$name: skipped (budget spent)" | tee -a "$SUM"; return 99; fi
  local t0=$SECONDS tmp
  tmp=$(mktemp)
  echo "=== $name (limit ${limit}s): $*" >> "$LOG"
  timeout -k 5 $limit "$@" > "$tmp" 2>&1
  local rc=$?
  cat "$tmp" >> "$LOG"
  local res
  res=$(grep -h "^RESULT\|ERROR SUMMARY" "$tmp" | tail -1)
  [ $rc = 124 ] && res="TIMED OUT; last lines: $(tail -2 "$tmp" | tr '\n' ' ')"
  echo "$name rc=$rc $((SECONDS - t0))s | $res" | tee -a "$SUM"
  rm -f "$tmp"
  return $rc
}

phase build 45 $PY build
phase numerics 60 $PY numerics a b c c64
BEST=${VARIANT:-}
if [ -z "$BEST" ]; then
  for v in c c64 b a; do
    if grep -q "^PASS $v " "$LOG"; then BEST=$v; break; fi
  done
fi
echo "best passing variant: ${BEST:-none}" | tee -a "$SUM"
if [ -n "$BEST" ]; then
  phase grad 45 $PY grad $BEST
  phase stress 35 $PY stress $BEST 10000
fi
SAN=${BEST:-a}
: > "$OUT/attn_sanitizer.log"
phase sanitizer 40 compute-sanitizer --tool memcheck --error-exitcode 9 $PY sanitize $SAN
sed -n "/^=== sanitizer/,\$p" "$LOG" > "$OUT/attn_sanitizer.log"
if [ -n "$BEST" ]; then
  # also time the other passing schedules beside BEST (what pingpong / overlap / 64-key blocks buy)
  EXTRA=""
  for v in c c64 b; do [ $v != "$BEST" ] && grep -q "^PASS $v " "$LOG" && EXTRA="$EXTRA $v"; done
  phase bench 75 $PY bench $BEST $EXTRA
fi
echo "total $((SECONDS - START))s" >> "$SUM"
echo "===== summary"; cat "$SUM"
