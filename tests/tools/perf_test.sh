#!/usr/bin/env bash
# `uroce perf` and `uroce demo` as two processes on loopback addresses ($UROCE_TEST_NET.108-129):
# every test with its data verified on both sides, -a, -q, -D, and the bad cases (wrong address,
# refused connection, ports in use, an unreachable peer, a peer killed mid-run, invalid flags):
# each must end with a non-zero status and a one-line message, never a hang.
# Every process runs under `timeout` as a hang guard only (generous bounds, no timing checks).
# Usage: uroce_test_net perf_test.sh UROCE WORKDIR [CASE...]   (CASE: a function name below;
# default: all). uroce_test_net (tests/support/test_net.h) gives the run addresses no other test
# process has; the TCP ports (19110-19148) are bound on those addresses only, so they are the
# run's own too.
set -uo pipefail
NET=${UROCE_TEST_NET:?run under uroce_test_net (tests/support)}
U=$1
W=$2
shift 2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$W"
mkdir -p "$W"
passed=0
failed=0
GUARD=180 # seconds: hang guard for any one process

ok() {
  echo "ok   $*"
  passed=$((passed + 1))
}
bad() {
  echo "FAIL $*"
  failed=$((failed + 1))
}

# server TEST IP PORT [ARGS...]: starts a server in the background (pid in $spid).
server() {
  local t=$1 ip=$2 port=$3
  shift 3
  rm -f "$W/s.out" "$W/s.err"
  timeout "$GUARD" "$U" perf "$t" --ip "$ip" -p "$port" --timeout 60 "$@" >"$W/s.out" 2>"$W/s.err" &
  spid=$!
}
# client TEST IP PORT SERVER_IP [ARGS...]: runs a client; status in $crc.
client() {
  local t=$1 ip=$2 port=$3 sip=$4
  shift 4
  rm -f "$W/c.out" "$W/c.err"
  timeout "$GUARD" "$U" perf "$t" --ip "$ip" -p "$port" --timeout 60 --connect_timeout 30 "$@" \
    "$sip" >"$W/c.out" 2>"$W/c.err"
  crc=$?
}
wait_server() {
  wait "$spid"
  src=$?
}
# until_file_has FILE REGEX: waits (bounded) until FILE has a line matching REGEX.
until_file_has() {
  local i
  for ((i = 0; i < 3000; i++)); do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    timeout 0.02 tail -f /dev/null 2>/dev/null # a 20 ms pause between checks of the condition
  done
  return 1
}
one_line() { # the file holds exactly one line
  [[ $(wc -l <"$1") -eq 1 ]]
}

# Each test runs with its data checked on both sides; --json gives one line per side.
case_every_test() {
  local port=19110 t extra
  for spec in write_bw write_lat read_bw read_lat send_bw send_lat atomic_bw atomic_lat \
    "atomic_bw -A CMP_AND_SWAP" "atomic_lat -A CMP_AND_SWAP"; do
    read -r t extra <<<"$spec"
    port=$((port + 1))
    # shellcheck disable=SC2086
    server "$t" "$NET.110" "$port" --json $extra
    # shellcheck disable=SC2086
    client "$t" "$NET.111" "$port" "$NET.110" -n 50 --json $extra
    wait_server
    if [[ $crc -eq 0 && $src -eq 0 ]] && grep -q '"verified":true' "$W/c.out" &&
      grep -q '"verified":true' "$W/s.out" && grep -q '"side":"server"' "$W/s.out" &&
      grep -q '"cpu_s_per_gb"' "$W/c.out"; then
      ok "$spec: both sides verified"
    else
      bad "$spec: client $crc server $src: $(cat "$W/c.err" "$W/s.err")"
    fi
  done
}

