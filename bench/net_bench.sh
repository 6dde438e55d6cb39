#!/usr/bin/env bash
# uroce on loopback against the kernel's own transports, measured side by side in one run:
#   - iperf3, one TCP stream (127.0.0.1 -> 127.0.0.2), -t SECONDS;
#   - bench/udp_baseline bw --mode gso and --mode mmsg (raw UDP, 64 KiB per send call),
#     udp_baseline pingpong (8-byte one-way latency) and udp_baseline pps (64-byte datagrams);
#   - udp_baseline pingpong --size 40 --datagrams 2 --gso: each hop a 40-byte datagram and a
#     20-byte one in one UDP_SEGMENT send, received whole with UDP_GRO, which is what an RC
#     ping-pong of 8-byte WRITEs asks of the kernel (the request and the ACK of the peer's, which
#     uroce holds for it): the floor of the kernel path under uroce's latency;
#   - uroce perf write_bw, read_bw and send_bw -s 65536 -D SECONDS, write_lat -s 8, and write_bw
#     -s 64 with a deep queue (message rate), each as two processes (server $SERVER_IP, client
#     $CLIENT_IP).
# Prints the raw JSON lines and a markdown table of ratios: RDMA WRITE bandwidth / iperf3 and
# / UDP GSO, READ and SEND bandwidth / WRITE's, latency ratios (median and 99th percentile, against
# the one-datagram ping-pong and against the two-datagram floor), message-rate ratio, and CPU
# seconds per GB on each side.
# Each pair of processes is pinned to CPUs 0 and 1 where the host has two (as udp_baseline pins
# its own). Release build in build-release/.
#
# Usage: bench/net_bench.sh [SECONDS]   (default 5)
# Environment: SERVER_IP, CLIENT_IP (default 127.0.0.1, 127.0.0.2) for uroce perf and iperf3;
# UDP_BASELINE: a udp_baseline binary built elsewhere.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
S=${1:-5}
SIP=${SERVER_IP:-127.0.0.1}
CIP=${CLIENT_IP:-127.0.0.2}
[[ $S =~ ^[0-9]+$ && $S -ge 1 ]] || {
  echo "net_bench: SECONDS must be a positive integer" >&2
  exit 2
}

scripts/install-deps >/dev/null
source bench/rounds_lib.sh
configure_release
targets=(uroce)
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
cpu0=() cpu1=()
if (($(nproc) >= 2)) && command -v taskset >/dev/null; then
  cpu0=(taskset -c 0) cpu1=(taskset -c 1)
fi

# iperf3: one TCP stream; the server answers one test and exits.
iperf_port=15201
timeout $((S + 60)) "${cpu0[@]}" iperf3 -s -1 -B "$SIP" -p $iperf_port >/dev/null 2>&1 &
iperf_srv=$!
ok=0
for _ in $(seq 1 100); do # the server may not listen yet: retry a refused connection
  if timeout $((S + 30)) "${cpu1[@]}" iperf3 -c "$SIP" -B "$CIP" -p $iperf_port -t "$S" -J \
    >"$tmp/iperf.json" 2>/dev/null; then
    ok=1
    break
  fi
  grep -q "Connection refused\|unable to connect" "$tmp/iperf.json" || break
  timeout 0.05 tail -f /dev/null || true
done
wait $iperf_srv || true
if ((!ok)); then
  echo "net_bench: iperf3 failed: $(grep -h '"error"' "$tmp/iperf.json" || true)" >&2
  echo '{}' >"$tmp/iperf.json"
fi

if ((have_udp_baseline)); then
  "$B" bw --mode gso --seconds "$S" --size 65536 >"$tmp/gso.json"
  "$B" bw --mode mmsg --seconds "$S" --size 65536 >"$tmp/mmsg.json"
  "$B" pingpong --iters 20000 --size 8 >"$tmp/pingpong.json"
  "$B" pingpong --iters 20000 --size 40 --datagrams 2 --gso >"$tmp/pingpong2.json"
  "$B" pps --size 64 --batch 32 --seconds "$S" >"$tmp/pps.json"
else
  for f in gso mmsg pingpong pingpong2 pps; do echo '{}' >"$tmp/$f.json"; done
fi

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
perf write_bw write_bw -s 65536 -D "$S"
perf read_bw read_bw -s 65536 -D "$S"
perf send_bw send_bw -s 65536 -D "$S"
perf write_lat write_lat -s 8 -n 20000
perf msgrate write_bw -s 64 -t 1024 -D "$S"

echo "## raw results ($S s per bandwidth run)"
for f in iperf gso mmsg pingpong pingpong2 pps write_bw read_bw send_bw write_lat msgrate; do
  if [[ $f == iperf ]]; then
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); e=d.get("end",{});
print(json.dumps({"iperf3_gbit_per_s": e.get("sum_received",{}).get("bits_per_second",0)/1e9,
 "cpu": e.get("cpu_utilization_percent",{})}))' "$tmp/iperf.json"
  else
    echo "$f: $(cat "$tmp/$f.json")"
  fi
done

python3 - "$tmp" "$S" "$have_udp_baseline" <<'EOF'
import json, sys
d, secs, have_udp = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
def load(name):
    # iperf3 -J writes one multi-line object; the others one object per line (the last counts).
    text = open(f"{d}/{name}.json").read().strip()
    for candidate in (text, text.splitlines()[-1] if text else ""):
        try:
            return json.loads(candidate)
        except ValueError:
            pass
    return {}
