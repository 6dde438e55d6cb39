#!/usr/bin/env bash
# Congestion control on loopback, where nothing competes (issue 39: "bandwidth and latency
# unchanged within noise against CC off, in one run"): UROCE_CC=CC (default dcqcn-aimd, the rule
# meant to become every device's default) against UROCE_CC=none, side by side. Each round runs every measurement once with
# each setting, the two in alternating order from round to round, so that a drift of the
# machine's speed touches both alike:
#   uroce perf write_bw, read_bw, send_bw -s 65536 -D SECONDS; write_lat -s 8 -n 20000;
#   write_bw -s 64 -t 1024 -D SECONDS (message rate).
# Prints each run's JSON line, then a Markdown table: per row the medians of both settings and
# the median of the rounds' own ratios (CC / none; for latency none / CC, so above 1 is better
# for CC in every row), with the lowest and highest round's ratio.
# Each pair of processes is pinned to CPUs 0 and 1 where the host has two. Release build.
#
# Usage: bench/cc_loopback.sh [SECONDS [ROUNDS [RULE]]]   (defaults 3, 3 and dcqcn-aimd)
# Environment: SERVER_IP, CLIENT_IP (default 127.0.0.1, 127.0.0.2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/rounds_lib.sh
S=$(seconds_arg cc_loopback "${1:-3}")
R=$(rounds_arg cc_loopback "${2:-3}")
SIP=${SERVER_IP:-127.0.0.1}
CIP=${CLIENT_IP:-127.0.0.2}
RULE=${3:-dcqcn-aimd}
release_build uroce uroce-devd
U=build-release/src/tools/uroce

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pin_pair

for r in $(seq 1 "$R"); do
  order=(on none)
  ((r % 2 == 0)) && order=(none on)
  for cc in "${order[@]}"; do
    arg=$cc
    [[ $cc == on ]] && arg=$RULE
    perf_pair "$tmp" "write_bw.$cc.$r" UROCE_CC="$arg" -- write_bw -s 65536 -D "$S"
    perf_pair "$tmp" "read_bw.$cc.$r" UROCE_CC="$arg" -- read_bw -s 65536 -D "$S"
    perf_pair "$tmp" "send_bw.$cc.$r" UROCE_CC="$arg" -- send_bw -s 65536 -D "$S"
    perf_pair "$tmp" "write_lat.$cc.$r" UROCE_CC="$arg" -- write_lat -s 8 -n 20000
    perf_pair "$tmp" "msgrate.$cc.$r" UROCE_CC="$arg" -- write_bw -s 64 -t 1024 -D "$S"
  done
done

bench/ab_table.py "$tmp" "$R" on "$RULE" none none <<'ROWS'
WRITE 64 KiB, Gb/s|write_bw|bw_avg_gbit_s|1
READ 64 KiB, Gb/s|read_bw|bw_avg_gbit_s|1
SEND 64 KiB, Gb/s|send_bw|bw_avg_gbit_s|1
WRITE 8 B latency, typical us|write_lat|t_typical_us|0
WRITE 8 B latency, p99 us|write_lat|t_p99_us|0
WRITE 64 B message rate, Mpps|msgrate|msg_rate_mpps|1
ROWS
echo
echo "ratio: $RULE against none, above 1 better for $RULE in every row"