# The perftest table: header, column names and one line per size.
case_table() {
  server write_lat "$NET.112" 19130
  client write_lat "$NET.113" 19130 "$NET.112" -n 20 --cpu_util
  wait_server
  if [[ $crc -eq 0 && $src -eq 0 ]] && grep -q "RDMA_Write Latency Test" "$W/c.out" &&
    grep -q "t_typical\[usec\]" "$W/c.out" && grep -q "99.9% percentile" "$W/c.out" &&
    grep -qE "^ 2 +20 " "$W/c.out" && grep -q "CPU: local" "$W/c.out"; then
    ok "write_lat table"
  else
    bad "write_lat table: $(cat "$W/c.out" "$W/c.err")"
  fi
  server read_bw "$NET.112" 19131
  client read_bw "$NET.113" 19131 "$NET.112" -n 20 --report_gbits -F
  wait_server
  if [[ $crc -eq 0 && $src -eq 0 ]] && grep -q "BW average\[Gb/sec\]" "$W/c.out" &&
    grep -qE "^ 65536 +20 " "$W/c.out"; then
    ok "read_bw table in Gb/s"
  else
    bad "read_bw table: $(cat "$W/c.out" "$W/c.err")"
  fi
}

case_all_sizes() {
  server write_bw "$NET.114" 19132 --json
  client write_bw "$NET.115" 19132 "$NET.114" -a -n 5 --json
  wait_server
  local n
  n=$(grep -c '"verified":true' "$W/c.out")
  if [[ $crc -eq 0 && $src -eq 0 && $n -eq 23 && $(grep -c '"verified":true' "$W/s.out") -eq 23 ]] &&
    grep -q '"bytes":8388608' "$W/c.out"; then
    ok "write_bw -a: 23 sizes 2..8388608 verified"
  else
    bad "write_bw -a: $n lines; $(cat "$W/c.err" "$W/s.err")"
  fi
  server send_lat "$NET.114" 19133 --json
  client send_lat "$NET.115" 19133 "$NET.114" -a -n 5 --json
  wait_server
  n=$(grep -c '"verified":true' "$W/c.out")
  if [[ $crc -eq 0 && $src -eq 0 && $n -eq 23 ]]; then
    ok "send_lat -a: 23 sizes verified"
  else
    bad "send_lat -a: $n lines; $(cat "$W/c.err" "$W/s.err")"
  fi
}

case_qps_and_duration() {
  server write_bw "$NET.116" 19134 -q 4 --json
  client write_bw "$NET.117" 19134 "$NET.116" -q 4 -n 30 -s 4096 --json
  wait_server
  if [[ $crc -eq 0 && $src -eq 0 ]] && grep -q '"qps":4' "$W/c.out" &&
    grep -q '"iterations":120' "$W/c.out"; then
    ok "write_bw -q 4: 4 x 30 operations verified"
  else
    bad "write_bw -q 4: $(cat "$W/c.out" "$W/c.err" "$W/s.err")"
  fi
  server send_bw "$NET.116" 19135 -q 3 --json
  client send_bw "$NET.117" 19135 "$NET.116" -q 3 -n 40 --json
  wait_server
  if [[ $crc -eq 0 && $src -eq 0 ]] && grep -q '"iterations":120' "$W/s.out"; then
    ok "send_bw -q 3: the server received 120 messages"
  else
    bad "send_bw -q 3: $(cat "$W/s.out" "$W/c.err" "$W/s.err")"
  fi
  server atomic_bw "$NET.116" 19136 --json
  client atomic_bw "$NET.117" 19136 "$NET.116" -D 1 --json
  wait_server
  if [[ $crc -eq 0 && $src -eq 0 ]] && grep -q '"verified":true' "$W/s.out"; then
    ok "atomic_bw -D 1: the counter equals the operations run"
  else
    bad "atomic_bw -D 1: $(cat "$W/c.err" "$W/s.err")"
  fi
}

