#!/bin/bash
# Debian's UCX (1.13, ucx-utils) over the drop-in libibverbs.so.1 (issue 16).
#
#   ucx_test.sh info LIBDIR UROCE ADDR
#   ucx_test.sh perf LIBDIR UROCE SERVER_ADDR CLIENT_ADDR TCP_PORT TLS TEST:SIZE:ITERS...
#   ucx_test.sh netns LIBDIR UROCE NET TCP_PORT TLS TEST:SIZE:ITERS...
#
# UCX uses a verbs device only when /dev/infiniband/<dev_name> is an accessible character
# device: both first run `uroce setup` (root; idempotent; the links stay for the next test,
# and for tests running beside this one: nothing here removes them). Skipped (77) when not
# root or when UCX is not installed.
#
# info: `ucx_info -d` on the device at ADDR lists rc_verbs and ud_verbs on uroce0:1.
# perf: every TEST:SIZE:ITERS with `ucx_perftest` as a server (on SERVER_ADDR) and a client (on
# CLIENT_ADDR, connecting over TCP_PORT), with UCX_TLS=TLS and UCX_NET_DEVICES=uroce0:1: one
# server and one client for all runs (a batch file), or with rc_verbs in TLS a pair per run;
# each must exit 0 and the client print a "Final:" line for every run. A UCT test (am_lat, put_bw, ...) is TEST:SIZE:ITERS:LAYOUT (short, bcopy,
# zcopy) and runs on TLS's first transport alone (ucx_perftest -x TL -d uroce0:1 -D LAYOUT): no
# UCP above it, no wire-up transport beside it. Then uroce's counters (UROCE_STATS_FILE) must
# show the data went through uroce: each side received or sent at least the bytes the tests
# moved. With rc_verbs in TLS, the client's capture (UROCE_PCAP) must show RC packets carrying
# at least that much payload: the data went over RC QPs, not over UD.
# netns: the same with the server in one network namespace and the client in another, made
# here (netns_lib.sh: uroce-ucx-PID-a with NET.1, -b with NET.2, a veth pair between them,
# removed at exit), each side's uroce0 on its end of the veth; and the veth's own counters
# must have carried at least the bytes the tests moved.
# With UROCE_TEST_AEAD=MODE (what follows aead= on a config line: "encrypt psk=HEX"), each side's
# device is at aead=MODE, from a config file instead of UROCE_DEVICES (issue 44): UCX connects
# its QPs itself (its wire-up over UD, or over TCP here), so its packets are sealed with the
# devices' pre-shared key. Then each side's counters must also show packets sealed and sealed
# packets opened, no plain packet taken and none dropped (stats_sealed), and, with rc_verbs, every
# sealed packet of the client's captures must verify under the key (`uroce pcap check --psk`).
set -u
mode=$1 libdir=$2 uroce=$3
shift 3

source "$(dirname "$0")/require_lib.sh"
require_programs ucx-utils ucx_info ucx_perftest
require_root "for /dev/infiniband/uverbs0 (uroce setup)"
require_setup "$uroce"

export LD_LIBRARY_PATH=$libdir
# A sanitizer build of the library needs its runtime loaded first (UCX is not instrumented);
# leaks of the programs themselves are not ours to report.
if readelf -d "$libdir/libibverbs.so.1" | grep -Eq 'libasan|libtsan'; then
  export LD_PRELOAD="${UROCE_TEST_PRELOAD:-}"
  export ASAN_OPTIONS=detect_leaks=0
fi
# Under ThreadSanitizer, without UCX's memory hooks: its madvise hook, called by glibc as a
# thread exits, takes a lock through ThreadSanitizer's interceptor after the thread's state is
# gone and crashes ucx_info -d with or without uroce (rdma-core's libibverbs alike).
if readelf -d "$libdir/libibverbs.so.1" | grep -q libtsan; then
  export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no
fi
# Only uroce's device, and nothing from the user's UCX configuration.
unset UCX_TLS UCX_NET_DEVICES UCX_UD_VERBS_ETH_DGID_CHECK
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ "$mode" = info ]; then
  addr=$1
  UROCE_DEVICES=$addr timeout -k 5 60 ucx_info -d >"$tmp/info" 2>&1
  rc=$?
  # Each transport's block: "# Transport: NAME" then "# Device: DEV".
  found=$(awk '/# +Transport:/ {t = $3} /# +Device:/ {print t " " $3}' "$tmp/info")
  ok=1
  ((rc == 0)) || ok=0
  for tl in rc_verbs ud_verbs; do
    grep -qx "$tl uroce0:1" <<<"$found" || ok=0
  done
  if ((ok != 1)); then
    echo "FAIL: ucx_info -d (exit $rc) does not list rc_verbs and ud_verbs on uroce0:1"
    cat "$tmp/info"
    exit 1
  fi
  echo "PASS: ucx_info -d lists:"
  grep 'verbs uroce0:1' <<<"$found"
  exit 0
fi

if [ "$mode" = netns ]; then
  # Server in one namespace, client in the other, each device on its own end of the veth.
  net=$1
  shift
  source "$(dirname "$0")/netns_lib.sh"
  netns_reap uroce-ucx
  trap 'netns_pair_del; rm -rf "$tmp"' EXIT
  trap 'exit 1' INT TERM
  netns_pair "uroce-ucx-$$" "$net" || exit 1
  saddr=uroce0=$ADDR_A caddr=uroce0=$ADDR_B connect=$ADDR_A
  srv=(ip netns exec "$NS_A") cli=(ip netns exec "$NS_B")
else
  saddr=$1 caddr=$2 connect=127.0.0.1 srv=() cli=()
  shift 2
