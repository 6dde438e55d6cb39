# The check both `uroce doctor` tests make of a run (sourced, not run):
#   doctor_expect RC WANT REGEX OUT WHAT
# The run (described by WHAT) exited RC, which must be WANT; its output, in file OUT, must have a
# line matching REGEX (grep -E), and every line must be ok:, problem:, note: or the summary.
# Calls the sourcing script's fail on a mismatch.
doctor_expect() {
  local rc=$1 want=$2 re=$3 out=$4 what=$5
  cat "$out"
  [ "$rc" = "$want" ] || fail "$what exited $rc, not $want"
  grep -Eq -- "$re" "$out" || fail "$what: no line matches '$re'"
  grep -Evq '^(ok|problem|note): |^all well$|^[0-9]+ problem\(s\)$' "$out" &&
    fail "$what: a line of another shape"
  echo "---- ok: exit $rc, /$re/"
}
