#!/bin/bash
# Runs an unmodified rdma_cm program (rdmacm-utils, perftest -R, qperf) as a server and a client,
# two processes on one host over the drop-in librdmacm.so.1 and libibverbs.so.1, each with its
# own uroce device (or both on one).
#
#   rdmacm_pair.sh LIBDIR UROCE SERVER_ADDR CLIENT_ADDR READY TIMEOUT_S EXPECT_REGEX \
#       -- SERVER_CMD... -- CLIENT_CMD...
#
# Each side runs with UROCE_DEVICES set to its address. In the commands, @S@ stands for the
# server's address. READY says when the server is ready for the client: `cm:PS:PORT` once
# `uroce stats` lists an rdma_cm ID of port space PS (tcp, udp) listening on PORT at the server's
# device, `tcp:PORT` once a TCP socket listens on PORT (qperf's control connection). Passes when
# both exit 0 within TIMEOUT_S, the client's output matches EXPECT_REGEX (grep -E) and neither
# prints a sanitizer report. With EXPECT_FAIL=1 in the environment the client must exit non-zero
# instead (and no server is waited for when SERVER_CMD is `none`). With SERVER_STAYS=1 the server
# is one that serves until killed (cmtime's): it is stopped once the client is done. RETRY_IF=RE
# retries (up to 3 attempts) a failure whose client output matches RE: a race of the program's
# own. Prints both outputs on failure.
set -u
libdir=$1 uroce=$2 saddr=$3 caddr=$4 ready=$5 limit=$6 expect=$7
shift 7
[ "$1" = "--" ] && shift
server=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  server+=("${1//@S@/$saddr}")
  shift
done
shift
client=()
for a in "$@"; do client+=("${a//@S@/$saddr}"); done
for p in "${server[0]}" "${client[0]}"; do
  if [ "$p" != none ] && ! command -v "$p" >/dev/null; then
    echo "SKIP: $p is not installed"
    exit 77
  fi
done

export LD_LIBRARY_PATH=$libdir
if readelf -d "$libdir/libibverbs.so.1" | grep -Eq 'libasan|libtsan'; then
  preload="${UROCE_TEST_PRELOAD:-}"
  export ASAN_OPTIONS=detect_leaks=0
else
  preload=
fi
tmp=$(mktemp -d)
spid=
cleanup() {
  [ -n "$spid" ] && kill "$spid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

dump() {
  echo "--- server: ${server[*]}"
  cat "$tmp/server" 2>/dev/null
  echo "--- client: ${client[*]}"
  cat "$tmp/client"
  echo "--- uroce stats"
  env -u LD_PRELOAD "$uroce" stats 2>&1 | grep -E '^(cm|shared)' || true
}

# devices ADDR: the environment that gives a side its one device. With UROCE_PAIR_AEAD=MODE
# (aead_pair.sh) a config file instead, the device at aead=MODE without a psk= (per-connection
# keys only, docs/SECURITY.md).
devices() {
  if [ -n "${UROCE_PAIR_AEAD:-}" ]; then
    echo "uroce0 $1 aead=$UROCE_PAIR_AEAD" >"$tmp/devices-$1.conf"
    echo "UROCE_CONFIG=$tmp/devices-$1.conf"
  else
    echo "UROCE_DEVICES=$1"
  fi
}

src=0
if [ "${server[0]}" != none ]; then
  env -u UROCE_DEVICES "$(devices "$saddr")" "LD_PRELOAD=$preload" timeout -k 5 "$limit" "${server[@]}" >"$tmp/server" 2>&1 &
  spid=$!
  # Ready when the server listens: its rdma_cm ID in the coordinator's list, or its TCP socket.
  kind=${ready%%:*}
  up=0
  for _ in $(seq 1 300); do
    kill -0 "$spid" 2>/dev/null || break
    if [ "$kind" = cm ]; then
      ps_port=${ready#cm:}
      ps=${ps_port%%:*} port=${ps_port#*:}
      # The server's own listener (timeout's child), not one of an earlier server that has
      # exited but that the coordinator has not yet noticed.
      sp=$(env -u LD_PRELOAD pgrep -P "$spid" | head -1)
      if [ -n "$sp" ] && env -u LD_PRELOAD "$uroce" stats 2>/dev/null |
        grep -Eq "^cm_id $saddr:4791 pid $sp ps $ps port $port state listening"; then
        up=1
        break
      fi
    else
      sp=$(env -u LD_PRELOAD pgrep -P "$spid" | head -1)
      if [ -n "$sp" ] && ss -Hltnp "sport = :${ready#tcp:}" 2>/dev/null | grep -q "pid=$sp,"; then
        up=1
        break
      fi
    fi
    sleep 0.1
  done
  if [ "$up" -ne 1 ]; then
    echo "FAIL: the server never listened ($ready)"
    dump
    exit 1
  fi
fi
env -u UROCE_DEVICES "$(devices "$caddr")" "LD_PRELOAD=$preload" timeout -k 5 "$limit" "${client[@]}" >"$tmp/client" 2>&1
crc=$?
if [ -n "$spid" ]; then
  stays=0
  [ "${EXPECT_FAIL:-0}" = 1 ] || [ "${SERVER_STAYS:-0}" = 1 ] && stays=1
  # A client that failed leaves its server waiting for it: stop the server (bounded) too.
  [ "$crc" -ne 0 ] && kill "$spid" 2>/dev/null
  [ "$stays" = 1 ] && kill "$spid" 2>/dev/null
  wait "$spid"
  src=$?
  spid=
  [ "$stays" = 1 ] && src=0
fi

ok=1
if [ "${EXPECT_FAIL:-0}" = 1 ]; then
  [ "$crc" -ne 0 ] && [ "$crc" -ne 124 ] || ok=0
else
  [ "$src" -eq 0 ] && [ "$crc" -eq 0 ] || ok=0
fi
grep -Eq -- "$expect" "$tmp/client" || ok=0
if grep -Eq 'AddressSanitizer|ThreadSanitizer|runtime error' "$tmp/client" "$tmp/server" 2>/dev/null; then
  ok=0
fi
if [ "$ok" -ne 1 ]; then
  # RETRY_IF: a known race of the program itself, retried (up to 3 attempts in all) when the
  # client's output shows it.
  attempt=${RDMACM_PAIR_ATTEMPT:-1}
  if [ -n "${RETRY_IF:-}" ] && [ "$attempt" -lt 3 ] && grep -Eq -- "$RETRY_IF" "$tmp/client"; then
    echo "attempt $attempt: the client hit /$RETRY_IF/; once more"
    rm -rf "$tmp"
    trap - EXIT
    RDMACM_PAIR_ATTEMPT=$((attempt + 1)) exec "$0" "$libdir" "$uroce" "$saddr" "$caddr" "$ready" \
      "$limit" "$expect" -- "${server[@]}" -- "${client[@]}"
  fi
  echo "FAIL: server exit $src, client exit $crc, expected /$expect/"
  dump
  exit 1
fi
echo "PASS: ${client[*]}"
grep -E -- "$expect" "$tmp/client" | tail -3
