#!/usr/bin/env python3
"""Summarises icrc_bench's JSON output (--benchmark_format=json or --benchmark_out): throughput of
ICRC, plain CRC-32, the fused copy+CRC and memcpy per packet size and the ratios to memcpy, as
Markdown tables.

Usage: bench/icrc_report.py RESULTS.json

With --benchmark_repetitions it uses the median of the repetitions and shows their coefficient of
variation; otherwise the single run. GB/s means 10^9 bytes per second (Google Benchmark's own
console output uses 2^30).
"""

import json
import sys

GOAL_MIN_BYTES = 1024  # the project's goal: ICRC at least as fast as memcpy from 1 KiB up


def load(path):
    with open(path) as f:
        data = json.load(f)
    medians, cvs, singles = {}, {}, {}
    for b in data['benchmarks']:
        name = b.get('run_name', b['name'])
        if b.get('run_type') == 'aggregate':
            if b.get('aggregate_name') == 'median':
                medians[name] = b['bytes_per_second']
            elif b.get('aggregate_name') == 'cv':
                cvs[name] = b['bytes_per_second']
        elif 'bytes_per_second' in b:
            singles.setdefault(name, b['bytes_per_second'])
    return data['context'], (medians or singles), cvs


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    context, rate, cv = load(argv[1])
    sizes = sorted({int(n.split('/')[1]) for n in rate if n.startswith('BM_Icrc/')})

    def gbs(kind, size):
        return rate.get(f'{kind}/{size}', float('nan')) / 1e9

    def cv_pct(kind, size):
        c = cv.get(f'{kind}/{size}')
        return f' ±{100 * c:.0f}%' if c is not None else ''

    print(f"icrc_bench: {context.get('date', '?')}, {context.get('num_cpus', '?')} CPUs, "
          f"Google Benchmark library built as {context.get('library_build_type', '?')}; "
          f"{'median of repetitions (±cv)' if cv else 'single run'}")
    print()
    print('| packet | ICRC GB/s | crc32 GB/s | copy+CRC GB/s | memcpy GB/s | memcpy, then crc32 GB/s '
          '| **ICRC/memcpy** | crc32/memcpy | copy+CRC/memcpy |')
    print('| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
    met = True
    for s in sizes:
        icrc, copy, crc = gbs('BM_Icrc', s), gbs('BM_Memcpy', s), gbs('BM_Crc32', s)
        fused, two_pass = gbs('BM_CopyCrc32', s), gbs('BM_MemcpyThenCrc32', s)
        print(f'| {s} B | {icrc:.1f}{cv_pct("BM_Icrc", s)} | {crc:.1f}{cv_pct("BM_Crc32", s)} | '
              f'{fused:.1f}{cv_pct("BM_CopyCrc32", s)} | {copy:.1f}{cv_pct("BM_Memcpy", s)} | '
              f'{two_pass:.1f}{cv_pct("BM_MemcpyThenCrc32", s)} | **{icrc / copy:.2f}** | '
              f'{crc / copy:.2f} | {fused / copy:.2f} |')
        if s >= GOAL_MIN_BYTES and not icrc >= copy:
            met = False
    others = [(k, label) for k, label in (
        ('BM_IcrcIsal', 'ICRC, ISA-L fallback'),
        ('BM_IsalCrc32', 'ISA-L crc32_gzip_refl'),
        ('BM_IsalBy16', 'ISA-L by16_10'),
        ('BM_IsalBy8', 'ISA-L by8'),
        ('BM_IsalBase', 'ISA-L base'))
        if any(n.startswith(k + '/') for n in rate)]
    if others:
        print()
        print('Fallback and ISA-L kernels called directly (GB/s):')
        print()
        print('| packet | ' + ' | '.join(label for _, label in others) + ' |')
        print('| ---: |' + ' ---: |' * len(others))
        for s in sizes:
            print(f'| {s} B | ' + ' | '.join(f'{gbs(k, s):.1f}{cv_pct(k, s)}' for k, _ in others)
                  + ' |')
    print()
    print(f'Goal (ICRC >= memcpy at {GOAL_MIN_BYTES} B and above): '
          f'{"met" if met else "NOT met"}')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
