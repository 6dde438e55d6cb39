#!/bin/bash
# An unmodified rdma_cm program pair (rdmacm_pair.sh) over the drop-in, both devices at aead=MODE
# with no pre-shared key: every connection the programs make through rdma_cm agrees its own key
# in the coordinators' CM (docs/SECURITY.md, "Per-connection keys"), or the packets would go out
# plain. Then a check of what the counters and the captures say:
#
#   aead_pair.sh MODE PLAINTEXT RUNNER ARGS...
#
# MODE is what follows aead= on each device's line, a pre-shared key included ("require psk=HEX").
#
# Both processes append their counters to one UROCE_STATS_FILE and capture to UROCE_PCAP (one
# file each). Checked: both sides sealed packets (aead_tx_pkts) and opened sealed packets
# (aead_rx_pkts), neither took a plain packet (aead_plain_rx 0: every QP had its key), and,
# unless PLAINTEXT is empty, no capture holds PLAINTEXT (a string of the programs' payload) while
# the programs' output does.
set -u
mode=$1 plain=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export UROCE_PAIR_AEAD=$mode
export UROCE_STATS_FILE=$tmp/stats.txt
export UROCE_PCAP=$tmp/capture.pcap
"$@" >"$tmp/run.log" 2>&1
rc=$?
cat "$tmp/run.log"
fail() {
  echo "FAIL: $*"
  echo "----- counters (UROCE_STATS_FILE) -----"
  cat "$tmp/stats.txt" 2>/dev/null
  exit 1
}
((rc == 0)) || fail "the pair failed (exit $rc)"
source "$(dirname "$0")/stats_lib.sh"
# per_side NAME: NAME's value on each device's link line, one per line.
per_side() { awk -v n="$1" '$1 == "link" { for (i = 2; i < NF; i++) if ($i == n) print $(i + 1) }' "$tmp/stats.txt"; }
[[ $(grep -c '^link ' "$tmp/stats.txt") -ge 2 ]] || fail "both sides should report their counters"
for n in aead_tx_pkts aead_rx_pkts; do
  while read -r v; do
    ((v > 0)) || fail "a side has $n 0"
  done < <(per_side "$n")
done
plain_rx=$(stats_sum aead_plain_rx link "$tmp/stats.txt")
((plain_rx == 0)) || fail "$plain_rx plain packets were taken"
if [[ -n $plain ]]; then
  grep -aqF -- "$plain" "$tmp/run.log" || fail "the programs never printed /$plain/"
  caps=("$tmp"/capture*.pcap)
  [[ -s ${caps[0]} ]] || fail "no capture"
  if grep -aqF -- "$plain" "${caps[@]}"; then fail "a capture holds the plaintext /$plain/"; fi
fi
echo "PASS: sealed $(stats_sum aead_tx_pkts link "$tmp/stats.txt"), opened" \
  "$(stats_sum aead_rx_pkts link "$tmp/stats.txt"), tag failures" \
  "$(stats_sum aead_auth_drops link "$tmp/stats.txt"), plain taken 0"
