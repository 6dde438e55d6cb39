#!/usr/bin/env bash
# Authenticated and encrypted RDMA between uroce peers on loopback (issue 44, docs/SECURITY.md):
# both devices with aead=MODE (default encrypt) and one pre-shared key, against aead=off, side by
# side in one run. Each round runs every measurement once with each setting, the two in
# alternating order from round to round, so that a drift of the machine's speed touches both
# alike:
#   uroce perf write_bw -s 65536 -D SECONDS; write_bw -s 4096 -D SECONDS;
#   write_lat -s 8 -n 20000; write_lat -s 4096 -n 20000.
# The devices' settings come from a config file (UROCE_CONFIG) per setting. Prints each run's
# JSON line, then a Markdown table: per row the medians of both settings and the median of the
# rounds' own ratios (MODE / off; for latency off / MODE, so 1 is free and below 1 is the cost),
# with the lowest and highest round's ratio. Goal (issue 44): bandwidth ratio at least 0.8,
# latency ratio at least 1/1.2 = 0.83.
# Each pair of processes is pinned to CPUs 0 and 1 where the host has two. Release build.
#
# Usage: bench/aead_loopback.sh [SECONDS [ROUNDS [MODE]]]   (defaults 3, 3 and encrypt)
# Environment: SERVER_IP, CLIENT_IP (default 127.0.0.1, 127.0.0.2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/rounds_lib.sh
S=$(seconds_arg aead_loopback "${1:-3}")
R=$(rounds_arg aead_loopback "${2:-3}")
SIP=${SERVER_IP:-127.0.0.1}
CIP=${CLIENT_IP:-127.0.0.2}
MODE=${3:-encrypt}
release_build uroce uroce-devd
U=build-release/src/tools/uroce

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pin_pair
# A fresh key for the run (a benchmark's key protects nothing; it must only be the same at both
# ends).
key=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
printf 'srv %s aead=%s psk=%s\ncli %s aead=%s psk=%s\n' "$SIP" "$MODE" "$key" "$CIP" "$MODE" \
  "$key" >"$tmp/on.conf"
printf 'srv %s\ncli %s\n' "$SIP" "$CIP" >"$tmp/off.conf"

for r in $(seq 1 "$R"); do
  order=(on off)
  ((r % 2 == 0)) && order=(off on)
  for setting in "${order[@]}"; do
    cfg=(-u UROCE_DEVICES UROCE_CONFIG="$tmp/$setting.conf")
    perf_pair "$tmp" "write_bw.$setting.$r" "${cfg[@]}" -- write_bw -s 65536 -D "$S"
    perf_pair "$tmp" "write_bw4k.$setting.$r" "${cfg[@]}" -- write_bw -s 4096 -D "$S"
    perf_pair "$tmp" "write_lat.$setting.$r" "${cfg[@]}" -- write_lat -s 8 -n 20000
    perf_pair "$tmp" "write_lat4k.$setting.$r" "${cfg[@]}" -- write_lat -s 4096 -n 20000
  done
done

bench/ab_table.py "$tmp" "$R" on "$MODE" off off <<'ROWS'
WRITE 64 KiB, Gb/s|write_bw|bw_avg_gbit_s|1
WRITE 4 KiB, Gb/s|write_bw4k|bw_avg_gbit_s|1
WRITE 8 B latency, typical us|write_lat|t_typical_us|0
WRITE 8 B latency, p99 us|write_lat|t_p99_us|0
WRITE 4 KiB latency, typical us|write_lat4k|t_typical_us|0
ROWS
echo
echo "ratio: $MODE against off (latency: off / $MODE); 1 is free, below 1 the cost"