ip, gso, mmsg, pp, pps = (load(n) for n in ("iperf", "gso", "mmsg", "pingpong", "pps"))
wb, wl, mr = load("write_bw"), load("write_lat"), load("msgrate")
rb, sb, pp2 = load("read_bw"), load("send_bw"), load("pingpong2")
ie = ip.get("end", {})
ip_gbps = ie.get("sum_received", {}).get("bits_per_second", 0) / 1e9
ip_bytes = ie.get("sum_received", {}).get("bytes", 0)
ip_cpu = ie.get("cpu_utilization_percent", {})
def per_gb(cpu_s, nbytes):
    return cpu_s / (nbytes / 1e9) if nbytes else float("nan")
ip_snd = per_gb(ip_cpu.get("host_total", float("nan")) / 100 * secs, ip_bytes)
ip_rcv = per_gb(ip_cpu.get("remote_total", float("nan")) / 100 * secs, ip_bytes)
u_gbps = wb.get("bw_avg_gbit_s", float("nan"))
def ratio(a, b):
    try:
        return f"{a / b:.3f}" if a == a and b == b and b else "n/a"
    except TypeError:
        return "n/a"
def fmt(v, unit=""):
    return f"{v:.3f}{unit}" if isinstance(v, (int, float)) and v == v else "n/a"
na = "" if have_udp else " (udp_baseline not built)"
rows = [
    ("RDMA WRITE 64 KiB bandwidth vs iperf3 TCP", fmt(u_gbps, " Gb/s"), fmt(ip_gbps, " Gb/s"), ratio(u_gbps, ip_gbps)),
    ("RDMA WRITE 64 KiB bandwidth vs UDP GSO" + na, fmt(u_gbps, " Gb/s"), fmt(gso.get("gbit_per_s", float("nan")), " Gb/s"), ratio(u_gbps, gso.get("gbit_per_s", float("nan")))),
    ("RDMA WRITE 64 KiB bandwidth vs UDP sendmmsg" + na, fmt(u_gbps, " Gb/s"), fmt(mmsg.get("gbit_per_s", float("nan")), " Gb/s"), ratio(u_gbps, mmsg.get("gbit_per_s", float("nan")))),
    ("RDMA READ 64 KiB bandwidth vs RDMA WRITE's", fmt(rb.get("bw_avg_gbit_s", float("nan")), " Gb/s"), fmt(u_gbps, " Gb/s"), ratio(rb.get("bw_avg_gbit_s", float("nan")), u_gbps)),
    ("SEND 64 KiB bandwidth vs RDMA WRITE's", fmt(sb.get("bw_avg_gbit_s", float("nan")), " Gb/s"), fmt(u_gbps, " Gb/s"), ratio(sb.get("bw_avg_gbit_s", float("nan")), u_gbps)),
    ("8 B one-way latency (median; uroce t_typical) vs UDP ping-pong" + na, fmt(wl.get("t_typical_us", float("nan")), " us"), fmt(pp.get("one_way_us", float("nan")), " us"), ratio(wl.get("t_typical_us", float("nan")), pp.get("one_way_us", float("nan")))),
    ("8 B one-way latency, 99th percentile vs UDP ping-pong (rtt p99 / 2)" + na, fmt(wl.get("t_p99_us", float("nan")), " us"), fmt(pp.get("rtt_us_p99", float("nan")) / 2 if pp else float("nan"), " us"), ratio(wl.get("t_p99_us", float("nan")), pp.get("rtt_us_p99", float("nan")) / 2 if pp else float("nan"))),
    ("8 B one-way latency (median) vs two-datagram GSO ping-pong (an RC hop's kernel floor)" + na, fmt(wl.get("t_typical_us", float("nan")), " us"), fmt(pp2.get("one_way_us", float("nan")), " us"), ratio(wl.get("t_typical_us", float("nan")), pp2.get("one_way_us", float("nan")))),
    ("64 B message rate (write_bw -t 1024) vs UDP sendmmsg/recvmmsg" + na, fmt(mr.get("msg_rate_mpps", float("nan")), " Mpps"), fmt(pps.get("pps", float("nan")) / 1e6 if pps else float("nan"), " Mpps"), ratio(mr.get("msg_rate_mpps", float("nan")), pps.get("pps", float("nan")) / 1e6 if pps else float("nan"))),
]
gso_bytes = gso.get("bytes", 0)
cpu_rows = [
    ("uroce RDMA WRITE 64 KiB", wb.get("cpu_s_per_gb", float("nan")), wb.get("peer_cpu_s_per_gb", float("nan"))),
    ("iperf3 TCP", ip_snd, ip_rcv),
    ("UDP GSO" + na, per_gb(gso.get("sender_cpu_s", float("nan")), gso_bytes), per_gb(gso.get("receiver_cpu_s", float("nan")), gso_bytes)),
    ("UDP sendmmsg" + na, per_gb(mmsg.get("sender_cpu_s", float("nan")), mmsg.get("bytes", 0)), per_gb(mmsg.get("receiver_cpu_s", float("nan")), mmsg.get("bytes", 0))),
]
print()
print("| comparison | uroce | baseline | ratio (uroce / baseline) |")
print("| --- | --- | --- | --- |")
for r in rows:
    print("| " + " | ".join(r) + " |")
print()
print("| CPU seconds per GB moved | sender (client) | receiver (server) |")
print("| --- | --- | --- |")
for name, snd, rcv in cpu_rows:
    print(f"| {name} | {fmt(snd)} | {fmt(rcv)} |")
EOF
