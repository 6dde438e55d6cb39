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

# perf RULE OUT ARGS...: one uroce perf pair with UROCE_CC=RULE.
perf() {
  local cc=$1 out=$2
  shift 2
  local env=(env UROCE_CC="$cc")
  "${env[@]}" "${cpu0[@]}" "$U" perf "$@" --ip "$SIP" -p 18517 --json >"$tmp/server.json" &
  local srv=$!
  "${env[@]}" "${cpu1[@]}" "$U" perf "$@" --ip "$CIP" -p 18517 --json --connect_timeout 30 \
    "$SIP" >"$tmp/$out.json"
  wait $srv
  echo "$out: $(cat "$tmp/$out.json")"
}

for r in $(seq 1 "$R"); do
  order=(on none)
  ((r % 2 == 0)) && order=(none on)
  for cc in "${order[@]}"; do
    arg=$cc
    [[ $cc == on ]] && arg=$RULE
    perf "$arg" "write_bw.$cc.$r" write_bw -s 65536 -D "$S"
    perf "$arg" "read_bw.$cc.$r" read_bw -s 65536 -D "$S"
    perf "$arg" "send_bw.$cc.$r" send_bw -s 65536 -D "$S"
    perf "$arg" "write_lat.$cc.$r" write_lat -s 8 -n 20000
    perf "$arg" "msgrate.$cc.$r" write_bw -s 64 -t 1024 -D "$S"
  done
done

python3 - "$tmp" "$R" "$RULE" <<'EOF'
import json, statistics, sys
d, rounds, cc = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def val(name, cc, r, key):
    with open(f"{d}/{name}.{cc}.{r}.json") as fh:
        return float(json.loads(fh.read().strip().splitlines()[-1])[key])
rows = [  # label, run, key, higher is better
    ("WRITE 64 KiB, Gb/s", "write_bw", "bw_avg_gbit_s", True),
    ("READ 64 KiB, Gb/s", "read_bw", "bw_avg_gbit_s", True),
    ("SEND 64 KiB, Gb/s", "send_bw", "bw_avg_gbit_s", True),
    ("WRITE 8 B latency, typical us", "write_lat", "t_typical_us", False),
    ("WRITE 8 B latency, p99 us", "write_lat", "t_p99_us", False),
    ("WRITE 64 B message rate, Mpps", "msgrate", "msg_rate_mpps", True),
]
print(f"\n| row | {cc}, median | none, median | ratio, median of {rounds} rounds (low-high) |")
print("| --- | --- | --- | --- |")
for label, run, key, higher in rows:
    on = [val(run, "on", r, key) for r in range(1, rounds + 1)]
    off = [val(run, "none", r, key) for r in range(1, rounds + 1)]
    ratios = [(a / b if higher else b / a) if a and b else float("nan") for a, b in zip(on, off)]
    print(f"| {label} | {statistics.median(on):.3f} | {statistics.median(off):.3f} | "
          f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |")
print(f"\nratio: {cc} against none, above 1 better for {cc} in every row")
EOF
