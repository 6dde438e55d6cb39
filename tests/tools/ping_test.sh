#!/usr/bin/env bash
# `uroce ping` as two processes on loopback, and its answers to bad input: each case must end
# with the expected exit status and message, never hang (every process runs under `timeout`; a
# hang fails the case with status 124).
# usage: uroce_test_net ping_test.sh UROCE_BINARY WORK_DIR
# uroce_test_net (tests/support/test_net.h) gives the run addresses and ports no other test
# process has: $UROCE_TEST_NET.131-149 and TCP ports $UROCE_TEST_PORT to +15.
set -uo pipefail
net=${UROCE_TEST_NET:?run under uroce_test_net (tests/support)}
net_re=${net//./\\.}
port=${UROCE_TEST_PORT:?run under uroce_test_net (tests/support)}
uroce=$1
work=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$work"
mkdir -p "$work"
failures=0
passes=0
bg_pids=()
cleanup() { for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT

pass() { echo "PASS: $1"; passes=$((passes + 1)); }
bad() {
  echo "FAIL: $1"
  shift
  for f in "$@"; do echo "--- $f"; cat "$f"; done
  failures=$((failures + 1))
}
# Waits (bounded) until FILE contains TEXT.
wait_for() {
  for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  return 1
}

# ---- 1. uroce ping <-> uroce ping, --chk, messages of several sizes ----
for size in 1 4096 10000; do
  name=pair_s$size
  timeout 60 "$uroce" ping -a "$net.131" -p "$port" -c -n 300 -s "$size" --timeout 20 --stats \
    >"$work/$name.server" 2>&1 &
  srv=$!
  wait_for "$work/$name.server" 'local address' || true
  timeout 60 "$uroce" ping -a "$net.132" -p "$port" -c -n 300 -s "$size" --timeout 20 --stats \
    127.0.0.1 >"$work/$name.client" 2>&1
  crc=$?
  wait "$srv"
  src=$?
  bytes=$((size * 300 * 2))
  ok=1
  for f in "$work/$name.server" "$work/$name.client"; do
    grep -Eq "^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:$net_re\.13[12]\$" "$f" || ok=0
    grep -Eq "^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:$net_re\.13[12]\$" "$f" || ok=0
    grep -Eq "^$bytes bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec$" "$f" || ok=0
    grep -Eq '^300 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$' "$f" || ok=0
    ! grep -q 'invalid data\|wrong data' "$f" || ok=0
  done
  # Each side's PSN is the one the other side reports.
  lpsn=$(sed -n 's/^  local address: .*PSN \(0x[0-9a-f]*\).*/\1/p' "$work/$name.server")
  rpsn=$(sed -n 's/^  remote address: .*PSN \(0x[0-9a-f]*\).*/\1/p' "$work/$name.client")
  [[ -n $lpsn && $lpsn == "$rpsn" ]] || ok=0
  if ((crc == 0 && src == 0 && ok == 1)); then pass "$name"; else
    bad "$name (client $crc, server $src)" "$work/$name.server" "$work/$name.client"; fi
done

# ---- 1b. devices by name (UROCE_DEVICES, -d), -e, a small receive depth ----
export UROCE_DEVICES="left=$net.144,right=$net.145"
timeout 60 "$uroce" ping -d left -p $((port + 1)) -c -e -r 2 -n 100 --timeout 20 >"$work/named.server" 2>&1 &
srv=$!
wait_for "$work/named.server" 'local address' || true
timeout 60 "$uroce" ping -d right -p $((port + 1)) -c -e -r 2 -n 100 --timeout 20 127.0.0.1 \
  >"$work/named.client" 2>&1
crc=$?
wait "$srv"
src=$?
unset UROCE_DEVICES
if ((crc == 0 && src == 0)) && grep -q "GID ::ffff:$net_re\.144\$" "$work/named.server" &&
  grep -q '^100 iters in' "$work/named.client"; then pass named_devices_events; else
  bad "named_devices_events (client $crc, server $src)" "$work/named.server" "$work/named.client"
fi

# expect NAME WANT_STATUS REGEX FILE STATUS
expect() {
  if (($5 == $2)) && grep -Eq "$3" "$4"; then pass "$1"; else bad "$1 (status $5, wanted $2; /$3/)" "$4"; fi
}

# ---- 1c. the sides disagree on the size: the data check and the completions say so ----
timeout 60 "$uroce" ping -a "$net.146" -p $((port + 2)) -c -s 8192 -n 5 --timeout 5 \
  >"$work/mismatch.server" 2>&1 &
srv=$!
wait_for "$work/mismatch.server" 'local address' || true
timeout 60 "$uroce" ping -a "$net.147" -p $((port + 2)) -c -s 4096 -n 5 --timeout 5 127.0.0.1 \
  >"$work/mismatch.client" 2>&1
crc=$?
wait "$srv"
src=$?
if ((crc == 1 && src == 1)) &&
  grep -q 'received message with 4096 bytes (expected 8192)' "$work/mismatch.server" &&
  grep -q 'Failed status local length error (1) for wr_id 1' "$work/mismatch.client"; then
  pass size_mismatch_detected
else
  bad "size_mismatch_detected (client $crc, server $src)" "$work/mismatch.server" \
    "$work/mismatch.client"
fi

# ---- 2. nobody listens: connection refused ----
timeout 30 "$uroce" ping -a "$net.133" -p $((port + 3)) --timeout 5 127.0.0.1 >"$work/refused" 2>&1
expect refused 1 "Couldn't connect to 127.0.0.1:$((port + 3)): Connection refused" "$work/refused" $?

# ---- 3. the TCP port is taken ----
python3 "$here/fake_pingpong_peer.py" silent $((port + 4)) >"$work/holder" 2>&1 &
bg_pids+=($!)
wait_for "$work/holder" listening
timeout 30 "$uroce" ping -a "$net.134" -p $((port + 4)) --timeout 5 >"$work/tcp_in_use" 2>&1
expect tcp_port_in_use 1 "Couldn't listen to port $((port + 4)): Address already in use" \
  "$work/tcp_in_use" $?

# ---- 4. the RoCE port (UDP 4791) of the address is taken by a program that does not share it
# (another uroce process would share it) ----
python3 -c "import socket,time; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(('$net.135',4791)); print('bound',flush=True); time.sleep(60)" >"$work/holder2" 2>&1 &
holder=$!
bg_pids+=($holder)
wait_for "$work/holder2" 'bound'
timeout 30 "$uroce" ping -a "$net.135" -p $((port + 5)) --timeout 5 >"$work/udp_in_use" 2>&1
expect udp_port_in_use 1 "$net_re\.135.*(in use|already)" "$work/udp_in_use" $?
# devinfo opens no socket: it works while the address is served.
timeout 30 "$uroce" devinfo -a "$net.135" >"$work/devinfo_in_use" 2>&1
expect devinfo_while_served 0 "GID\[  0\]:.*::ffff:$net_re\.135, RoCE v2" "$work/devinfo_in_use" $?
kill "$holder" 2>/dev/null

# ---- 5. the peer sends an invalid address string ----
python3 "$here/fake_pingpong_peer.py" garbage $((port + 6)) >"$work/garbage_peer" 2>&1 &
bg_pids+=($!)
wait_for "$work/garbage_peer" listening
timeout 30 "$uroce" ping -a "$net.136" -p $((port + 6)) --timeout 5 127.0.0.1 >"$work/garbage" 2>&1
expect invalid_gid_string 1 "the server sent an invalid address: .*not hexadecimal" \
  "$work/garbage" $?

# ---- 5b. the peer's GID is zero (ibv_rc_pingpong without -g) or of the other family ----
python3 "$here/fake_pingpong_peer.py" gid $((port + 7)) 00000000000000000000000000000000 \
  >"$work/zero_gid_peer" 2>&1 &
bg_pids+=($!)
wait_for "$work/zero_gid_peer" listening
timeout 30 "$uroce" ping -a "$net.148" -p $((port + 7)) --timeout 5 127.0.0.1 >"$work/zero_gid" 2>&1
expect zero_gid 1 "the peer sent GID ::: RoCE needs the peer's GID \(run ibv_rc_pingpong with -g" \
  "$work/zero_gid" $?
python3 "$here/fake_pingpong_peer.py" gid $((port + 8)) fd000000000000000000000000000001 \
  >"$work/v6_gid_peer" 2>&1 &
bg_pids+=($!)
wait_for "$work/v6_gid_peer" listening
timeout 30 "$uroce" ping -a "$net.149" -p $((port + 8)) --timeout 5 127.0.0.1 >"$work/v6_gid" 2>&1
expect other_family_gid 1 "the peer's GID fd00::1 is not an address of the same family as $net_re\.149" \
  "$work/v6_gid" $?

# ---- 6. the peer accepts but never answers: bounded by --timeout ----
python3 "$here/fake_pingpong_peer.py" silent $((port + 9)) >"$work/silent_peer" 2>&1 &
bg_pids+=($!)
wait_for "$work/silent_peer" listening
timeout 30 "$uroce" ping -a "$net.137" -p $((port + 9)) --timeout 2 127.0.0.1 >"$work/silent" 2>&1
expect silent_peer 1 "Couldn't read remote address: timed out" "$work/silent" $?

# ---- 7. the peer's RoCE address is unreachable: the send retries, then fails ----
python3 "$here/fake_pingpong_peer.py" ghost $((port + 10)) "$net.139" >"$work/ghost_peer" 2>&1 &
bg_pids+=($!)
wait_for "$work/ghost_peer" listening
# rc_pingpong's retry_cnt 7 is 7 retries in uroce, as in IBTA and hardware (rxe alone retries
# forever: rxe_comp.c decrements it only when it is not 7): with timeout 14 (67 ms) the first
# SEND goes out 8 times and fails with RETRY_EXC_ERR after about 0.54 s, well before --timeout.
timeout 60 "$uroce" ping -a "$net.138" -p $((port + 10)) --timeout 3 127.0.0.1 >"$work/unreachable" 2>&1
expect unreachable_peer 1 \
  "Failed status transport retry counter exceeded \(12\) for wr_id 2 after 0 sends .*is the peer still running" \
  "$work/unreachable" $?

# ---- 8. no server started: the server waits at most --timeout for a client ----
timeout 30 "$uroce" ping -a "$net.140" -p $((port + 11)) --timeout 1 >"$work/no_client" 2>&1
expect no_client 1 "no client connected to port $((port + 11)) within 1 s" "$work/no_client" $?

# ---- 9. the peer is killed in the middle of the run ----
# Started without `timeout` so that $! is uroce itself, which kill -9 must hit.
"$uroce" ping -a "$net.141" -p $((port + 12)) -n 100000000 --timeout 5 >"$work/victim" 2>&1 &
victim=$!
bg_pids+=($victim)
wait_for "$work/victim" 'local address'
timeout 60 "$uroce" ping -a "$net.142" -p $((port + 12)) -n 100000000 --timeout 5 127.0.0.1 \
  >"$work/killed" 2>&1 &
client=$!
wait_for "$work/killed" 'remote address'
kill -9 "$victim"
wait "$client"
# The survivor's SEND in flight fails with RETRY_EXC_ERR after 8 x 67 ms (retry_cnt 7 is 7
# retries); had the victim acknowledged it before dying, --timeout ends the wait instead.
expect peer_killed 1 \
  "Failed status transport retry counter exceeded \(12\) for wr_id 2 after [0-9]+ sends|no completion for 5 s after [0-9]+ of 100000000 sends" \
  "$work/killed" $?

# ---- 10. options rc_pingpong refuses too ----
timeout 30 "$uroce" ping -a "$net.143" -m 1000 >"$work/bad_mtu" 2>&1
expect bad_mtu 1 "invalid MTU 1000" "$work/bad_mtu" $?
timeout 30 "$uroce" ping -a "$net.143" -r 100000 -p $((port + 13)) >"$work/bad_rx_depth" 2>&1
expect bad_rx_depth 1 "rx depth 100000 is beyond .*max_qp_wr" "$work/bad_rx_depth" $?
timeout 30 "$uroce" ping -a "$net.143" -g 5 -p $((port + 14)) --timeout 1 >"$work/bad_gid_index" 2>&1
expect bad_gid_index 1 "can't read sgid of index 5" "$work/bad_gid_index" $?
timeout 30 "$uroce" ping -a 10.255.255.254 -p $((port + 15)) --timeout 1 >"$work/not_local" 2>&1
expect address_not_local 1 "no network interface has this address" "$work/not_local" $?

echo "$passes passed, $failures failed"
((failures == 0))
