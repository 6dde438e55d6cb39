#!/usr/bin/env bash
# uroce on loopback against the kernel's own transports, measured side by side in one run:
#   - iperf3, one TCP stream (127.0.0.1 -> 127.0.0.2), -t SECONDS;
#   - bench/udp_baseline bw --mode gso and --mode mmsg (raw UDP, 64 KiB per send call),
#     udp_baseline pingpong (8-byte one-way latency) and udp_baseline pps (64-byte datagrams);
#   - udp_baseline pingpong --size 40 --datagrams 2 --gso: each hop a 40-byte datagram and a
#     20-byte one in one UDP_SEGMENT send, received whole with UDP_GRO, which is what an RC
#     ping-pong of 8-byte WRITEs asks of the kernel (the request and the ACK of the peer's, which
#     uroce holds for it): the floor of the kernel path under uroce's latency; and the same with
#     --calls uroce, the system calls uroce's datapath makes (sendmmsg, recvmmsg with control
#     messages, on a socket asking for TOS, TTL and GRO): what is left above it is uroce's own;
#   - bench/datapath_bench --pingpong: the same hop (an 8-byte RDMA WRITE Only and an ACK) built,
#     sent, received, parsed and ICRC-checked by uroce's datapath and wire code with no transport,
#     engine or verbs: what is left above it is theirs;
#   - uroce perf write_bw, read_bw and send_bw -s 65536 -D SECONDS, write_lat -s 8, and write_bw
#     -s 64 with a deep queue (message rate), each as two processes (server $SERVER_IP, client
#     $CLIENT_IP).
# The whole set runs ROUNDS times (default 3), each round every measurement once, so that a drift
# of the machine's speed (±30% within minutes on a shared VM) touches every row alike.
# Prints the raw JSON lines of each round and a markdown table of ratios: RDMA WRITE bandwidth /
# iperf3 and / UDP GSO, READ and SEND bandwidth / WRITE's, latency ratios (median and 99th
# percentile, against the one-datagram ping-pong and against the two-datagram floor),
# message-rate ratio, and CPU seconds per GB on each side. Each row gives both sides' medians
# over the rounds and the median of the rounds' own ratios (each measured minutes apart at most
# from its baseline), with the lowest and highest round's ratio.
# Each pair of processes is pinned to CPUs 0 and 1 where the host has two (as udp_baseline pins
# its own). Release build in build-release/.
#
# Usage: bench/net_bench.sh [SECONDS [ROUNDS]]   (defaults 5 and 3)
# Environment: SERVER_IP, CLIENT_IP (default 127.0.0.1, 127.0.0.2) for uroce perf and iperf3;
# UDP_BASELINE: a udp_baseline binary built elsewhere.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/rounds_lib.sh
S=$(seconds_arg net_bench "${1:-5}")
R=$(rounds_arg net_bench "${2:-3}")
SIP=${SERVER_IP:-127.0.0.1}
CIP=${CLIENT_IP:-127.0.0.2}

scripts/install-deps >/dev/null
configure_release
targets=(uroce datapath_bench)
have_udp_baseline=0
B=${UDP_BASELINE:-build-release/bench/udp_baseline} # UDP_BASELINE: a binary built elsewhere
if [[ -n ${UDP_BASELINE:-} ]]; then
  have_udp_baseline=1
elif grep -q "udp_baseline" bench/CMakeLists.txt; then
  targets+=(udp_baseline)
  have_udp_baseline=1
fi
ninja -C build-release "${targets[@]}" >/dev/null
U=build-release/src/tools/uroce

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pin_pair