case_wrong_address() {
  # Not an address (and resolved without a DNS query: digits and dots are never a host name).
  timeout "$GUARD" "$U" perf write_bw --ip "$NET.118" 127.0.0.300 >"$W/c.out" 2>"$W/c.err"
  local rc=$?
  if [[ $rc -ne 0 ]] && one_line "$W/c.err" && grep -q "is not an IPv4 or IPv6 address" "$W/c.err"; then
    ok "wrong address: $(cat "$W/c.err")"
  else
    bad "wrong address: rc $rc $(cat "$W/c.err")"
  fi
  # 192.0.2.1 (TEST-NET-1) is on no interface here: opening the device fails before any
  # packet is sent, and the client never gets to connect.
  timeout "$GUARD" "$U" perf write_bw --ip 192.0.2.1 127.0.0.1 >"$W/c.out" 2>"$W/c.err"
  rc=$?
  if [[ $rc -ne 0 ]] && one_line "$W/c.err" && grep -q "cannot open the device" "$W/c.err"; then
    ok "local address not on this host: $(cat "$W/c.err")"
  else
    bad "local address not on this host: rc $rc $(cat "$W/c.err")"
  fi
}

case_connect_refused() {
  timeout "$GUARD" "$U" perf write_bw --ip "$NET.119" -p 19137 "$NET.120" >"$W/c.out" 2>"$W/c.err"
  local rc=$?
  if [[ $rc -eq 1 ]] && one_line "$W/c.err" && grep -q "Connection refused" "$W/c.err"; then
    ok "connection refused: $(cat "$W/c.err")"
  else
    bad "connection refused: rc $rc $(cat "$W/c.err")"
  fi
}

case_ports_in_use() {
  # The TCP port: something else listens there.
  rm -f "$W/holder.out"
  python3 -c "
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('$NET.121', 19138)); s.listen(1); print('listening', flush=True)
time.sleep(120)" >"$W/holder.out" 2>&1 &
  local holder=$!
  until_file_has "$W/holder.out" listening
  timeout "$GUARD" "$U" perf write_bw --ip "$NET.121" -p 19138 --timeout 5 >"$W/s.out" 2>"$W/s.err"
  local rc=$?
  kill "$holder" 2>/dev/null
  wait "$holder" 2>/dev/null
  if [[ $rc -eq 1 ]] && one_line "$W/s.err" && grep -q "port in use" "$W/s.err"; then
    ok "TCP port in use: $(cat "$W/s.err")"
  else
    bad "TCP port in use: rc $rc $(cat "$W/s.err")"
  fi
  # The RoCE port: held by a program that does not share it (another uroce process would).
  python3 -c "import socket,time; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(('$NET.122',4791)); print('bound',flush=True); time.sleep(120)" >"$W/s.out" 2>&1 &
  spid=$!
  until_file_has "$W/s.out" "bound"
  timeout "$GUARD" "$U" perf write_bw --ip "$NET.122" -p 19140 --timeout 5 >"$W/s2.out" 2>"$W/s2.err"
  rc=$?
  kill "$spid"
  wait "$spid" 2>/dev/null
  if [[ $rc -eq 1 ]] && one_line "$W/s2.err" && grep -q "cannot open the device" "$W/s2.err"; then
    ok "RoCE port in use: $(cat "$W/s2.err")"
  else
    bad "RoCE port in use: rc $rc $(cat "$W/s2.err")"
  fi
}

# A server that answers on TCP but whose RoCE address has no listener: the client's QP must
# report RETRY_EXC_ERR after its retries (-u 10: 4 ms timeout, 3 retries), not hang.
case_unreachable_peer() {
  rm -f "$W/f.out"
  timeout "$GUARD" python3 "$HERE/perf_fake_peer.py" "$NET.123" 19141 "$NET.124" >"$W/f.out" 2>&1 &
  local fake=$!
  until_file_has "$W/f.out" listening
  for t in write_bw read_lat atomic_bw; do
    [[ $t != write_bw ]] && {
      rm -f "$W/f.out"
      timeout "$GUARD" python3 "$HERE/perf_fake_peer.py" "$NET.123" 19141 "$NET.124" >"$W/f.out" 2>&1 &
      fake=$!
      until_file_has "$W/f.out" listening
    }
    client "$t" "$NET.125" 19141 "$NET.123" -u 10 --retry_count 3
    wait "$fake" 2>/dev/null
    if [[ $crc -eq 1 ]] && one_line "$W/c.err" && grep -q "retry counter exceeded" "$W/c.err"; then
      ok "unreachable peer ($t): $(cat "$W/c.err")"
    else
      bad "unreachable peer ($t): rc $crc $(cat "$W/c.err")"
    fi
  done
}

