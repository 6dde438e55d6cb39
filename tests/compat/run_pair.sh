#!/bin/bash
# Runs an unmodified libibverbs program (ibverbs-utils, perftest) as a server and a client, two
# processes on one host, each on its own uroce device, over the drop-in libibverbs.so.1. An
# address given as `default` runs that side with UROCE_DEVICES unset (the default device,
# uroce0 on 127.0.0.1): both `default` puts the two processes on one shared device.
#
#   run_pair.sh LIBDIR TCP_PORT SERVER_ADDR CLIENT_ADDR TIMEOUT_S EXPECT_REGEX -- PROGRAM ARGS...
#
# The server runs `PROGRAM -p TCP_PORT ARGS` with UROCE_DEVICES=SERVER_ADDR; once it listens on
# TCP_PORT, the client runs `PROGRAM -p TCP_PORT ARGS 127.0.0.1` with UROCE_DEVICES=CLIENT_ADDR.
# Passes when both exit 0 within TIMEOUT_S (timeout(1) bounds each), the client's output matches
# EXPECT_REGEX (grep -E; perftest's passive sides print no results) and neither prints a
# failure. Prints both outputs when it fails.
set -u
libdir=$1 port=$2 saddr=$3 caddr=$4 limit=$5 expect=$6
shift 6
[ "$1" = "--" ] && shift
prog=$1
shift
if ! command -v "$prog" >/dev/null; then
  echo "SKIP: $prog is not installed"
  exit 77
fi

export LD_LIBRARY_PATH=$libdir
# A sanitizer build of the library needs its runtime loaded first (the programs are not
# instrumented); leaks of the programs themselves are not ours to report.
if readelf -d "$libdir/libibverbs.so.1" | grep -Eq 'libasan|libtsan'; then
  export LD_PRELOAD="${UROCE_TEST_PRELOAD:-}"
  export ASAN_OPTIONS=detect_leaks=0
fi

args=("$@")
# with_devices ADDR CMD...: CMD with UROCE_DEVICES=ADDR, or without it for `default`.
with_devices() {
  local a=$1
  shift
  if [ "$a" = default ]; then env -u UROCE_DEVICES "$@"; else UROCE_DEVICES=$a "$@"; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run_once() {
  with_devices "$saddr" timeout -k 5 "$limit" "$prog" -p "$port" "${args[@]}" >"$tmp/server" 2>&1 &
  spid=$!
  # Wait (bounded) until the server listens; a probe connection would consume its one accept.
  for _ in $(seq 1 200); do
    ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  with_devices "$caddr" timeout -k 5 "$limit" "$prog" -p "$port" "${args[@]}" 127.0.0.1 >"$tmp/client" 2>&1
  crc=$?
  wait "$spid"
  src=$?

  ok=1
  [ "$src" -eq 0 ] && [ "$crc" -eq 0 ] || ok=0
  grep -Eq -- "$expect" "$tmp/client" || ok=0
  for side in server client; do
    grep -Eqi -- 'failed|couldn.t|error|mismatch|unable' "$tmp/$side" && ok=0
  done
}

# perftest calibrates its cycle counter against gettimeofday before each report and gives up
# ("Correlation coefficient r^2: ... < 0.9", "Can't produce a report") when it was preempted
# while sampling: the measuring tool failing under CPU contention, not the run. Such a run is
# repeated once, and says so.
run_once
if [ "$ok" -ne 1 ] && grep -q "Correlation coefficient r^2" "$tmp/server" "$tmp/client"; then
  echo "NOTE: perftest's clock calibration failed under load; running once more"
  run_once
fi
if [ "$ok" -ne 1 ]; then
  echo "FAIL: $prog $* (server exit $src, client exit $crc; 124 = timed out after ${limit}s)"
  echo "----- server (UROCE_DEVICES=$saddr) -----"
  cat "$tmp/server"
  echo "----- client (UROCE_DEVICES=$caddr) -----"
  cat "$tmp/client"
  exit 1
fi
echo "PASS: $prog $*"
grep -E -- "$expect" "$tmp/client" | tail -3
exit 0