# uroce perf: server and client as two processes; the client's JSON line has both sides' CPU.
perf() {
  local out=$1
  shift
  "${cpu0[@]}" "$U" perf "$@" --ip "$SIP" -p 18515 --json >"$tmp/server.json" &
  local srv=$!
  "${cpu1[@]}" "$U" perf "$@" --ip "$CIP" -p 18515 --json --connect_timeout 30 "$SIP" \
    >"$tmp/$out.json"
  wait $srv
}
# One round: every measurement once, into $tmp/NAME.ROUND.json.
iperf_port=15201
round() {
  local r=$1 ok=0 iperf_srv
  # iperf3: one TCP stream; the server answers one test and exits.
  timeout $((S + 60)) "${cpu0[@]}" iperf3 -s -1 -B "$SIP" -p $iperf_port >/dev/null 2>&1 &
  iperf_srv=$!
  for _ in $(seq 1 100); do # the server may not listen yet: retry a refused connection
    if timeout $((S + 30)) "${cpu1[@]}" iperf3 -c "$SIP" -B "$CIP" -p $iperf_port -t "$S" -J \
      >"$tmp/iperf.$r.json" 2>/dev/null; then
      ok=1
      break
    fi
    grep -q "Connection refused\|unable to connect" "$tmp/iperf.$r.json" || break
    timeout 0.05 tail -f /dev/null || true
  done
  wait $iperf_srv || true
  if ((!ok)); then
    echo "net_bench: iperf3 failed: $(grep -h '"error"' "$tmp/iperf.$r.json" || true)" >&2
    echo '{}' >"$tmp/iperf.$r.json"
  fi

  if ((have_udp_baseline)); then
    "$B" bw --mode gso --seconds "$S" --size 65536 >"$tmp/gso.$r.json"
    "$B" bw --mode mmsg --seconds "$S" --size 65536 >"$tmp/mmsg.$r.json"
    "$B" pingpong --iters 20000 --size 8 >"$tmp/pingpong.$r.json"
    "$B" pingpong --iters 20000 --size 40 --datagrams 2 --gso >"$tmp/pingpong2.$r.json"
    "$B" pingpong --iters 20000 --size 40 --datagrams 2 --gso --calls uroce \
      >"$tmp/pingpong2u.$r.json"
    "$B" pps --size 64 --batch 32 --seconds "$S" >"$tmp/pps.$r.json"
  else
    for f in gso mmsg pingpong pingpong2 pingpong2u pps; do echo '{}' >"$tmp/$f.$r.json"; done
  fi

  build-release/bench/datapath_bench --pingpong 20000 >"$tmp/dppingpong.$r.json" ||
    echo '{}' >"$tmp/dppingpong.$r.json"
  perf "write_bw.$r" write_bw -s 65536 -D "$S"
  perf "read_bw.$r" read_bw -s 65536 -D "$S"
  perf "send_bw.$r" send_bw -s 65536 -D "$S"
  perf "write_lat.$r" write_lat -s 8 -n 20000
  perf "msgrate.$r" write_bw -s 64 -t 1024 -D "$S"
}

for r in $(seq 1 "$R"); do round "$r"; done

echo "## raw results ($S s per bandwidth run, $R rounds)"
for r in $(seq 1 "$R"); do
  echo "### round $r"
  for f in iperf gso mmsg pingpong pingpong2 pingpong2u dppingpong pps write_bw read_bw send_bw write_lat msgrate; do
    if [[ $f == iperf ]]; then
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); e=d.get("end",{});
print(json.dumps({"iperf3_gbit_per_s": e.get("sum_received",{}).get("bits_per_second",0)/1e9,
 "cpu": e.get("cpu_utilization_percent",{})}))' "$tmp/iperf.$r.json"
    else
      echo "$f: $(cat "$tmp/$f.$r.json")"
    fi
  done
done

python3 - "$tmp" "$S" "$have_udp_baseline" "$R" <<'EOF'
import json, math, statistics, sys
d, secs, have_udp, rounds = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
NAN = float("nan")
def load(name, r):
    # iperf3 -J writes one multi-line object; the others one object per line (the last counts).
    text = open(f"{d}/{name}.{r}.json").read().strip()
    for candidate in (text, text.splitlines()[-1] if text else ""):
        try:
            return json.loads(candidate)
        except ValueError:
            pass
    return {}
def per_gb(cpu_s, nbytes):
    return cpu_s / (nbytes / 1e9) if nbytes else NAN
def values(r):
    """The numbers one round gives, by name."""
    ip, gso, mmsg, pp, pps = (load(n, r) for n in ("iperf", "gso", "mmsg", "pingpong", "pps"))
    wb, wl, mr = load("write_bw", r), load("write_lat", r), load("msgrate", r)
    rb, sb, pp2 = load("read_bw", r), load("send_bw", r), load("pingpong2", r)
    pp2u, dpp = load("pingpong2u", r), load("dppingpong", r)
    ie = ip.get("end", {})
    ip_bytes = ie.get("sum_received", {}).get("bytes", 0)
    ip_cpu = ie.get("cpu_utilization_percent", {})
    return {
        "write": wb.get("bw_avg_gbit_s", NAN),
        "read": rb.get("bw_avg_gbit_s", NAN),
        "send": sb.get("bw_avg_gbit_s", NAN),
        "iperf": ie.get("sum_received", {}).get("bits_per_second", NAN) / 1e9,
        "gso": gso.get("gbit_per_s", NAN),
        "mmsg": mmsg.get("gbit_per_s", NAN),
        "lat": wl.get("t_typical_us", NAN),
        "lat99": wl.get("t_p99_us", NAN),
        "pp": pp.get("one_way_us", NAN),
        "pp99": pp.get("rtt_us_p99", NAN) / 2,
        "pp2": pp2.get("one_way_us", NAN),
        "pp2u": pp2u.get("one_way_us", NAN),
        "dpp": dpp.get("one_way_us", NAN),
        "msgrate": mr.get("msg_rate_mpps", NAN),
        "pps": pps.get("pps", NAN) / 1e6,
        "cpu_w_snd": wb.get("cpu_s_per_gb", NAN),
        "cpu_w_rcv": wb.get("peer_cpu_s_per_gb", NAN),
        "cpu_ip_snd": per_gb(ip_cpu.get("host_total", NAN) / 100 * secs, ip_bytes),
        "cpu_ip_rcv": per_gb(ip_cpu.get("remote_total", NAN) / 100 * secs, ip_bytes),
        "cpu_gso_snd": per_gb(gso.get("sender_cpu_s", NAN), gso.get("bytes", 0)),
        "cpu_gso_rcv": per_gb(gso.get("receiver_cpu_s", NAN), gso.get("bytes", 0)),
        "cpu_mmsg_snd": per_gb(mmsg.get("sender_cpu_s", NAN), mmsg.get("bytes", 0)),
        "cpu_mmsg_rcv": per_gb(mmsg.get("receiver_cpu_s", NAN), mmsg.get("bytes", 0)),
    }
