#!/usr/bin/env bash
# A flood of port 4791 against a shared device, asserting behaviour, not speed (issue 43; ctest
# bench.flood_accounting, label device):
#
#   bench/flood_test.sh UROCE [ITERS] [RATE]
#
# Addresses NET.1 and NET.2 of UROCE_TEST_NET (127.143.7 without it; uroce_test_net gives a
# block of its own), TCP ports UROCE_TEST_PORT and the next (18437).
#
# The flooded device is uroce0 at NET.1, shared (its coordinator, uroce-devd, steers by QPN).
# An "anchor" process holds a QP there and never connects (`uroce perf write_lat` server without
# a client): the flood's known QPN. bench/roce_flood.py then sends, at RATE packets/s (default
# 20000), from NET.2 (the ping-pong client's own address) in turn: a random QPN with a good ICRC,
# the anchor's QPN with a bad ICRC, with a good ICRC and a wrong PSN, a WRITE with a random RETH
# and rkey, and random bytes of 0-1500. While it runs, an 8-byte RDMA WRITE ping-pong of ITERS
# round trips (default 5000; `uroce perf write_lat`, NET.1 <- NET.2, another context of the same
# device) must complete. Then, the flood stopped, every flood packet must show in `uroce stats`
# (bounded wait for the counters to settle):
#   flood packets = coordinator's unsteered_pkts (no owner, or no RoCE packet at all)
#                 + anchor's rx_drops (icrc_err ...), unknown_qpn and QP drops (qp_dropped_pkts,
#                   src_addr_drops, src_port_drops)
#                 + the same of the ping-pong's server (a random QPN may fall in its block)
#                 + what the kernel dropped at those sockets (/proc/net/udp, "drops")
# exactly, the anchor's icrc_err at least the bad-ICRC packets it was sent (less kernel drops),
# and neither the anchor's nor the coordinator's RSS may have grown by more than 16 MiB (a
# retained byte per flood byte would be tens of MiB). Needs no privilege.
set -u
uroce=$1 iters=${2:-5000} rate=${3:-20000}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
net=${UROCE_TEST_NET:-127.143.7}
sip=$net.1 cip=$net.2
anchor_port=${UROCE_TEST_PORT:-18437}
pair_port=$((anchor_port + 1))
tmp=$(mktemp -d)
anchor='' flood='' ps='' pc=''
cleanup() {
  local p
  for p in $flood $pc $ps $anchor; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  "$uroce" stats 2>/dev/null | grep -E "^(shared|member) $sip:" 
  exit 1
}

# sample: one `uroce stats` (live) as "UNSTEERED DROPS ICRC": the coordinator's unsteered_pkts
# for NET.1:4791, the anchor's drops ($qp_drops summed) and its icrc_err.
sample() {
  "$uroce" stats 2>/dev/null | awk -v a="$sip:4791" -v p="$anchor" -v names=" $qp_drops " '
    $1 == "shared" && $2 == a { u = $6 }
    $1 == "link" && $4 == p { for (i = 5; i < NF; i++) {
      if (index(names, " " $i " ")) d += $(i + 1)
      if ($i == "icrc_err") c += $(i + 1) } }
    END { print u + 0, d + 0, c + 0 }'
}
# kdrops PID...: what the kernel dropped at these processes' sockets bound to NET.1:4791 (a
# receive buffer full), each socket once (the anchor and the coordinator share some).
kdrops() {
  local hex inodes p
  hex=$(printf '%02X%02X%02X%02X:12B7' $(echo "$sip" | awk -F. '{ print $4, $3, $2, $1 }'))
  inodes=$(for p in "$@"; do ls -l /proc/"$p"/fd 2>/dev/null; done |
    sed -n 's/.*socket:\[\([0-9]*\)\].*/\1/p' | sort -u | tr '\n' ' ')
  awk -v h="$hex" -v ino=" $inodes " '$2 == h && index(ino, " " $10 " ") { s += $NF }
    END { print s + 0 }' /proc/net/udp
}
rss() { awk '/^VmRSS:/ { print $2 }' /proc/"$1"/status 2>/dev/null || echo 0; }
devd_pid() {
  ss -Hulpn "sport = :4791" 2>/dev/null | awk -v a="$sip:4791" '$4 == a' |
    sed -n 's/.*"uroce-devd",pid=\([0-9]*\).*/\1/p' | head -1
}
qp_drops="rx_drops unknown_qpn qp_dropped_pkts src_addr_drops src_port_drops"

