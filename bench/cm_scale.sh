#!/bin/bash
# Many rdma_cm connections at once (issue 43), with unmodified rdmacm-utils over the drop-in
# librdmacm.so.1 and libibverbs.so.1: a server and its client(s) on two uroce devices of this
# host (two loopback addresses, so two coordinators and their CMs talk CM MADs over UDP).
#
#   bench/cm_scale.sh BUILD_DIR cmtime N      cmtime -b SERVER -c N  /  cmtime -s SERVER -c N
#   bench/cm_scale.sh BUILD_DIR ucmatose N    ucmatose -c N connections, CM_MSGS messages each
#   bench/cm_scale.sh BUILD_DIR rping N       N rping pairs at once (`rping -s -V` on ports PORT to
#                                             PORT+N-1, a `rping -c -V` client for each), CM_MSGS
#                                             pings each
# (rping's persistent server, -P, is no way to get hundreds of connections from one rping: in
# rdmacm-utils 44 its connection thread takes the listener's latest connect request, so two
# requests that come close together are both cloned from the second; see docs/PERFORMANCE.md.)
#
# Environment:
#   CM_FAULTS=SPEC  UROCE_FAULTS of both sides, whose coordinators apply its class=cm rules to
#                   their CM MADs, e.g. `dir=tx,class=cm,loss=3%,seed=43`: the CMs' retries must
#                   bring every connection up and down anyway.
#   CM_NET          the first three octets of the two addresses (default 127.43.43: .1 the
#                   server's, .2 the clients'); CM_PORT (default 7443); CM_MSGS (default 10);
#   CM_LIMIT        seconds for the whole run (default 600).
#   CM_PEER_GONE=1  (ucmatose) CM_FAULTS loses every DREP the client's CM sends (`dir=tx,
#                   attr=drep,loss=100%`): the server's DREQs must all end by the ICMP port
#                   unreachable its client's host answers once the client's coordinator has
#                   exited, within CM_MAX_RESENDS (default 3) resent MADs per connection (below).
# Passes (exit 0) when the client(s) exit 0 with their success line (cmtime's step table,
# ucmatose's "test complete", rping's exit status, which -V makes fail on a data mismatch), and
# neither side printed an rdma_cm error or a sanitizer report. Prints the client's output (the
# first client's for rping), then the `uroce stats` lines of the devices' CMs: MADs sent,
# received, retransmitted, and the faults injected.
set -u
build=${1:?build dir} kind=${2:?cmtime, ucmatose or rping} n=${3:?connections}
build=$(cd "$build" && pwd)
libdir=$build/compat uroce=$build/src/tools/uroce
net=${CM_NET:-127.43.43} port=${CM_PORT:-7443} msgs=${CM_MSGS:-10} limit=${CM_LIMIT:-600}
saddr=$net.1 caddr=$net.2
prog=$kind
[ "$kind" = rping ] || [ "$kind" = cmtime ] || [ "$kind" = ucmatose ] || {
  echo "cm_scale: unknown kind $kind" >&2
  exit 2
}
if ! command -v "$prog" >/dev/null; then
  echo "SKIP: $prog is not installed (rdmacm-utils)"
  exit 77
fi
export LD_LIBRARY_PATH=$libdir
if readelf -d "$libdir/libibverbs.so.1" | grep -Eq 'libasan|libtsan'; then
  export LD_PRELOAD=${UROCE_TEST_PRELOAD:-}
  export ASAN_OPTIONS=detect_leaks=0
fi
[ -n "${CM_FAULTS:-}" ] && export UROCE_FAULTS=$CM_FAULTS
# Every connection is a QP and a few fds in each process: more than the default 1024.
ulimit -n "$(ulimit -Hn)" 2>/dev/null
tmp=$(mktemp -d)
spids=()
cpids=()
sampler=
cleanup() {
  for p in "${spids[@]}" "${cpids[@]}" $sampler; do kill "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
stats() { env -u LD_PRELOAD "$uroce" stats 2>/dev/null; }

# A device's coordinator applies the UROCE_FAULTS of the process that started it: one left from
# an earlier run on these addresses (it lingers 2 s after its last program, and while its CM
# still retransmits) would serve this run without CM_FAULTS.
if [ -n "${CM_FAULTS:-}" ] && stats | grep -Eq "^cm ($saddr|$caddr):"; then
  echo "FAIL: a coordinator of an earlier run still serves $saddr or $caddr (take another CM_NET)"
  exit 1
fi
case $kind in
  cmtime) server=(cmtime -b "$saddr" -p "$port" -c "$n") ;;
  ucmatose) server=(ucmatose -b "$saddr" -p "$port" -c "$n" -C "$msgs") ;;
