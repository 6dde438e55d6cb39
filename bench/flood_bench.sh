#!/usr/bin/env bash
# Floods against a device (issue 43): an 8-byte RDMA WRITE ping-pong's latency and a 64 KiB
# RDMA WRITE stream's bandwidth (`uroce perf write_lat`, `write_bw`) while bench/roce_flood.py
# hits the server device's UDP port 4791, against no flood, interleaved in one run:
#
#   bench/flood_bench.sh [ROUNDS] [RATE]       # default 3 rounds, 20000 packets/s
#   UROCE_BUILD=build bench/flood_bench.sh 1   # the tree to take `uroce` from (build-release)
#
# Conditions, each round in this order: none; garbage (random bytes, random lengths); valid
# (well-formed BTHs from the client's own address: unknown QPNs, the server's QPN with a bad
# ICRC, with a good ICRC and a wrong PSN, and WRITEs with a random RETH and rkey). The flood
# targets the QPN the server's QP got, read from `uroce stats --qp` once it exists, so it
# starts within a second of each test (the latency test runs 100000 iterations, the stream
# 5 s). Prints a line per test and round, then per condition the median ratios against
# `none` (latency: flood / none, above 1 worse; bandwidth: flood / none, below 1 worse).
#
# Fails (exit 1) when progress starves (a test does not complete: `uroce perf` bounds every
# wait for its peer, --timeout 60) or memory is not bounded (the server's peak RSS under a
# flood above its peak without one by more than 10% + 8 MiB). Server and client on
# SERVER_IP / CLIENT_IP (127.0.0.221 / .222).
set -u
rounds=${1:-3}
rate=${2:-20000}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${UROCE_BUILD:-$root/build-release}
uroce=$build/src/tools/uroce
sip=${SERVER_IP:-127.0.0.221}
cip=${CLIENT_IP:-127.0.0.222}
port=${FLOOD_PORT:-18590}
[[ -x $uroce ]] || { echo "flood_bench: $uroce missing (ninja -C $build uroce uroce-devd)" >&2; exit 2; }
tmp=$(mktemp -d)
flood=
cleanup() {
  [[ -n $flood ]] && kill "$flood" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail=0
q() { "$uroce" "$@"; }

# lqpn PID: the first QP number of PID's device, once it has one (bounded wait).
lqpn() {
  local n
  for _ in $(seq 1 300); do
    n=$(q stats --qp 2>/dev/null | awk -v p="$1" '$1 == "qp" && $4 == p { print $6; exit }')
    [[ -n $n ]] && { echo "$n"; return 0; }
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# run_test COND TEST ARGS...: one `uroce perf` pair under COND; writes the JSON result value
# (t_typical_us or bw_avg_gbit_s) and the server's peak RSS (kB) to $tmp/result.
run_test() {
  local cond=$1 test=$2 key sp cp rc peak=0 r
  shift 2
  [[ $test == write_lat ]] && key=t_typical_us || key=bw_avg_gbit_s
  UROCE_STATS_FILE=$tmp/stats.$cond "$uroce" perf "$test" --ip "$sip" -p $port --timeout 60 "$@" \
    >"$tmp/s" 2>&1 &
  sp=$!
  for _ in $(seq 1 200); do
    ss -Hltn "sport = :$port" | grep -q . && break
    sleep 0.05
  done
  "$uroce" perf "$test" --ip "$cip" -p $port --timeout 60 --json "$@" "$sip" >"$tmp/c" 2>&1 &
  cp=$!
  if [[ $cond != none ]]; then
    local n
    n=$(lqpn $sp) || n=1
    python3 "$root/bench/roce_flood.py" --dst "$sip" --src "$cip" --mode "$cond" --qpn "$n" \
      --rate "$rate" --seconds 600 >"$tmp/flood" 2>&1 &
    flood=$!
  fi
  while kill -0 $cp 2>/dev/null; do
    r=$(awk '/^VmRSS:/ { print $2 }' /proc/$sp/status 2>/dev/null)
    ((${r:-0} > peak)) && peak=$r
    sleep 0.2
  done
  wait $cp
  rc=$?
  wait $sp
  [[ -n $flood ]] && { kill $flood; wait $flood; flood=; }
  if ((rc != 0)); then
    echo "FAIL: $test under $cond did not complete (status $rc): $(tail -2 "$tmp/c")" >&2
    fail=1
    echo "nan $peak" >"$tmp/result"
    return
  fi
  echo "$(sed -nE "s/.*\"$key\":([0-9.]+).*/\1/p" "$tmp/c" | tail -1) $peak" >"$tmp/result"
}

declare -A res
for r in $(seq 1 "$rounds"); do
  for cond in none garbage valid; do
    run_test $cond write_lat -s 8 -n 100000
    read -r lat peak1 <"$tmp/result"
    run_test $cond write_bw -s 65536 -D 5
    read -r bw peak2 <"$tmp/result"
    peak=$((peak1 > peak2 ? peak1 : peak2))
    res[$cond.lat]+="$lat " res[$cond.bw]+="$bw " res[$cond.rss]+="$peak "
    echo "round $r $cond: write_lat 8 B t_typical ${lat} us, write_bw 64 KiB ${bw} Gb/s," \
      "server peak RSS ${peak} kB; flood: $(cat "$tmp/flood" 2>/dev/null)"
    rm -f "$tmp/flood"
    grep -h '^link' "$tmp/stats.$cond" 2>/dev/null | awk '{ for (i = 5; i < NF; i++)
      if ($i ~ /^(unknown_qpn|icrc_err|rx_drops|out_of_seq_request|qkey_violations)$/) s[$i] += $(i + 1) }
      END { printf "  server counters:"; for (k in s) printf " %s %d", k, s[k]; print "" }'
    rm -f "$tmp/stats.$cond"
  done
done
med() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "nan" }'; }
nl=$(med <<<"${res[none.lat]}") nb=$(med <<<"${res[none.bw]}") nr=$(med <<<"${res[none.rss]}")
echo "none: latency ${nl} us, bandwidth ${nb} Gb/s, server peak RSS ${nr} kB (medians of $rounds)"
for cond in garbage valid; do
  l=$(med <<<"${res[$cond.lat]}") b=$(med <<<"${res[$cond.bw]}") m=$(med <<<"${res[$cond.rss]}")
  awk -v c=$cond -v l="$l" -v b="$b" -v nl="$nl" -v nb="$nb" -v m="$m" -v nr="$nr" -v rate="$rate" 'BEGIN {
    printf "%s flood (%d pkt/s): latency ratio %.3f, bandwidth ratio %.3f, server peak RSS %d kB (%+d kB)\n",
      c, rate, l / nl, b / nb, m, m - nr }'
  for p in ${res[$cond.rss]}; do
    if ((p > nr * 110 / 100 + 8192)); then
      echo "FAIL: server RSS under the $cond flood $p kB, without one $nr kB" >&2
      fail=1
    fi
  done
done
((fail == 0)) && echo PASS || echo FAIL
exit $fail