# The anchor and its QPN (bounded wait).
"$uroce" perf write_lat --ip "$sip" -p $anchor_port --timeout 600 >"$tmp/anchor" 2>&1 &
anchor=$!
qpn=
for _ in $(seq 1 600); do
  qpn=$("$uroce" stats --qp 2>/dev/null | awk -v p=$anchor '$1 == "qp" && $4 == p { print $6; exit }')
  [[ -n $qpn ]] && break
  kill -0 $anchor 2>/dev/null || fail "the anchor exited: $(cat "$tmp/anchor")"
  sleep 0.05
done
[[ -n $qpn ]] || fail "the anchor's QP did not show in uroce stats"
devd=$(devd_pid)
[[ -n $devd ]] || fail "no uroce-devd holds $sip:4791"
read -r u0 a0 i0 <<<"$(sample)"
k0=$(kdrops $anchor "$devd")
ra0=$(rss $anchor) rd0=$(rss "$devd")

python3 "$root/bench/roce_flood.py" --dst "$sip" --src "$cip" --mode valid --qpn "$qpn" \
  --kinds unknown_qpn,bad_icrc,wrong_psn,random_rkey,garbage --rate "$rate" --seconds 600 \
  >"$tmp/flood" 2>&1 &
flood=$!
# The ping-pong starts once the flood reaches the device.
for _ in $(seq 1 300); do
  read -r u _ <<<"$(sample)"
  ((u > u0)) && break
  kill -0 $flood 2>/dev/null || fail "the flood ended: $(cat "$tmp/flood")"
  sleep 0.1
done
((u > u0)) || fail "no flood packet reached the coordinator"

UROCE_STATS_FILE=$tmp/pair.stats "$uroce" perf write_lat --ip "$sip" -p $pair_port -s 8 \
  -n "$iters" --timeout 60 >"$tmp/ps" 2>&1 &
ps=$!
"$uroce" perf write_lat --ip "$cip" -p $pair_port -s 8 -n "$iters" --timeout 60 \
  --connect_timeout 30 --json "$sip" >"$tmp/pc" 2>&1 &
pc=$!
wait $pc
rc_c=$?
pc=
wait $ps
rc_s=$?
ps=
kill -0 $flood 2>/dev/null || fail "the flood ended before the ping-pong did: $(cat "$tmp/flood")"
kill -TERM $flood
wait $flood
flood=
((rc_c == 0 && rc_s == 0)) ||
  fail "the ping-pong did not complete under the flood (client $rc_c, server $rc_s): $(tail -3 "$tmp/pc")"
lat=$(sed -nE 's/.*"t_typical_us":([0-9.]+).*/\1/p' "$tmp/pc" | tail -1)
echo "ping-pong under the flood: $iters round trips of 8 B, t_typical ${lat:-?} us"
cat "$tmp/flood"
read -r sent <<<"$(sed -nE 's/^roce_flood: valid sent ([0-9]+) packets.*/\1/p' "$tmp/flood")"
bad_icrc=$(sed -nE 's/.* bad_icrc ([0-9]+).*/\1/p' "$tmp/flood")
[[ -n $sent && -n $bad_icrc ]] || fail "the flood printed no count"

# The pair's server is gone: its counters are in its stats file.
pair=0
for n in $qp_drops; do
  pair=$((pair + $(awk -v n="$n" '$1 == "link" { for (i = 2; i < NF; i++) if ($i == n) s += $(i + 1) }
    END { print s + 0 }' "$tmp/pair.stats" 2>/dev/null || echo 0)))
done
# Bounded wait for the device to have read what is still queued at its sockets.
for _ in $(seq 1 300); do
  read -r u a i <<<"$(sample)"
  du=$((u - u0)) da=$((a - a0)) di=$((i - i0)) dk=$(($(kdrops $anchor "$devd") - k0))
  ((du + da + pair + dk >= sent)) && break
  sleep 0.1
done
echo "flood packets $sent: coordinator unsteered_pkts +$du, anchor drops +$da (icrc_err +$di)," \
  "ping-pong server drops $pair, kernel drops +$dk"
((du + da + pair + dk == sent)) ||
  fail "the counters account for $((du + da + pair + dk)) of the $sent flood packets"
((di + dk >= bad_icrc)) || fail "the anchor counted $di bad ICRCs of the $bad_icrc it was sent"
ra1=$(rss $anchor) rd1=$(rss "$devd")
echo "RSS: anchor $ra0 -> $ra1 kB, uroce-devd $rd0 -> $rd1 kB"
((ra1 - ra0 <= 16384 && rd1 - rd0 <= 16384)) || fail "RSS grew by more than 16 MiB under the flood"
echo "PASS: the ping-pong completed under a flood of $sent packets, each counted"
