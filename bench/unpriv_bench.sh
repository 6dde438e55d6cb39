#!/usr/bin/env bash
# uroce's bandwidth as an unprivileged user against root's, measured side by side in one run
# (issue 14): `uroce perf write_bw -s 65536 -D SECONDS` (server $SERVER_IP on CPU 0, client
# $CLIENT_IP on CPU 1, Release build), alternately as root and as `nobody` (setpriv
# --reuid=65534), ROUNDS times each, with net.core.rmem_max and wmem_max at the distribution's
# default 212992 for the whole run (restored afterwards). Root's datapath asks for 16 MiB socket
# buffers with SO_RCVBUFFORCE/SO_SNDBUFFORCE; nobody gets at most rmem_max, so its receiver loses
# packets of a deep queue at the socket, and the transport must recover them without a
# retransmission timeout (sequence NAKs).
#
# Prints each round's MB/s and both processes' counters (UROCE_STATS_FILE: ack_timeouts,
# retransmitted_pkts, out_of_seq_request, sequence NAKs), then the median of the rounds' own
# ratios (nobody / root) and the counters' totals per user.
#
# Usage: bench/unpriv_bench.sh [SECONDS [ROUNDS]]   (defaults 10 and 3; root only)
# Environment: SERVER_IP, CLIENT_IP (default 127.0.9.1, 127.0.9.2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
S=${1:-10}
[[ $S =~ ^[0-9]+$ && $S -ge 1 ]] || {
  echo "unpriv_bench: SECONDS must be a positive integer" >&2
  exit 2
}
source bench/rounds_lib.sh
R=$(rounds_arg unpriv_bench "${2:-3}")
SIP=${SERVER_IP:-127.0.9.1}
CIP=${CLIENT_IP:-127.0.9.2}
if ((EUID != 0)); then
  echo "unpriv_bench: needs root (to set net.core.rmem_max and to run as nobody)" >&2
  exit 2
fi

release_build uroce uroce-devd
U=$(pwd)/build-release/src/tools/uroce

tmp=$(mktemp -d)
chmod 0755 "$tmp"
old_r=$(sysctl -n net.core.rmem_max)
old_w=$(sysctl -n net.core.wmem_max)
restore() {
  sysctl -qw net.core.rmem_max="$old_r" net.core.wmem_max="$old_w"
  rm -rf "$tmp"
}
trap restore EXIT
sysctl -qw net.core.rmem_max=212992 net.core.wmem_max=212992

cpu0=() cpu1=()
if (($(nproc) >= 2)) && command -v taskset >/dev/null; then
  cpu0=(taskset -c 0) cpu1=(taskset -c 1)
fi

# One pair of processes as USER (root|nobody); writes $tmp/USER.ROUND.json (the client's line)
# and $tmp/USER.ROUND.stats (both devices' counters).
run() {
  local who=$1 r=$2 as=() stats="$tmp/$1.$2.stats"
  [[ $who == nobody ]] && as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  install -m 0666 /dev/null "$stats"
  "${cpu0[@]}" "${as[@]}" env UROCE_STATS_FILE="$stats" "$U" perf write_bw -s 65536 -D "$S" \
    --ip "$SIP" -p 18517 --json >/dev/null &
  local srv=$!
  "${cpu1[@]}" "${as[@]}" env UROCE_STATS_FILE="$stats" "$U" perf write_bw -s 65536 -D "$S" \
    --ip "$CIP" -p 18517 --json --connect_timeout 30 "$SIP" >"$tmp/$who.$r.json"
  wait $srv
  devd_gone "$SIP" "$CIP"
}
for r in $(seq 1 "$R"); do
  run root "$r"
  run nobody "$r"
done

python3 - "$tmp" "$R" "$S" <<'EOF'
import json, re, statistics, sys
d, rounds, secs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
KEYS = ("ack_timeouts", "retransmitted_pkts", "out_of_seq_request", "send_seq_err", "rcvd_seq_err")
def counters(path):
    tot = dict.fromkeys(KEYS, 0)
    for line in open(path):
        for k in KEYS:
            m = re.search(rf"\b{k} (\d+)", line)
            if m:
                tot[k] += int(m.group(1))
    return tot
def mbs(who, r):
    text = open(f"{d}/{who}.{r}.json").read().strip().splitlines()
    return json.loads(text[-1])["bw_avg_mb_s"]
print(f"## uroce perf write_bw -s 65536 -D {secs}, net.core.rmem_max = wmem_max = 212992")
print()
print("| round | root MB/s | nobody MB/s | nobody / root | counters, root | counters, nobody |")
print("| --- | --- | --- | --- | --- | --- |")
ratios, totals = [], {"root": dict.fromkeys(KEYS, 0), "nobody": dict.fromkeys(KEYS, 0)}
for r in range(1, rounds + 1):
    a, b = mbs("root", r), mbs("nobody", r)
    ratios.append(b / a)
    cs = {}
    for who in ("root", "nobody"):
        c = counters(f"{d}/{who}.{r}.stats")
        for k in KEYS:
            totals[who][k] += c[k]
        cs[who] = ", ".join(f"{k} {c[k]}" for k in KEYS)
    print(f"| {r} | {a:.0f} | {b:.0f} | {b / a:.3f} | {cs['root']} | {cs['nobody']} |")
print()
print(f"nobody / root, median of {rounds} rounds: {statistics.median_low(ratios):.3f} "
      f"(lowest {min(ratios):.3f}, highest {max(ratios):.3f}); goal >= 0.9")
for who in ("root", "nobody"):
    print(f"{who}, all rounds: " + ", ".join(f"{k} {totals[who][k]}" for k in KEYS))
if totals["nobody"]["ack_timeouts"] or totals["root"]["ack_timeouts"]:
    print("a retransmission timeout fired (goal: none)")
EOF
echo "CPU: $(cpu_model)"
