#!/bin/bash
# Debian's UCX (1.13, ucx-utils) over the drop-in libibverbs.so.1 (issue 16).
#
#   ucx_test.sh info LIBDIR UROCE ADDR
#   ucx_test.sh perf LIBDIR UROCE SERVER_ADDR CLIENT_ADDR TCP_PORT TLS TEST:SIZE:ITERS...
#
# UCX uses a verbs device only when /dev/infiniband/<dev_name> is an accessible character
# device: both first run `uroce setup` (root; idempotent; the links stay for the next test,
# and for tests running beside this one: nothing here removes them). Skipped (77) when not
# root or when UCX is not installed.
#
# info: `ucx_info -d` on the device at ADDR lists rc_verbs and ud_verbs on uroce0:1.
# perf: for each TEST:SIZE:ITERS, `ucx_perftest` as a server (on SERVER_ADDR) and a client (on
# CLIENT_ADDR, connecting over TCP_PORT) with UCX_TLS=TLS and UCX_NET_DEVICES=uroce0:1; each
# must exit 0 and the client print its "Final:" line. A UCT test (am_lat, put_bw, ...) is
# TEST:SIZE:ITERS:LAYOUT (short, bcopy, zcopy) and runs on TLS's first transport alone
# (ucx_perftest -x TL -d uroce0:1 -D LAYOUT): no UCP above it, no wire-up transport beside it.
# Then uroce's counters (UROCE_STATS_FILE of every run) must show the data went through uroce:
# each side received or sent at least the bytes the tests moved. With rc_verbs in TLS, the client's captures (UROCE_PCAP) must show RC packets
# carrying at least that much payload: the data went over RC QPs, not over UD.
set -u
mode=$1 libdir=$2 uroce=$3
shift 3

for prog in ucx_info ucx_perftest; do
  if ! command -v "$prog" >/dev/null; then
    echo "SKIP: $prog is not installed (apt-get install ucx-utils)"
    exit 77
  fi
done
if ((EUID != 0)); then
  echo "SKIP: needs root for /dev/infiniband/uverbs0 (uroce setup); CI runs as root"
  exit 77
fi
if ! "$uroce" setup >/dev/null; then
  echo "FAIL: uroce setup"
  exit 1
fi

export LD_LIBRARY_PATH=$libdir
# A sanitizer build of the library needs its runtime loaded first (UCX is not instrumented);
# leaks of the programs themselves are not ours to report.
if readelf -d "$libdir/libibverbs.so.1" | grep -Eq 'libasan|libtsan'; then
  export LD_PRELOAD="${UROCE_TEST_PRELOAD:-}"
  export ASAN_OPTIONS=detect_leaks=0
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

saddr=$1 caddr=$2 port=$3 tls=$4
shift 4
export UCX_TLS=$tls UCX_NET_DEVICES=uroce0:1
moved=0 # bytes the tests moved (size x iterations, summed)
run=0
for spec in "$@"; do
  IFS=: read -r test size iters layout <<<"$spec"
  run=$((run + 1))
  uct=()
  [[ -n $layout ]] && uct=(-x "${tls%%,*}" -d uroce0:1 -D "$layout")
  UROCE_DEVICES=$saddr UROCE_STATS_FILE=$tmp/server.stats \
    timeout -k 5 60 ucx_perftest -p "$port" "${uct[@]}" >"$tmp/server.$run" 2>&1 &
  spid=$!
  # Wait (bounded) until the server listens; a probe connection would be taken for the client.
  for _ in $(seq 1 200); do
    ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  UROCE_DEVICES=$caddr UROCE_STATS_FILE=$tmp/client.stats UROCE_PCAP=$tmp/client.$run.pcap \
    timeout -k 5 60 ucx_perftest 127.0.0.1 -p "$port" "${uct[@]}" -t "$test" -s "$size" \
    -n "$iters" >"$tmp/client.$run" 2>&1
  crc=$?
  wait "$spid"
  src=$?
  if ((src != 0 || crc != 0)) || ! grep -q '^Final:' "$tmp/client.$run" ||
    grep -Eq 'UCX +(ERROR|WARN)|Fatal' "$tmp/server.$run" "$tmp/client.$run"; then
    echo "FAIL: UCX_TLS=$tls ${uct[*]} $test -s $size -n $iters (server exit $src, client exit $crc)"
    echo "----- server (UROCE_DEVICES=$saddr) -----"
    cat "$tmp/server.$run"
    echo "----- client (UROCE_DEVICES=$caddr) -----"
    cat "$tmp/client.$run"
    exit 1
  fi
  echo "ok: UCX_TLS=$tls ${uct[*]} $test -s $size -n $iters: $(grep '^Final:' "$tmp/client.$run")"
  moved=$((moved + size * iters))
done

# field NAME FILE: NAME's values on the file's `link` lines, summed (one line per run).
field() {
  awk -v n="$1" '$1 == "link" { for (i = 2; i < NF; i++) if ($i == n) s += $(i + 1) }
                 END { print s + 0 }' "$2"
}
fail=0
for side in server client; do
  rcvd=$(field rcvd_bytes "$tmp/$side.stats")
  sent=$(field sent_bytes "$tmp/$side.stats")
  echo "uroce counters, $side: sent_bytes $sent rcvd_bytes $rcvd (the tests moved $moved bytes)"
  # ucp_put_bw moves data from the client to the server, tag_bw too; tag_lat and am_lat both
  # ways; ucp_get from the server to the client. Either side received at least the tests' bytes
  # or sent them: the server the puts and sends, the client the RDMA READ responses of a
  # rendezvous or of a get (or the server's replies).
  ((rcvd + sent >= moved)) || fail=1
done
if [[ $tls == *rc_verbs* ]]; then
  # Payload bytes of RC packets in the client's captures (both directions).
  rc_bytes=0
  for f in "$tmp"/client.*.pcap; do
    b=$("$uroce" pcap dump "$f" | awk '/^ +BTH +RC / { rc = 1; next } /^ +BTH / { rc = 0 }
                                        rc && /^ +payload [0-9]+ bytes/ { s += $2 }
                                        END { print s + 0 }')
    rc_bytes=$((rc_bytes + b))
  done
  echo "RC payload in the client's captures: $rc_bytes bytes"
  ((rc_bytes >= moved)) || fail=1
fi
if ((fail != 0)); then
  echo "FAIL: uroce's counters do not account for the data the tests moved"
  cat "$tmp/server.stats" "$tmp/client.stats"
  exit 1
fi
echo "PASS: UCX_TLS=$tls: ${#@} ucx_perftest runs over uroce"