fi
port=$1 tls=$2
shift 2
source "$(dirname "$0")/stats_lib.sh"
aead=${UROCE_TEST_AEAD:-}
export UCX_TLS=$tls UCX_NET_DEVICES=uroce0:1
# The runs, as ucx_perftest's batch file (-b) takes them: a line per run, "NAME OPTIONS...".
moved=0 # bytes the tests moved (size x iterations, summed)
run=0
for spec in "$@"; do
  IFS=: read -r test size iters layout <<<"$spec"
  run=$((run + 1))
  uct=''
  [[ -n $layout ]] && uct="-x ${tls%%,*} -d uroce0:1 -D $layout"
  echo "run$run -t $test -s $size -n $iters $uct" >>"$tmp/batch"
  moved=$((moved + size * iters))
done

# pair NAME BATCH: one ucx_perftest server and client running BATCH's runs one after the other
# (each run sets up and tears down its own UCP or UCT context and endpoints); both must exit 0
# and the client print a "Final:" line per run (a batch's client exits 0 even when a run
# failed). The client's capture is NAME.pcap: UROCE_PCAP holds what the process's last device
# open saw (each open starts the file anew), so a capture that must hold every run's packets
# needs a process per run.
pair() {
  local name=$1 batch=$2 crc src finals n
  n=$(wc -l <"$batch")
  env -u UROCE_DEVICES "$(device_env "$saddr" "$aead" "$tmp")" \
    UROCE_STATS_FILE="$tmp/server.stats" "${srv[@]}" \
    timeout -k 5 150 ucx_perftest -p "$port" -b "$batch" >"$tmp/$name.server" 2>&1 &
  local spid=$!
  # Wait (bounded) until the server listens; a probe connection would be taken for the client.
  for _ in $(seq 1 200); do
    "${srv[@]}" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  env -u UROCE_DEVICES "$(device_env "$caddr" "$aead" "$tmp")" \
    UROCE_STATS_FILE="$tmp/client.stats" UROCE_PCAP="$tmp/$name.pcap" "${cli[@]}" \
    timeout -k 5 150 ucx_perftest "$connect" -p "$port" -b "$batch" >"$tmp/$name.client" 2>&1
  crc=$?
  wait "$spid"
  src=$?
  finals=$(grep -c '^Final:' "$tmp/$name.client")
  if ((src != 0 || crc != 0 || finals != n)) ||
    grep -Eq 'UCX +(ERROR|WARN)|Fatal' "$tmp/$name.server" "$tmp/$name.client"; then
    echo "FAIL: UCX_TLS=$tls: server exit $src, client exit $crc, $finals of $n runs finished"
    echo "----- runs -----"
    cat "$batch"
    echo "----- server (UROCE_DEVICES=$saddr) -----"
    cat "$tmp/$name.server"
    echo "----- client (UROCE_DEVICES=$caddr) -----"
    cat "$tmp/$name.client"
    exit 1
  fi
  paste -d ' ' <(sed 's/^run[0-9]* /ok: /' "$batch") <(grep '^Final:' "$tmp/$name.client")
}
if [[ $tls == *rc_verbs* ]]; then
  # A process pair per run, for the captures (below).
  for ((i = 1; i <= run; i++)); do
    sed -n "${i}p" "$tmp/batch" >"$tmp/batch.$i"
    pair "run$i" "$tmp/batch.$i"
  done
else
  pair all "$tmp/batch"
fi

fail=0
for side in server client; do
  rcvd=$(stats_sum rcvd_bytes link "$tmp/$side.stats")
  sent=$(stats_sum sent_bytes link "$tmp/$side.stats")
  echo "uroce counters, $side: sent_bytes $sent rcvd_bytes $rcvd (the tests moved $moved bytes)"
  # ucp_put_bw moves data from the client to the server, tag_bw too; tag_lat and am_lat both
  # ways; ucp_get from the server to the client. Either side received at least the tests' bytes
  # or sent them: the server the puts and sends, the client the RDMA READ responses of a
  # rendezvous or of a get (or the server's replies).
  ((rcvd + sent >= moved)) || fail=1
  if [[ -n $aead ]]; then
    sealed=$(stats_sealed "$tmp/$side.stats") || fail=1
    echo "aead=${aead%% *}, $side: $sealed"
  fi
done
if [[ $tls == *rc_verbs* ]]; then
  # Payload bytes of RC packets in the client's captures (both directions).
  rc_bytes=0
  for f in "$tmp"/run*.pcap; do
    b=$("$uroce" pcap dump "$f" | awk '/^ +BTH +RC / { rc = 1; next } /^ +BTH / { rc = 0 }
                                        rc && /^ +payload [0-9]+ bytes/ { s += $2 }
                                        END { print s + 0 }')
    rc_bytes=$((rc_bytes + b))
  done
  echo "RC payload in the client's captures: $rc_bytes bytes"
  ((rc_bytes >= moved)) || fail=1
  if [[ $aead == *psk=* ]]; then
    psk=${aead##*psk=}
    "$uroce" pcap check --psk "${psk%% *}" "$tmp"/run*.pcap || fail=1
  fi
fi
if [ "$mode" = netns ]; then
  # The kernel's count of what crossed the veth (both directions, at the server's end).
  veth=0
  for d in rx tx; do
    b=$(ip netns exec "$NS_A" cat /sys/class/net/uv0/statistics/${d}_bytes)
    veth=$((veth + b))
  done
  echo "veth $NS_A <-> $NS_B: $veth bytes"
  ((veth >= moved)) || fail=1
fi
if ((fail != 0)); then
  echo "FAIL: uroce's counters do not account for the data the tests moved"
  cat "$tmp/server.stats" "$tmp/client.stats"
  exit 1
fi
echo "PASS: UCX_TLS=$tls: ${#@} ucx_perftest runs over uroce${aead:+, aead=${aead%% *}}"