esac
spids=()
if [ "$kind" = rping ]; then
  for i in $(seq 0 $((n - 1))); do
    UROCE_DEVICES=$saddr timeout -k 5 "$limit" rping -s -V -a "$saddr" -p $((port + i)) \
      -C "$msgs" >"$tmp/server.$i" 2>&1 &
    spids+=($!)
  done
  listeners=$n
else
  UROCE_DEVICES=$saddr timeout -k 5 "$limit" "${server[@]}" >"$tmp/server.0" 2>&1 &
  spids+=($!)
  listeners=1
fi
# Ready once every server's rdma_cm ID listens (in the coordinator's list).
up=0
for _ in $(seq 1 1200); do
  got=$(stats | grep -Ec "^cm_id $saddr:4791 pid [0-9]+ ps tcp port [0-9]+ state listening")
  if [ "$got" -ge "$listeners" ]; then
    up=1
    break
  fi
  sleep 0.1
done
if [ "$up" -ne 1 ]; then
  echo "FAIL: the server(s) never listened"
  tail -5 "$tmp"/server.*
  exit 1
fi

# The devices' CM counters, sampled while the run goes (observation only): a coordinator exits
# once its last program has and its timers are done, so one look at the end may find none. The
# counters only grow, so each device's last sample is its total.
(
  while :; do
    stats | grep -E "^(cm|faults) ($saddr|$caddr):" >>"$tmp/samples"
    sleep 1
  done
) &
sampler=$!
start=$(date +%s.%N)
ok=1
case $kind in
  cmtime | ucmatose)
    client=("$prog" -s "$saddr" -p "$port" -c "$n")
    [ "$kind" = ucmatose ] && client+=(-C "$msgs")
    UROCE_DEVICES=$caddr timeout -k 5 "$limit" "${client[@]}" >"$tmp/client.0" 2>&1
    rc=$?
    [ "$rc" -eq 0 ] || { echo "client exit $rc"; ok=0; }
    want="connect  "
    [ "$kind" = ucmatose ] && want="test complete"
    grep -q -- "$want" "$tmp/client.0" || ok=0
    ;;
  rping)
    for i in $(seq 0 $((n - 1))); do
      UROCE_DEVICES=$caddr timeout -k 5 "$limit" rping -c -V -a "$saddr" -p $((port + i)) \
        -C "$msgs" >"$tmp/client.$i" 2>&1 &
      cpids+=($!)
    done
    failed=0
    for i in "${!cpids[@]}"; do
      wait "${cpids[$i]}" || {
        failed=$((failed + 1))
        echo "rping client $i failed:"
        tail -5 "$tmp/client.$i"
      }
    done
    cpids=()
    echo "rping: $((n - failed)) of $n clients verified $msgs pings each" | tee "$tmp/client.summary"
    [ "$failed" -eq 0 ] || ok=0
    ;;
esac
end=$(date +%s.%N)
# ucmatose's and rping's servers exit by themselves once their connections are done;
# cmtime's serves until stopped.
if [ "$kind" = cmtime ]; then
  kill "${spids[0]}" 2>/dev/null
  wait "${spids[0]}" 2>/dev/null
else
  for i in "${!spids[@]}"; do
    wait "${spids[$i]}" || {
      echo "server $i failed"
      ok=0
    }
  done
  [ "$kind" = ucmatose ] && { grep -q "test complete" "$tmp/server.0" || ok=0; }
  # Observation only: a server waits for its connections' DISCONNECTED (ucmatose) or its
  # client's last message; one that ends long after its client waited for a lost CM MAD's retry.
  server_after=$(echo "$(date +%s.%N) - $end" | bc)
fi
spids=()
# The last sample once the servers have ended (their coordinators stay 2 s after them), for
# what their CMs did to the end: the DREQs of ucmatose's server are its last MADs.
stats | grep -E "^(cm|faults) ($saddr|$caddr):" >>"$tmp/samples"
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
sampler=
# Each device's last sample.
tac "$tmp/samples" | awk '!seen[$1 " " $2]++' | sort >"$tmp/stats"
if grep -Eiq 'error|fail|reject|unreachable|mismatch|Sanitizer|runtime error' "$tmp"/server.* \
  "$tmp"/client.*; then
  echo "FAIL: an error in the output:"
  grep -Eih 'error|fail|reject|unreachable|mismatch|Sanitizer|runtime error' "$tmp"/server.* \
    "$tmp"/client.* | sort | uniq -c | head -20
  ok=0