# The server killed during a run: the client ends with a message (the TCP connection closed, or
# its operations exhausted their retries), whichever it notices first.
case_peer_killed() {
  # Started without the `timeout` wrapper, so that the kill reaches uroce itself; their own
  # bounds (-D 60, --timeout 60) guard against a hang.
  rm -f "$W/s.out" "$W/c.out"
  "$U" perf write_bw --ip "$NET.126" -p 19142 --timeout 60 >"$W/s.out" 2>"$W/s.err" &
  spid=$!
  "$U" perf write_bw --ip "$NET.127" -p 19142 -D 60 -u 12 --retry_count 3 \
    --connect_timeout 30 "$NET.126" >"$W/c.out" 2>"$W/c.err" &
  local cpid=$!
  until_file_has "$W/s.out" "#bytes"
  kill -9 "$spid"
  { wait "$spid"; } 2>/dev/null # (no "Killed" notice)
  wait "$cpid"
  local rc=$?
  if [[ $rc -eq 1 ]] && one_line "$W/c.err" &&
    grep -qE "closed the TCP connection|retry counter exceeded" "$W/c.err"; then
    ok "server killed mid-run: $(cat "$W/c.err")"
  else
    bad "server killed mid-run: rc $rc $(cat "$W/c.err")"
  fi
  # The server frozen (SIGSTOP): its TCP connection stays open, its QP stops answering, so
  # the client's operations exhaust their retries (or, frozen before READY, the wait for it
  # runs out).
  rm -f "$W/s.out" "$W/c.out"
  "$U" perf write_bw --ip "$NET.126" -p 19148 --timeout 60 >"$W/s.out" 2>"$W/s.err" &
  spid=$!
  timeout "$GUARD" "$U" perf write_bw --ip "$NET.127" -p 19148 -D 60 -u 12 --retry_count 3 \
    --timeout 10 --connect_timeout 30 "$NET.126" >"$W/c.out" 2>"$W/c.err" &
  cpid=$!
  until_file_has "$W/s.out" "#bytes"
  kill -STOP "$spid"
  wait "$cpid"
  rc=$?
  kill -9 "$spid"
  { wait "$spid"; } 2>/dev/null
  if [[ $rc -eq 1 ]] && one_line "$W/c.err" &&
    grep -qE "retry counter exceeded|no READY from the peer" "$W/c.err"; then
    ok "server frozen mid-run: $(cat "$W/c.err")"
  else
    bad "server frozen mid-run: rc $rc $(cat "$W/c.err")"
  fi
  # The client killed: the server reports the lost connection.
  rm -f "$W/s.out" "$W/c.out"
  "$U" perf send_bw --ip "$NET.126" -p 19143 --timeout 60 >"$W/s.out" 2>"$W/s.err" &
  spid=$!
  "$U" perf send_bw --ip "$NET.127" -p 19143 -D 60 --connect_timeout 30 \
    "$NET.126" >"$W/c.out" 2>"$W/c.err" &
  cpid=$!
  until_file_has "$W/c.out" "#bytes"
  kill -9 "$cpid"
  { wait "$cpid"; } 2>/dev/null
  wait_server
  if [[ $src -eq 1 ]] && one_line "$W/s.err" && grep -q "closed the TCP connection" "$W/s.err"; then
    ok "client killed mid-run: $(cat "$W/s.err")"
  else
    bad "client killed mid-run: rc $src $(cat "$W/s.err")"
  fi
}

