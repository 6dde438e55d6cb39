#!/bin/bash
# One side of an rping pair killed with SIGKILL mid-run (issue 43): the other side's process must
# end at once, told by RDMA_CM_EVENT_DISCONNECTED, as over the kernel's rdma_cm (whose CM sends
# the DREQ when it closes the killed process's IDs), not after its QP's retries, or never.
#
#   rdmacm_kill.sh LIBDIR UROCE SERVER_ADDR CLIENT_ADDR PORT VICTIM LIMIT_S
#
# VICTIM is `server` or `client`; each side has its own uroce device (its address, so each its
# own coordinator). Both ping with no count, until stopped. The client runs with -v: its output
# goes to a file, block-buffered, so it shows once the client has pinged dozens of times (the
# connection is up and busy). Then the victim gets SIGKILL, and the test waits for the survivor to
# exit: LIMIT_S only guards against a hang. Passes when the survivor exited by itself and printed
# rping's "DISCONNECT EVENT", with no sanitizer report.
set -u
libdir=$1 uroce=$2 saddr=$3 caddr=$4 port=$5 victim=$6 limit=$7
if ! command -v rping >/dev/null; then
  echo "SKIP: rping is not installed (rdmacm-utils)"
  exit 77
fi
export LD_LIBRARY_PATH=$libdir
preload=
if readelf -d "$libdir/libibverbs.so.1" | grep -Eq 'libasan|libtsan'; then
  preload="${UROCE_TEST_PRELOAD:-}"
  export ASAN_OPTIONS=detect_leaks=0
fi
tmp=$(mktemp -d)
spid= cpid=
cleanup() {
  for p in $spid $cpid; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for side in server client; do
    echo "--- $side"
    cat "$tmp/$side"
  done
  exit 1
}

# Each side under `timeout` (the guard); the rping process is its child.
start() { # SIDE ADDR ARGS...
  local side=$1 addr=$2
  shift 2
  env -u UROCE_DEVICES UROCE_DEVICES="$addr" "LD_PRELOAD=$preload" \
    timeout -k 5 "$limit" rping "$@" >"$tmp/$side" 2>&1 &
}
# The rping process under the `timeout` of pid $1 (empty until it has started).
rping_of() { env -u LD_PRELOAD pgrep -P "$1" | head -1; }

start server "$saddr" -s -a "$saddr" -p "$port"
spid=$!
listening=0
for _ in $(seq 1 300); do
  kill -0 "$spid" 2>/dev/null || break
  sp=$(rping_of "$spid")
  if [ -n "$sp" ] && env -u LD_PRELOAD "$uroce" stats 2>/dev/null |
    grep -Eq "^cm_id $saddr:4791 pid $sp ps tcp port $port state listening"; then
    listening=1
    break
  fi
  sleep 0.1
done
[ "$listening" = 1 ] || fail "the server never listened on $saddr port $port"
start client "$caddr" -c -v -a "$saddr" -p "$port"
cpid=$!
busy=0
for _ in $(seq 1 $((limit * 10))); do
  kill -0 "$cpid" 2>/dev/null || break
  if grep -q "ping data: rdma-ping-" "$tmp/client"; then
    busy=1
    break
  fi
  sleep 0.1
done
[ "$busy" = 1 ] || fail "the client never showed its pings"

if [ "$victim" = server ]; then
  dead=$spid survivor=$cpid
else
  dead=$cpid survivor=$spid
fi
kill -KILL "$(rping_of "$dead")" || fail "no $victim process to kill"
wait "$dead"
wait "$survivor"
rc=$?
spid= cpid=
other=client
[ "$victim" = client ] && other=server
# 124: timeout's guard ended it (137 once it had to use SIGKILL).
{ [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && fail "the $other was still running ${limit} s after the $victim was killed"
grep -q "DISCONNECT EVENT" "$tmp/$other" || fail "the $other (exit $rc) saw no DISCONNECTED"
grep -Eq 'AddressSanitizer|ThreadSanitizer|runtime error' "$tmp/$other" && fail "a sanitizer report"
echo "PASS: the $victim killed, the $other ended by itself (exit $rc) on DISCONNECTED:"
grep -E "DISCONNECT EVENT|wait for|failed" "$tmp/$other" | head -5
