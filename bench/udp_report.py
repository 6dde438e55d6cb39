#!/usr/bin/env python3
"""Prints the medians of scripts/bench-udp.sh's runs (build-release/bench/udp.jsonl) as tables."""
import json
import statistics
import sys


def main(path):
    runs = {}
    for line in open(path):
        rec = json.loads(line)
        runs.setdefault(rec["label"], []).append(rec["result"])

    def med(label, key):
        vals = [r[key] for r in runs.get(label, []) if key in r]
        return statistics.median(vals) if vals else float("nan")

    def spread(label, key):
        vals = [r[key] for r in runs.get(label, []) if key in r]
        if len(vals) < 2:
            return ""
        return f" ({min(vals):.2f}-{max(vals):.2f})"

    def per_packet(label, key):
        # CPU time per packet received, in ns: robust against time spent descheduled.
        vals = []
        for r in runs.get(label, []):
            packets = r.get("packets", r.get("rx_packets", 0))
            if packets:
                vals.append(r[key] * 1e9 / packets)
        return statistics.median(vals) if vals else float("nan")

    n = max((len(v) for v in runs.values()), default=0)
    print(f"Medians of {n} runs each (min-max in parentheses).\n")
    print("Bandwidth, 4112-byte datagrams (RDMA WRITE Middle packets at MTU 4096):\n")
    print("| run | Gbit/s (UDP payload) | vs udp bw gso | sender CPU s/s | receiver CPU s/s "
          "| sender CPU ns/packet | receiver CPU ns/packet |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = med("udp bw gso", "gbit_per_s")
    for label, key in [("udp bw gso", "gbit_per_s"), ("udp bw mmsg", "gbit_per_s"),
                       ("datapath single", "wire_gbit_per_s"), ("datapath mmsg", "wire_gbit_per_s"),
                       ("datapath gso", "wire_gbit_per_s"),
                       ("datapath gso 1MiB", "wire_gbit_per_s")]:
        if label not in runs:
            continue
        g = med(label, key)
        secs = med(label, "seconds")
        print(f"| {label} | {g:.2f}{spread(label, key)} | {g / base:.2f} "
              f"| {med(label, 'sender_cpu_s') / secs:.2f} "
              f"| {med(label, 'receiver_cpu_s') / secs:.2f} "
              f"| {per_packet(label, 'sender_cpu_s'):.0f} "
              f"| {per_packet(label, 'receiver_cpu_s'):.0f} |")
    print("\nPacket rate, 64-byte datagrams (an RDMA WRITE Only of 32 bytes):\n")
    print("| run | Mpps | vs udp pps | sender CPU s/s | receiver CPU s/s "
          "| sender CPU ns/packet | receiver CPU ns/packet |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = med("udp pps 64B", "pps")
    for label in ["udp pps 64B", "datapath single 64B", "datapath mmsg 64B"]:
        if label not in runs:
            continue
        p = med(label, "pps")
        secs = med(label, "seconds")
        vals = [r["pps"] / 1e6 for r in runs[label]]
        rng = f" ({min(vals):.3f}-{max(vals):.3f})" if len(vals) > 1 else ""
        print(f"| {label} | {p / 1e6:.3f}{rng} | {p / base:.2f} "
              f"| {med(label, 'sender_cpu_s') / secs:.2f} "
              f"| {med(label, 'receiver_cpu_s') / secs:.2f} "
              f"| {per_packet(label, 'sender_cpu_s'):.0f} "
              f"| {per_packet(label, 'receiver_cpu_s'):.0f} |")
    if "udp pingpong 8B" in runs:
        print("\nLatency, 8-byte datagrams, busy polling (round trip / 2):\n")
        print("| run | one-way us (median) | one-way us (mean) | RTT p99 us |")
        print("| --- | ---: | ---: | ---: |")
        label = "udp pingpong 8B"
        print(f"| {label} | {med(label, 'one_way_us'):.2f} | {med(label, 'one_way_us_mean'):.2f} "
              f"| {med(label, 'rtt_us_p99'):.2f} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build-release/bench/udp.jsonl")
