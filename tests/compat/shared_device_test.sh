#!/bin/bash
# Many processes on one shared device (the default, nothing configured), over the drop-in:
#   1. eight ibv_rc_pingpong -e --chk pairs at once: every one passes;
#   2. six such pairs beside two ib_send_bw -e pairs whose servers are killed with SIGKILL
#      mid-transfer: the six pass, each ib_send_bw client (its SENDs in flight) gets an error
#      completion and exits non-zero, and nothing hangs;
#      `uroce stats` meanwhile lists the contexts;
#   3. a new pair started afterwards passes.
# Event-driven programs (-e) sleep while they wait, so two CPUs suffice. Every process runs
# under `timeout` as a hang guard only.
#
#   shared_device_test.sh LIBDIR FIRST_TCP_PORT UROCE
set -u
libdir=$1 port0=$2 uroce=$3
for p in ibv_rc_pingpong ib_send_bw; do
  command -v "$p" >/dev/null || { echo "SKIP: $p is not installed"; exit 77; }
done
export LD_LIBRARY_PATH=$libdir
unset UROCE_DEVICES
if readelf -d "$libdir/libibverbs.so.1" | grep -Eq 'libasan|libtsan'; then
  export LD_PRELOAD="${UROCE_TEST_PRELOAD:-}"
  export ASAN_OPTIONS=detect_leaks=0
fi
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0
GUARD=240

# wait_listen PORT PID: until the server listens on TCP PORT (bounded) or has exited.
wait_listen() {
  for _ in $(seq 1 600); do
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# pingpong_pair N PORT ARGS...: starts server and client of pair N in the background.
declare -A spid cpid
pingpong_pair() {
  local n=$1 port=$2
  shift 2
  timeout -k 5 $GUARD ibv_rc_pingpong -g 0 -e --chk -p "$port" "$@" >"$tmp/s$n" 2>&1 &
  spid[$n]=$!
  wait_listen "$port" "${spid[$n]}"
  timeout -k 5 $GUARD ibv_rc_pingpong -g 0 -e --chk -p "$port" "$@" 127.0.0.1 >"$tmp/c$n" 2>&1 &
  cpid[$n]=$!
}

# check_pair N WHAT: both sides of pair N exited 0 and printed their results.
check_pair() {
  local n=$1 what=$2 src crc
  wait "${spid[$n]}"
  src=$?
  wait "${cpid[$n]}"
  crc=$?
  if [ $src -eq 0 ] && [ $crc -eq 0 ] && grep -q "iters in" "$tmp/s$n" && grep -q "iters in" "$tmp/c$n"; then
    echo "ok: $what pair $n"
  else
    echo "FAIL: $what pair $n (server $src, client $crc)"
    echo "--- server"; cat "$tmp/s$n"; echo "--- client"; cat "$tmp/c$n"
    fail=1
  fi
}

# ---- 1. eight pairs at once ----
for n in 1 2 3 4 5 6 7 8; do pingpong_pair "$n" $((port0 + n)) -n 2000; done
for n in 1 2 3 4 5 6 7 8; do check_pair "$n" "eight at once:"; done

# ---- 2. six pairs, and two send_bw pairs whose servers are killed ----
for n in 1 2 3 4 5 6; do pingpong_pair "$n" $((port0 + 10 + n)) -n 4000; done
declare -A wspid wcpid
for k in 1 2; do
  p=$((port0 + 20 + k))
  timeout -k 5 $GUARD ib_send_bw -e -n 2000000 -s 4096 -p "$p" >"$tmp/ws$k" 2>&1 &
  wspid[$k]=$!
  wait_listen "$p" "${wspid[$k]}"
  timeout -k 5 $GUARD ib_send_bw -e -n 2000000 -s 4096 -p "$p" 127.0.0.1 >"$tmp/wc$k" 2>&1 &
  wcpid[$k]=$!
done
# Mid-transfer: once each client has sent 2000 packets (its counters, from `uroce stats`), its
# SENDs are flowing.
for k in 1 2; do
  started=0
  for _ in $(seq 1 600); do
    prog=$(env -u LD_PRELOAD pgrep -P "${wcpid[$k]}" ib_send_bw)
    if [ -n "$prog" ]; then
      sent=$(env -u LD_PRELOAD "$uroce" stats 2>/dev/null | grep "^link .* pid $prog " |
        sed -E 's/.* sent_pkts ([0-9]+) .*/\1/')
      if [ -n "$sent" ] && [ "$sent" -ge 2000 ]; then started=1; break; fi
    fi
    kill -0 "${wcpid[$k]}" 2>/dev/null || break
    sleep 0.1
  done
  [ $started -eq 1 ] || { echo "FAIL: send_bw client $k never started"; cat "$tmp/wc$k"; fail=1; }
done
# `uroce stats` shows who uses the device: a line per context (the four ib_send_bw among them)
# and the device's summary.
env -u LD_PRELOAD "$uroce" stats >"$tmp/stats" 2>&1
members=$(grep -c "^member 127.0.0.1:4791 pid [0-9]* comm ib_send_bw device uroce0 index [0-9]* qpn_blocks 1" "$tmp/stats")
if [ "$members" -ge 4 ] && grep -Eq "^shared 127.0.0.1:4791 contexts [0-9]+ unsteered_pkts [0-9]+" "$tmp/stats"; then
  echo "ok: uroce stats lists the device's contexts ($members ib_send_bw)"
else
  echo "FAIL: uroce stats does not list the shared device's contexts:"
  cat "$tmp/stats"
  fail=1
fi
for k in 1 2; do
  # timeout(1)'s child is the program.
  victim=$(env -u LD_PRELOAD pgrep -P "${wspid[$k]}" ib_send_bw)
  [ -n "$victim" ] && kill -9 "$victim"
done
for n in 1 2 3 4 5 6; do check_pair "$n" "beside the killed:"; done
for k in 1 2; do
  wait "${wspid[$k]}" 2>/dev/null
  wait "${wcpid[$k]}"
  rc=$?
  # Not 0 (it cannot finish) and not 124/137 (the hang guard): it failed by itself.
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] &&
    grep -Eqi "completion with error|retry|failed status" "$tmp/wc$k"; then
    echo "ok: send_bw client $k of a killed server failed with: $(grep -Ei 'completion with error|retry|failed status' "$tmp/wc$k" | head -1)"
  else
    echo "FAIL: send_bw client $k of a killed server exited $rc"
    cat "$tmp/wc$k"
    fail=1
  fi
done

# ---- 3. a new pair afterwards ----
pingpong_pair 9 $((port0 + 30)) -n 500
check_pair 9 "afterwards:"

[ $fail -eq 0 ] && echo PASS
exit $fail
