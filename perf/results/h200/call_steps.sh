# Sourced by the device-call scripts: step NAME LIMIT CMD... runs CMD under a time limit into $OUT/NAME.txt, prints
# its rc, the seconds since the script's start and the output's last ${TAILN:-6} lines; returns CMD's rc. A call
# returns at most 8 files from $OUT: keep a script's steps within that.
#
# CUDA builds: the cubin cache lives in the checkout's .cubins/ (git-ignored). A fresh machine compiles every sm_90a
# build a call needs (nvcc, ~5-15 s each: most of a GPU test tier's time), so a call may end with `save_cubins`,
# which packs the cache into $OUT/cubins.tgz (one of the 8 files); unpack it here into .cubins/ and name
# ".cubins" in the next call's carry - its builds are then cache hits (the keys hold source, headers, flags and the
# compiler's version, so a changed source or another nvcc simply compiles again). Here:
#   rm -rf .cubins && mkdir .cubins && tar xzf <files_at>/cubins.tgz -C .cubins
export PYTHONPATH=$PWD/src
export TILEWRIGHT_CACHE_DIR=$PWD/.cubins
T0=$(date +%s)
step() {
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "== $name rc=$rc at $(( $(date +%s) - T0 ))s"; tail -n "${TAILN:-6}" "$OUT/$name.txt"
  return $rc
}
save_cubins() {  # the cache's cubins and ptxas logs (not the lock files), if under the 16 MiB a returned file may be
  local n
  n=$(find "$TILEWRIGHT_CACHE_DIR/cuda" -name '*.cubin' 2>/dev/null | wc -l)
  (cd "$TILEWRIGHT_CACHE_DIR" && find cuda -name '*.cubin' -o -name '*.log' | tar czf "$OUT/cubins.tgz" -T -) \
    2>/dev/null
  if [ "$(stat -c %s "$OUT/cubins.tgz" 2>/dev/null || echo 0)" -gt 16000000 ]; then
    rm -f "$OUT/cubins.tgz"; echo "cubins: $n builds, too large to return"
  else
    echo "cubins: $n builds saved ($(du -h "$OUT/cubins.tgz" | cut -f1)); nvcc $(nvcc --version | grep -o 'V[0-9.]*')"
  fi
}
