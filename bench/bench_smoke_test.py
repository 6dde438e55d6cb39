#!/usr/bin/env python3
"""Smoke test of bench/udp_baseline and bench/datapath_bench: each command runs briefly, prints
one JSON object with the documented fields, moves data, and (datapath_bench) verifies every
ICRC; bad arguments fail with a message. No timing thresholds: only that things happened.

Usage: bench_smoke_test.py UDP_BASELINE DATAPATH_BENCH
"""
import json
import subprocess
import sys
import unittest

UDP_BASELINE = DATAPATH_BENCH = None


def run_json(*args):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=120, check=False)
    if p.returncode != 0:
        raise AssertionError(f"{args} exited {p.returncode}: {p.stdout} {p.stderr}")
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    if len(lines) != 1:
        raise AssertionError(f"{args}: expected one line of JSON, got {p.stdout!r}")
    return json.loads(lines[0])


class UdpBaseline(unittest.TestCase):
    def test_bw_both_modes(self):
        for mode in ("gso", "mmsg"):
            r = run_json(UDP_BASELINE, "bw", "--mode", mode, "--seconds", "0.3")
            for key in ("mode", "bytes", "seconds", "gbit_per_s", "sender_cpu_s", "receiver_cpu_s"):
                self.assertIn(key, r)
            self.assertEqual(r["mode"], mode)
            self.assertGreater(r["bytes"], 0)
            self.assertGreater(r["gbit_per_s"], 0)
            self.assertGreaterEqual(r["seconds"], 0.3)

    def test_bw_window(self):
        # The sender's credit window is reported; 0 sends without one.
        for window in ("0", "8388608"):
            r = run_json(UDP_BASELINE, "bw", "--mode", "gso", "--seconds", "0.3", "--window", window)
            self.assertEqual(r["window_bytes"], int(window))
            self.assertGreater(r["bytes"], 0)
        r = run_json(UDP_BASELINE, "bw", "--mode", "gso", "--seconds", "0.3")
        self.assertEqual(r["window_bytes"], 2 << 20)

    def test_pingpong(self):
        r = run_json(UDP_BASELINE, "pingpong", "--iters", "2000", "--size", "8")
        self.assertGreater(r["one_way_us"], 0)
        self.assertEqual(r["iters"], 2000)
        self.assertLessEqual(r["rtt_us_min"], r["rtt_us_p50"])

    def test_pingpong_of_several_datagrams(self):
        # A hop of two datagrams (an RC request and the ACK that rides with it), by sendmmsg or
        # in one UDP_SEGMENT send: every round trip completes and is reported as asked for.
        for extra in ([], ["--gso"]):
            r = run_json(UDP_BASELINE, "pingpong", "--iters", "2000", "--size", "40",
                         "--datagrams", "2", *extra)
            self.assertEqual(r["datagrams"], 2)
            self.assertEqual(r["gso"], bool(extra))
            self.assertEqual(r["iters"], 2000)
            self.assertEqual(r["resent"], 0)
            self.assertLessEqual(r["rtt_us_min"], r["rtt_us_p50"])

    def test_pps(self):
        r = run_json(UDP_BASELINE, "pps", "--size", "64", "--batch", "8", "--seconds", "0.3")
        self.assertGreater(r["pps"], 0)
        self.assertEqual(r["batch"], 8)

    def test_bad_arguments_fail_clearly(self):
        for args in (["bw", "--mode", "tcp"], ["bw", "--window", "-1"], ["pps", "--batch", "0"],
                     ["pingpong", "--datagrams", "0"], ["pingpong", "--datagrams", "9"],
                     ["nosuch"], []):
            p = subprocess.run([UDP_BASELINE, *args], capture_output=True, text=True,
                               timeout=30, check=False)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertTrue(p.stderr.strip() or p.stdout.strip(), args)


class DatapathBench(unittest.TestCase):
    def test_every_mode_moves_verified_packets(self):
        for mode in ("single", "mmsg", "gso"):
            r = run_json(DATAPATH_BENCH, "--mode", mode, "--seconds", "0.3", "--mtu", "1024",
                         "--message", "20000")
            self.assertGreater(r["packets"], 0, mode)
            self.assertEqual(r["rx_bad_icrc"], 0, mode)
            self.assertEqual(r["rx_drops"], 0, mode)
            if mode == "gso":
                self.assertGreater(r["tx_gso_datagrams"], 0)
            else:
                self.assertEqual(r["tx_gso_datagrams"], 0)

    def test_bad_mode_fails(self):
        p = subprocess.run([DATAPATH_BENCH, "--mode", "xdp"], capture_output=True, text=True,
                           timeout=30, check=False)
        self.assertNotEqual(p.returncode, 0)


if __name__ == "__main__":
    UDP_BASELINE, DATAPATH_BENCH = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:])