case_timeouts_and_mismatch() {
  timeout "$GUARD" "$U" perf write_bw --ip "$NET.128" -p 19144 --timeout 1 >"$W/s.out" 2>"$W/s.err"
  local rc=$?
  if [[ $rc -eq 1 ]] && one_line "$W/s.err" && grep -q "no client connected within 1 s" "$W/s.err"; then
    ok "server without a client: $(cat "$W/s.err")"
  else
    bad "server without a client: rc $rc $(cat "$W/s.err")"
  fi
  server write_bw "$NET.128" 19145
  client read_bw "$NET.129" 19145 "$NET.128"
  wait_server
  if [[ $crc -eq 1 && $src -eq 1 ]] && one_line "$W/c.err" && grep -q "the client runs read_bw" "$W/c.err"; then
    ok "different tests on the two sides: $(cat "$W/c.err")"
  else
    bad "different tests: $crc/$src $(cat "$W/c.err" "$W/s.err")"
  fi
}

case_invalid_flags() {
  local args
  while IFS= read -r args; do
    # shellcheck disable=SC2086
    timeout "$GUARD" "$U" perf $args >"$W/c.out" 2>"$W/c.err"
    local rc=$?
    if [[ $rc -ne 0 && -s $W/c.err ]] && head -n 1 "$W/c.err" | grep -qiE "uroce perf:|error|required|invalid|could not|not"; then
      ok "invalid: perf $args -> $(head -n 1 "$W/c.err")"
    else
      bad "invalid: perf $args: rc $rc $(cat "$W/c.err")"
    fi
  done <<'EOF'
bogus_bw
write_bw -s 0
write_bw -s 9000000
write_bw -n 1
write_bw -q 0
write_lat -q 2
write_lat -D 3
write_bw -m 300
write_bw -t 0
atomic_bw -s 16
atomic_bw -A XOR
atomic_bw -a
write_bw -p 0
write_bw -s abc
write_bw --no-such-flag
write_bw -d uroce0 --ip 127.0.0.1
write_bw -d no-such-device 127.0.0.1
EOF
}

case_demo() {
  timeout "$GUARD" "$U" demo --server-ip "$NET.108" --client-ip "$NET.109" -p 19146 \
    --bw-iters 200 --lat-iters 100 >"$W/d.out" 2>"$W/d.err"
  local rc=$?
  if [[ $rc -eq 0 ]] && grep -q "all checks passed" "$W/d.out" &&
    [[ $(grep -c "^  ok " "$W/d.out") -eq 5 ]] && grep -q "^bandwidth:" "$W/d.out" &&
    grep -q "^latency:" "$W/d.out"; then
    ok "uroce demo"
  else
    bad "uroce demo: rc $rc $(cat "$W/d.out" "$W/d.err")"
  fi
  # The demo stays on loopback: any other address is refused before anything is sent.
  timeout "$GUARD" "$U" demo --server-ip 192.0.2.1 --client-ip "$NET.109" -p 19147 \
    >"$W/d.out" 2>"$W/d.err"
  rc=$?
  if [[ $rc -eq 2 ]] && one_line "$W/d.err" && grep -q "not a loopback address" "$W/d.err"; then
    ok "uroce demo refuses a non-loopback address: $(cat "$W/d.err")"
  else
    bad "uroce demo non-loopback address: rc $rc $(cat "$W/d.err")"
  fi
}

cases=("$@")
if [[ ${#cases[@]} -eq 0 ]]; then
  cases=(case_every_test case_table case_all_sizes case_qps_and_duration case_wrong_address
    case_connect_refused case_ports_in_use case_unreachable_peer case_peer_killed
    case_timeouts_and_mismatch case_invalid_flags case_demo)
fi
for c in "${cases[@]}"; do
  "$c"
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
