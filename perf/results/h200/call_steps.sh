# Sourced by the device-call scripts: step NAME LIMIT CMD... runs CMD under a time limit into $OUT/NAME.txt, prints
# its rc, the seconds since the script's start and the output's last ${TAILN:-6} lines; returns CMD's rc. A call
# returns at most 8 files from $OUT: keep a script's steps within that.
export PYTHONPATH=$PWD/src
T0=$(date +%s)
step() {
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "== $name rc=$rc at $(( $(date +%s) - T0 ))s"; tail -n "${TAILN:-6}" "$OUT/$name.txt"
  return $rc
}
