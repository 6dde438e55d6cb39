#!/usr/bin/env bash
# Issue 39's matrix on the real-network test bed (tests/netbed/netbed.py: network namespaces, N
# senders into one receiver through a TBF bottleneck, the tc BPF ECN marker, a delay stage),
# each case once, with the Release build:
#   - one uroce flow alone, 1 Gbit/s, 256 KiB buffer (and one TCP flow alone, the reference);
#   - the same two with 1 ms RTT (the delay stage);
#   - one uroce flow and one TCP flow at once (two senders);
#   - 3 and 8 senders into one (uroce; TCP the reference);
#   - with the ECN marker: uroce + TCP, 3 and 8 uroce senders;
#   - unmodified ib_write_bw over the drop-in libibverbs.so.1: alone, beside TCP, 3 senders, 3
#     senders with the marker.
# Every uroce flow is `uroce perf write_bw -s 65536` (data verified) at path MTU 1024; every
# case SECONDS long (default 5). Prints each run's table, then one Markdown summary table; the
# JSON reports stay in OUT_DIR (default: a temporary directory, removed).
#
# Usage: bench/netbed.sh [SECONDS [OUT_DIR]]   (root: namespaces, tc and BPF)
# Environment: NETBED_CASES, a regular expression: only the cases whose name matches;
# NETBED_ARGS, more netbed.py run options for every case (e.g. '--compat DIR --uroce-bin FILE'
# to measure another build beside this one in the same series).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
S=${1:-5}
[[ $S =~ ^[0-9]+$ && $S -ge 1 ]] || {
  echo "netbed: SECONDS must be a positive integer" >&2
  exit 2
}
if ((EUID != 0)); then
  echo "netbed: needs root (network namespaces, tc, BPF)" >&2
  exit 1
fi
source bench/rounds_lib.sh
release_build uroce uroce-devd uroce_ibverbs

if [[ -n ${2:-} ]]; then
  out=$2
  mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi

common=(--rate 1gbit --buffer 256k --mtu 1024 --size 65536 --seconds "$S")
# name|netbed.py run options
cases=(
  "uroce alone|--uroce 1"
  "TCP alone|--uroce 0 --tcp 1"
  "uroce alone, RTT 1 ms|--uroce 1 --rtt-us 1000"
  "TCP alone, RTT 1 ms|--uroce 0 --tcp 1 --rtt-us 1000"
  "uroce + TCP|--uroce 1 --tcp 1"
  "3 uroce senders|--uroce 3"
  "3 TCP senders|--uroce 0 --tcp 3"
  "8 uroce senders|--uroce 8"
  "8 TCP senders|--uroce 0 --tcp 8"
  "ECN: uroce + TCP|--uroce 1 --tcp 1 --ecn"
  "ECN: 3 uroce senders|--uroce 3 --ecn"
  "ECN: 8 uroce senders|--uroce 8 --ecn"
  "ib_write_bw alone|--uroce 0 --ibv 1"
  "ib_write_bw + TCP|--uroce 0 --ibv 1 --tcp 1"
  "3 ib_write_bw senders|--uroce 0 --ibv 3"
  "ECN: 3 ib_write_bw senders|--uroce 0 --ibv 3 --ecn"
)

i=0
failed=0
for c in "${cases[@]}"; do
  name=${c%%|*}
  read -r -a opts <<<"${c#*|}"
  [[ -z ${NETBED_CASES:-} || $name =~ $NETBED_CASES ]] || continue
  i=$((i + 1))
  echo "## $name"
  read -r -a extra <<<"${NETBED_ARGS:-}"
  echo "    tests/netbed/netbed.py run ${common[*]} ${opts[*]} ${extra[*]}"
  echo "$name" >"$out/case$i.name"
  python3 tests/netbed/netbed.py run "${common[@]}" "${opts[@]}" "${extra[@]}" \
    --json "$out/case$i.json" ||
    failed=$((failed + 1))
  echo
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
load=$(cut -d' ' -f1-3 /proc/loadavg)
echo "## summary ($S s per case; CPU: $cpu, $(nproc) CPUs; load average at the end: $load)"
python3 - "$out" "$i" <<'EOF'
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
def f(v, spec="{:.3f}"):
    return "n/a" if v is None else spec.format(v)
print("| case | goodput per flow (Gb/s) | total | utilisation | link use (TBF, mid-run) | Jain "
      "| RoCE retransmitted | ACK timeouts | out of sequence at the RoCE receivers | TBF drops "
      "| CE marks / ECT packets | CE at receiver (RoCE, TCP) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for i in range(1, n + 1):
    name = open(f"{d}/case{i}.name").read().strip()
    try:
        r = json.load(open(f"{d}/case{i}.json"))
    except (OSError, ValueError):
        print(f"| {name} | run failed | | | | | | | | | | |")
        continue
    t, b, m, rx = r["totals"], r["bottleneck"], r.get("marker"), r["receiver_ecn"]
    if r.get("delay"):  # what the delay line added beyond its RTT (it is a program)
        name += f" (delay line {r['delay']['late_mean_us']:.0f} us late on average)"
    flows = ", ".join(f"{x['id']} {f(x['goodput_gbit_s'], '{:.2f}')}"
                      + ("" if x["completed"] else " (failed)") for x in r["flows"])
    marks = f"{m['marked']} / {m['ect_pkts']}" if m else "off"
    ce = f"{rx['roce']['ce']}, {rx['tcp']['ce']}" if m else "off"
    rcv = [x["receiver"] for x in r["flows"] if x["kind"] != "tcp"]
    oos = (str(sum(x["out_of_seq_request"] for x in rcv)) if rcv and all(rcv) else
           "n/a")
    print(f"| {name} | {flows} | {f(t['goodput_gbit_s'])} | {f(t['utilisation'])} "
          f"| {f(b['tbf_utilisation_mid'])} | {f(t['jain'])} "
          f"| {f(t['roce_retransmitted_share'], '{:.2%}')} "
          f"| {f(t['roce_ack_timeouts'], '{}')} | {oos} | {b['tbf_drops']} | {marks} | {ce} |")
EOF
if ((failed)); then
  echo "netbed: $failed case(s) failed (see above)" >&2
  exit 1
fi
