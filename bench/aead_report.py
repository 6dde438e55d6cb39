#!/usr/bin/env python3
"""Tables from bench/aead_bench's JSON (--benchmark_out, with --benchmark_repetitions): per key
size, library, operation and payload size, one packet's time, its bytes per second, cycles per
byte at the clock BM_Clock measured in the same run, and the speed against seal::Aead (uroce) on
the same row.

Each figure is the fastest repetition's (CPU time): on a shared machine other work only ever
slows a repetition down, so the fastest is the closest to the machine's own speed.

Usage: bench/aead_report.py RESULTS.json...   (several runs: the fastest repetition of all)
"""

import json
import re
import sys


def fastest(runs):
    """name -> (ns per iteration, items per second) of the fastest repetition of each row."""
    best = {}
    for b in (b for results in runs for b in results["benchmarks"]):
        if b.get("run_type") != "iteration" or b.get("error_occurred"):
            continue
        scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
        ns = b["cpu_time"] * scale
        name = b.get("run_name", b["name"])
        items = b.get("items_per_second", 0.0)
        if name not in best or ns < best[name][0]:
            best[name] = (ns, max(items, best.get(name, (0, 0))[1]))
    return best


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    runs = []
    for path in sys.argv[1:]:
        with open(path) as f:
            runs.append(json.load(f))
    best = fastest(runs)
    clock_hz = best.get("BM_Clock", (0.0, 0.0))[1]
    rows = {}
    for name, (ns, _) in best.items():
        m = re.match(r"BM_(Seal|Open)/(\w+)/bits:(\d+)/bytes:(\d+)$", name)
        if m:
            op, lib, bits, size = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
            rows[(bits, lib, op, size)] = ns
    print(f"clock (BM_Clock): {clock_hz / 1e9:.2f} GHz" if clock_hz else "clock: not measured")
    sizes = sorted({k[3] for k in rows})
    libs = []
    for k in rows:
        if k[1] not in libs:
            libs.append(k[1])
    for bits in sorted({k[0] for k in rows}, reverse=True):
        print(f"\nAES-{bits}-GCM: ns per packet, cycles per byte, speed against uroce")
        head = " | ".join(f"{op.lower()} {s} B" for s in sizes for op in ("Seal", "Open"))
        print(f"| library | {head} |")
        print("| --- |" + " --- |" * (2 * len(sizes)))
        for lib in libs:
            cells = []
            for size in sizes:
                for op in ("Seal", "Open"):
                    ns = rows.get((bits, lib, op, size))
                    ref = rows.get((bits, "uroce", op, size))
                    if ns is None:
                        cells.append("-")
                        continue
                    cpb = f", {ns * 1e-9 * clock_hz / size:.2f} c/B" if clock_hz else ""
                    ratio = f", x{ref / ns:.2f}" if ref else ""
                    cells.append(f"{ns:,.0f} ns{cpb}{ratio}")
            print(f"| {lib} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
