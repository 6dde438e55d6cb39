#!/usr/bin/env python3
"""The Markdown table of a benchmark that ran each row once per setting, A and B, per round
(bench/cc_loopback.sh, bench/aead_loopback.sh): per row both settings' medians and the median of
the rounds' own ratios (A / B; B / A where lower is better, so that above 1 is better for A in
every row), with the lowest and highest round's ratio.

Usage: ab_table.py DIR ROUNDS A_SIDE A_LABEL B_SIDE B_LABEL < ROWS
DIR holds RUN.SIDE.ROUND.json (the last line of each a uroce perf JSON object); ROWS has one row a
line, `label|run|key|higher` (higher: 1 when higher is better, else 0).
"""
import json
import statistics
import sys


def main():
    d, rounds = sys.argv[1], int(sys.argv[2])
    a_side, a_label, b_side, b_label = sys.argv[3:7]

    def val(run, side, r, key):
        with open(f"{d}/{run}.{side}.{r}.json") as fh:
            return float(json.loads(fh.read().strip().splitlines()[-1])[key])

    print(f"\n| row | {a_label}, median | {b_label}, median | "
          f"ratio, median of {rounds} rounds (low-high) |")
    print("| --- | --- | --- | --- |")
    for line in sys.stdin:
        if not line.strip():
            continue
        label, run, key, higher = line.rstrip("\n").split("|")
        a = [val(run, a_side, r, key) for r in range(1, rounds + 1)]
        b = [val(run, b_side, r, key) for r in range(1, rounds + 1)]
        ratios = [(x / y if higher == "1" else y / x) if x and y else float("nan")
                  for x, y in zip(a, b)]
        print(f"| {label} | {statistics.median(a):.3f} | {statistics.median(b):.3f} | "
              f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |")


main()
