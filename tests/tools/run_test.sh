#!/bin/bash
# `uroce run` (src/tools/run_cmd.h) from the build tree:
#   run_test.sh UROCE RUN_PAIR ADDRESS TCP_PORT
# ibv_devices over it lists uroce0; an ibv_rc_pingpong pair on ADDRESS through it (RUN_PAIR:
# tests/compat/run_pair.sh, on TCP_PORT, with no drop-in on its own LD_LIBRARY_PATH); the variables
# it sets; a static and a setuid program refused (and run with --force); usage errors.
set -u
uroce=$1 pair=$2 addr=$3 port=$4
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
# expect STATUS REGEX CMD...: CMD exits with STATUS and its standard error matches REGEX.
expect() {
  local want=$1 re=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" = "$want" ] || fail "$* exited $rc, not $want: $(cat "$tmp/err")"
  grep -Eq -- "$re" "$tmp/err" || fail "$*: stderr does not match '$re': $(cat "$tmp/err")"
  echo "ok: $* -> $rc"
}
preload=()
if readelf -d "$uroce" | grep -Eq 'libasan|libtsan'; then
  preload=(env LD_PRELOAD="${UROCE_TEST_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0)
fi

# What it sets, and where the drop-ins are.
out=$(env LD_LIBRARY_PATH=/x "$uroce" run --ip "$addr" --faults loss=1% -- \
  sh -c 'echo "$UROCE_DEVICES|$UROCE_FAULTS|$LD_LIBRARY_PATH"') || fail "uroce run -- sh"
echo "$out"
IFS='|' read -r devices faults libpath <<<"$out"
[ "$devices" = "uroce0=$addr" ] || fail "UROCE_DEVICES=$devices"
[ "$faults" = "loss=1%" ] || fail "UROCE_FAULTS=$faults"
[ -e "${libpath%%:*}/libibverbs.so.1" ] && [ "${libpath#*:}" = /x ] || fail "LD_LIBRARY_PATH=$libpath"
out=$(env -u UROCE_DEVICES "$uroce" run -d uroce0 -- sh -c 'echo "$UROCE_DEVICES"')
[ "$out" = "uroce0=127.0.0.1" ] || fail "-d uroce0: UROCE_DEVICES=$out"

# Unmodified rdma-core programs.
if command -v ibv_rc_pingpong >/dev/null; then
  out=$(env -u UROCE_DEVICES -u UROCE_CONFIG "${preload[@]}" "$uroce" run -- ibv_devices 2>&1) ||
    fail "uroce run -- ibv_devices: $out"
  grep -q 'uroce0' <<<"$out" || fail "ibv_devices lists no uroce0: $out"
  echo "ok: uroce run -- ibv_devices lists uroce0"
  mkdir "$tmp/empty"
  RUN_UROCE=$uroce RUN_IP=$addr RUN_PROGRAM=ibv_rc_pingpong "$pair" "$tmp/empty" "$port" default \
    default 60 "iters in" -- "$here/run_wrap.sh" -g 0 --chk || fail "ibv_rc_pingpong pair"
  echo "ok: an ibv_rc_pingpong pair through uroce run"
else
  echo "note: ibverbs-utils not installed: no rdma-core programs run"
fi

# Programs the drop-ins cannot reach: refused, with the reason; --force runs them.
printf 'int main(void) { return 0; }\n' >"$tmp/s.c"
cc -static -o "$tmp/static" "$tmp/s.c" || fail "cannot build a static program (libc6-dev)"
expect 1 'statically linked.*--force' "$uroce" run -- "$tmp/static"
expect 0 'warning: .*statically linked' "$uroce" run --force -- "$tmp/static"
cp /bin/true "$tmp/suid" && chmod u+s "$tmp/suid"
expect 1 'is setuid' "$uroce" run -- "$tmp/suid"
cp /bin/true "$tmp/sgid" && chmod g+s "$tmp/sgid"
expect 1 'is setgid' "$uroce" run -- "$tmp/sgid"

# Usage errors: status 2 and the usage; a missing program: 127.
expect 2 'no PROGRAM.*' "$uroce" run
expect 2 "unknown option '--bogus'" "$uroce" run --bogus -- true
expect 2 '-d needs a value' "$uroce" run -d
expect 2 'exclude each other' "$uroce" run -d uroce0 --ip "$addr" -- true
expect 2 "no device named 'nosuch'" env -u UROCE_DEVICES "$uroce" run -d nosuch -- true
expect 2 'not an IPv4 or IPv6 address' "$uroce" run --ip 1.2.3 -- true
expect 2 'fault spec' "$uroce" run --faults loss=many -- true
expect 127 'command not found' "$uroce" run -- no-such-program-here
echo "PASS"