fi
# Under CM_FAULTS the CMs must have lost MADs and retransmitted (the server's coordinator at
# least is still up): a run the faults never reached proves nothing.
if [ -n "${CM_FAULTS:-}" ]; then
  lost=$(grep -o 'fault_tx_loss [0-9]*' "$tmp/stats" | awk '{s += $2} END {print s + 0}')
  resent=$(grep -o 'retransmits [0-9]*' "$tmp/stats" | awk '{s += $2} END {print s + 0}')
  echo "CM MADs lost: $lost, retransmitted: $resent"
  if [ "$lost" -eq 0 ] || [ "$resent" -eq 0 ]; then
    echo "FAIL: no CM MAD was lost or retransmitted under $CM_FAULTS"
    ok=0
  fi
fi
# ucmatose's server disconnects, and its client answers each DREQ with a DREP and exits; its
# coordinator exits 2 s later. A lost DREP then leaves the server's DREQ to a port where nothing
# listens: the host's ICMP port unreachable ends it at once (peer_unreachable), where the CM
# used to retry it 15 times, 4 s apart, and give up (dreq_timeouts): the server ended a minute
# after its client (issue 43).
if [ "$kind" = ucmatose ]; then
  line=$(grep "^cm $saddr:" "$tmp/stats")
  given_up=$(echo "$line" | grep -o 'dreq_timeouts [0-9]*' | awk '{print $2}')
  gone=$(echo "$line" | grep -o 'peer_unreachable [0-9]*' | awk '{print $2}')
  echo "the server's CM: DREQs given up after all their retries: ${given_up:-?}," \
    "peers found gone (ICMP port unreachable): ${gone:-?}"
  if [ "${given_up:-x}" != 0 ]; then
    echo "FAIL: the server's CM retried a DREQ to the end (or its stats were not read)"
    ok=0
  fi
fi
# CM_PEER_GONE=1: no DREP of the client's ever arrives, so every DREQ of the server's is still
# being resent when the client's coordinator exits, and the next resend draws the ICMP: the path
# above taken on purpose rather than by a chance loss. Every DREQ must have ended that way
# (unreachable_ended = N), none given up, and the server's CM must have resent at most
# CM_MAX_RESENDS MADs per connection, where retrying each DREQ to the end is 15 (the bound is in
# CM retries, not seconds: a DREQ is resent every ~4.3 s, the ID's response timeout, and the
# client's coordinator exits 2 s after the client).
if [ "${CM_PEER_GONE:-0}" = 1 ]; then
  max_resends=${CM_MAX_RESENDS:-3}
  line=$(grep "^cm $saddr:" "$tmp/stats")
  field() { echo "$line" | grep -o "$1 [0-9]*" | awk '{print $2}'; }
  ended=$(field unreachable_ended) gone=$(field peer_unreachable) resent=$(field retransmits)
  drep_lost=$(grep "^cm $caddr:" "$tmp/stats" | grep -o 'fault_tx_loss [0-9]*' | awk '{print $2}')
  echo "peer gone: the server's CM ended ${ended:-?} of $n DREQs on ${gone:-?} ICMP port" \
    "unreachable(s), resending ${resent:-?} MADs; the client's CM lost ${drep_lost:-?} DREPs"
  if [ "$kind" != ucmatose ] || [ "${ended:-x}" != "$n" ] || [ "${gone:-0}" -lt 1 ] ||
    [ "${resent:-x}" = x ] || [ "$resent" -gt $((max_resends * n)) ] || [ "${drep_lost:-0}" -lt 1 ]; then
    echo "FAIL: the DREQs did not all end by the ICMP path within $max_resends resends each"
    ok=0
  fi
fi
echo "--- client: $kind, $n connections${CM_FAULTS:+, faults $CM_FAULTS}"
head -40 "$tmp/client.0"
printf 'wall time: %.1f s\n' "$(echo "$end - $start" | bc)"
[ -n "${server_after:-}" ] && printf 'the server(s) ended %.1f s after the client(s)\n' "$server_after"
echo "--- uroce stats"
cat "$tmp/stats"
if [ "$ok" -ne 1 ]; then
  echo "--- server"
  tail -20 "$tmp/server.0"
  echo "FAIL: $kind with $n connections"
  exit 1
fi
echo "PASS: $kind with $n connections"