rs = [values(r) for r in range(1, rounds + 1)]
def num(v):
    return isinstance(v, (int, float)) and not math.isnan(v)
def med(xs):
    xs = [x for x in xs if num(x)]
    return statistics.median_low(xs) if xs else NAN
def fmt(v, unit=""):
    return f"{v:.3f}{unit}" if num(v) else "n/a"
def row(label, a, b, unit):
    # Each round's own ratio: its two sides ran within minutes of each other.
    ratios = [x[a] / x[b] for x in rs if num(x[a]) and num(x[b]) and x[b]]
    rtext = "n/a"
    if ratios:
        spread = f" ({min(ratios):.3f}-{max(ratios):.3f})" if len(ratios) > 1 else ""
        rtext = f"{med(ratios):.3f}{spread}"
    return (label, fmt(med(x[a] for x in rs), unit), fmt(med(x[b] for x in rs), unit), rtext)
na = "" if have_udp else " (udp_baseline not built)"
rows = [
    row("RDMA WRITE 64 KiB bandwidth vs iperf3 TCP", "write", "iperf", " Gb/s"),
    row("RDMA WRITE 64 KiB bandwidth vs UDP GSO" + na, "write", "gso", " Gb/s"),
    row("RDMA WRITE 64 KiB bandwidth vs UDP sendmmsg" + na, "write", "mmsg", " Gb/s"),
    row("RDMA READ 64 KiB bandwidth vs RDMA WRITE's", "read", "write", " Gb/s"),
    row("SEND 64 KiB bandwidth vs RDMA WRITE's", "send", "write", " Gb/s"),
    row("8 B one-way latency (median; uroce t_typical) vs UDP ping-pong" + na, "lat", "pp", " us"),
    row("8 B one-way latency, 99th percentile vs UDP ping-pong (rtt p99 / 2)" + na, "lat99", "pp99", " us"),
    row("8 B one-way latency (median) vs two-datagram GSO ping-pong (an RC hop's kernel floor)" + na, "lat", "pp2", " us"),
    row("8 B one-way latency (median) vs the same with uroce's system calls (its datapath's floor)" + na, "lat", "pp2u", " us"),
    row("8 B one-way latency (median) vs the same hop through uroce's datapath and wire code alone", "lat", "dpp", " us"),
    row("64 B message rate (write_bw -t 1024) vs UDP sendmmsg/recvmmsg" + na, "msgrate", "pps", " Mpps"),
]
cpu_rows = [
    ("uroce RDMA WRITE 64 KiB", "cpu_w"),
    ("iperf3 TCP", "cpu_ip"),
    ("UDP GSO" + na, "cpu_gso"),
    ("UDP sendmmsg" + na, "cpu_mmsg"),
]
print()
print(f"| comparison ({rounds} rounds) | uroce (median) | baseline (median) "
      "| ratio: median of the rounds' own (lowest-highest) |")
print("| --- | --- | --- | --- |")
for r in rows:
    print("| " + " | ".join(r) + " |")
print()
print(f"| CPU seconds per GB moved (median of {rounds} rounds) | sender (client) | receiver (server) |")
print("| --- | --- | --- |")
for name, key in cpu_rows:
    snd, rcv = med(x[key + "_snd"] for x in rs), med(x[key + "_rcv"] for x in rs)
    print(f"| {name} | {fmt(snd)} | {fmt(rcv)} |")
EOF
