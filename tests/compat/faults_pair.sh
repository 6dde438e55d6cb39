#!/bin/bash
# An unmodified libibverbs program (ibverbs-utils, perftest, uroce_verbs_check) as server and
# client over the drop-in, both with the same faults in their uroce device (UROCE_FAULTS), then
# a check of what the counters say:
#
#   faults_pair.sh SPEC CHECKS RUNNER ARGS...
#
# RUNNER ARGS: the pair to run (run_pair.sh, or tests/interop/verbs_check_pair.sh, with theirs).
# Both processes append their counters to one UROCE_STATS_FILE at exit (a `link` and a `faults`
# line each). Always checked: every packet corrupted by either side's stage (tx_corrupt of the
# sender, rx_corrupt of the receiver) was dropped by a receiver's ICRC check, no more and no
# fewer (the sums over both sides: drop_bad_icrc = tx_corrupt + rx_corrupt; exact when the
# corruption is on receive, where the check follows at once: one on transmit may still be in
# flight, or held back, when the receiver closes). CHECKS, comma
# separated: `loss` (some packets were lost, and the transport retransmitted: retransmitted_pkts
# > 0), `dup` (some duplicated), `reorder`, `corrupt` (some corrupted), `partition` (packets
# dropped by a partition window, and retransmitted), `sr` (selective repeat was on at both ends:
# out-of-order requests kept and packets resent selectively), `nosr` (neither), `none`. With FAULTS_EXPECT_FAIL=REGEX the
# pair must fail instead, its output (the runner prints both sides') matching REGEX: a
# partition longer than the QPs' retry budget.
set -u
spec=$1 checks=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export UROCE_FAULTS=$spec
export UROCE_STATS_FILE=$tmp/stats.txt
"$@" >"$tmp/run.log" 2>&1
rc=$?
cat "$tmp/run.log"
if [[ -n ${FAULTS_EXPECT_FAIL:-} ]]; then
  ((rc != 0)) || { echo "FAIL: the pair passed; expected it to fail with /$FAULTS_EXPECT_FAIL/"; exit 1; }
  # FAULTS_EXPECT_FAIL_LINES: at least that many lines match (one per side).
  n=$(grep -Ec -- "$FAULTS_EXPECT_FAIL" "$tmp/run.log")
  ((n >= ${FAULTS_EXPECT_FAIL_LINES:-1})) ||
    { echo "FAIL: $n lines of /$FAULTS_EXPECT_FAIL/ in the output, expected ${FAULTS_EXPECT_FAIL_LINES:-1}"; exit 1; }
elif ((rc != 0)); then
  # The counters say how it failed (retries spent, timeouts, NAKs), which the programs do not.
  echo "----- counters (UROCE_STATS_FILE) -----"
  cat "$tmp/stats.txt" 2>/dev/null
  exit "$rc"
fi
source "$(dirname "$0")/stats_lib.sh"
# sum NAME LINE_KIND: NAME's value summed over the file's lines of that kind.
sum() { stats_sum "$1" "$2" "$tmp/stats.txt"; }
fail() {
  echo "FAIL: $*"
  echo "----- counters (UROCE_STATS_FILE) -----"
  cat "$tmp/stats.txt"
  exit 1
}
[[ $(grep -c '^faults ' "$tmp/stats.txt") -ge 2 ]] || fail "both sides should report their faults"
corrupted=$(($(sum tx_corrupt faults) + $(sum rx_corrupt faults)))
bad_icrc=$(sum drop_bad_icrc link)
# Every corrupted packet fails its ICRC but one whose flipped bits all lie in the byte the ICRC
# masks (BTH byte 4: FECN, BECN and the reserved bits, which switches may change on the way):
# that one arrives as it would from a switch that set the bit. A 20-byte ACK has 8 such bits in
# 160, a 1 KiB request 8 in 8400, so a run with dozens of corruptions now and then has one (CI run
# of 51d05df: 53 corrupted, 52 dropped). More than two, or more drops than corruptions, fails.
((bad_icrc <= corrupted && corrupted - bad_icrc <= 2)) ||
  fail "the receivers dropped $bad_icrc packets for a bad ICRC; the stages corrupted $corrupted"
IFS=, read -ra want <<<"$checks"
for c in "${want[@]}"; do
  case $c in
    loss)
      lost=$(($(sum tx_loss faults) + $(sum rx_loss faults) + $(sum tx_burst_loss faults) +
        $(sum rx_burst_loss faults)))
      ((lost > 0)) || fail "no packet was lost"
      (($(sum retransmitted_pkts link) > 0)) || fail "$lost packets lost and none retransmitted"
      ;;
    dup)
      ((($(sum tx_duplicate faults) + $(sum rx_duplicate faults)) > 0)) || fail "no packet duplicated"
      ;;
    reorder)
      ((($(sum tx_reorder faults) + $(sum rx_reorder faults)) > 0)) || fail "no packet reordered"
      ;;
    corrupt) ((corrupted > 0)) || fail "no packet corrupted" ;;
    partition)
      cut=$(($(sum tx_partition faults) + $(sum rx_partition faults)))
      ((cut > 0)) || fail "no packet met the partition"
      (($(sum retransmitted_pkts link) > 0)) || fail "$cut packets cut off and none retransmitted"
      ;;
    sr)
      (($(sum out_of_order_kept link) > 0)) || fail "no out-of-order request was kept"
      (($(sum selective_retransmits link) > 0)) || fail "no packet was resent selectively"
      ;;
    nosr)
      (($(sum out_of_order_kept link) == 0)) || fail "out-of-order requests were kept"
      (($(sum selective_retransmits link) == 0)) || fail "packets were resent selectively"
      ;;
    none) ;;
    *) fail "unknown check '$c'" ;;
  esac
done
echo "PASS: faults '$spec': $(grep '^faults ' "$tmp/stats.txt" | head -2 | cut -c1-400 | tr '\n' ' ')"
echo "      bad ICRC drops $bad_icrc = corruptions $corrupted; retransmitted $(sum retransmitted_pkts link)" \
  "(selectively $(sum selective_retransmits link), kept out of order $(sum out_of_order_kept link))"
