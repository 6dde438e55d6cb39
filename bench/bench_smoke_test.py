#!/usr/bin/env python3
"""Smoke test of bench/udp_baseline and bench/datapath_bench: each command runs briefly, prints
one JSON object with the documented fields, moves data, and (datapath_bench) verifies every
ICRC; bad arguments fail with a message. With MPI_PINGPONG (and MPIEXEC, default mpirun) in the
environment, bench/mpi_pingpong as 2 ranks over Open MPI's pml ob1 (btl tcp,self on lo): one
line per metric with the documented fields, and no numbers but a failure when a message arrives
corrupted. No timing thresholds: only that things happened.

Usage: bench_smoke_test.py UDP_BASELINE DATAPATH_BENCH
"""
import json
import os
import subprocess
import sys
import unittest

UDP_BASELINE = DATAPATH_BENCH = None
MPI_PINGPONG = os.environ.get("MPI_PINGPONG")
MPIEXEC = os.environ.get("MPIEXEC") or "mpirun"


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

    def test_pingpong_through_io_uring(self):
        # Both sides receive through io_uring (each poll of the completion ring in user space,
        # or asking the kernel first): every round trip completes, one datagram or two in one
        # UDP_SEGMENT send. Skipped where the kernel refuses io_uring (kernel.io_uring_disabled,
        # a seccomp filter).
        for receive in ("uring", "uring-defer"):
            for extra in ([], ["--size", "40", "--datagrams", "2", "--gso"]):
                p = subprocess.run([UDP_BASELINE, "pingpong", "--iters", "2000", "--receive",
                                    receive, *extra], capture_output=True, text=True, timeout=120,
                                   check=False)
                if p.returncode != 0 and "io_uring_queue_init" in p.stderr:
                    self.skipTest(p.stderr.strip())
                self.assertEqual(p.returncode, 0, p.stderr)
                r = json.loads(p.stdout)
                self.assertEqual(r["receive"], receive)
                self.assertEqual(r["iters"], 2000)
                self.assertEqual(r["resent"], 0)
                self.assertEqual(r["datagrams"], 2 if extra else 1)
                self.assertLessEqual(r["rtt_us_min"], r["rtt_us_p50"])

    def test_pingpong_with_uroces_system_calls(self):
        # --calls uroce: sendmmsg and recvmmsg with TOS/TTL control messages, one datagram, two
        # cut by UDP_SEGMENT and counted by length under GRO, and two sent apart.
        for extra, datagrams in (([], 1), (["--size", "40", "--datagrams", "2", "--gso"], 2),
                                 (["--size", "40", "--datagrams", "2"], 2)):
            r = run_json(UDP_BASELINE, "pingpong", "--iters", "2000", "--calls", "uroce", *extra)
            self.assertEqual(r["calls"], "uroce")
            self.assertEqual(r["datagrams"], datagrams)
            self.assertEqual(r["iters"], 2000)
            self.assertEqual(r["resent"], 0)
        self.assertEqual(run_json(UDP_BASELINE, "pingpong", "--iters", "10")["calls"], "plain")

    def test_pps(self):
        r = run_json(UDP_BASELINE, "pps", "--size", "64", "--batch", "8", "--seconds", "0.3")
        self.assertGreater(r["pps"], 0)
        self.assertEqual(r["batch"], 8)

    def test_bad_arguments_fail_clearly(self):
        for args in (["bw", "--mode", "tcp"], ["bw", "--window", "-1"], ["pps", "--batch", "0"],
                     ["pingpong", "--datagrams", "0"], ["pingpong", "--datagrams", "9"],
                     ["pingpong", "--receive", "epoll"], ["pingpong", "--calls", "io"],
                     ["pingpong", "--calls", "uroce", "--receive", "uring"],
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

    def test_pingpong_of_write_and_ack(self):
        # Every round trip carries the WRITE it should and its ACK (the bench fails otherwise),
        # and the latency is reported as documented.
        for mode in ("gso", "mmsg"):
            r = run_json(DATAPATH_BENCH, "--pingpong", "2000", "--mode", mode)
            self.assertEqual(r["mode"], mode)
            self.assertEqual(r["pingpong"], 2000)
            for key in ("one_way_us_mean", "client_cpu_s", "echo_cpu_s"):
                self.assertIn(key, r)
            self.assertGreater(r["one_way_us_min"], 0)
            self.assertLessEqual(r["one_way_us_min"], r["one_way_us"])
            self.assertLessEqual(r["one_way_us"], r["one_way_us_p99"])

    def test_bad_mode_fails(self):
        p = subprocess.run([DATAPATH_BENCH, "--mode", "xdp"], capture_output=True, text=True,
                           timeout=30, check=False)
        self.assertNotEqual(p.returncode, 0)


def mpi_pingpong(*args):
    """mpi_pingpong ARGS as 2 ranks over pml ob1, TCP on lo only (BTL ports 18700-18779: a port
    stays taken for TIME_WAIT after its run, so the suite may run again within the minute)."""
    cmd = [MPIEXEC, "--allow-run-as-root", "-np", "2", "--mca", "pml", "ob1", "--mca", "btl",
           "tcp,self", "--mca", "btl_tcp_if_include", "lo", "--mca", "btl_tcp_port_min_v4",
           "18700", "--mca", "btl_tcp_port_range_v4", "80", "--mca", "oob_tcp_if_include", "lo",
           "--mca", "mtl", "^ofi", MPI_PINGPONG, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=100, check=False)


def mpi_lines(stdout):
    """{metric or "moved": {key: value}} of mpi_pingpong's "mpi_pingpong: k=v ..." lines."""
    out = {}
    for line in stdout.splitlines():
        if not line.startswith("mpi_pingpong: "):
            continue
        fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
        name = fields.pop("metric", "moved")
        if name in out:
            raise AssertionError(f"{name} printed twice: {stdout!r}")
        out[name] = fields
    return out


@unittest.skipUnless(MPI_PINGPONG, "MPI_PINGPONG is not set (Open MPI not found at build time)")
class MpiPingpong(unittest.TestCase):
    def test_one_line_per_metric(self):
        p = mpi_pingpong("200", "3")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        m = mpi_lines(p.stdout)
        self.assertEqual(set(m), {"latency", "bandwidth", "moved"}, p.stdout)
        lat, bw = m["latency"], m["bandwidth"]
        self.assertEqual((lat["bytes"], lat["iters"]), ("8", "200"))
        self.assertGreater(float(lat["one_way_us_min"]), 0)
        self.assertLessEqual(float(lat["one_way_us_min"]), float(lat["one_way_us_median"]))
        self.assertEqual((bw["bytes"], bw["iters"]), ("1048576", "3"))
        # MB/s is 2 MiB over the median round trip (us): the two printed numbers agree.
        self.assertAlmostEqual(float(bw["mb_per_s"]) * float(bw["rtt_us_median"]), 2 * 1048576,
                               delta=2 * 1048576 * 0.01)
        # Warm-up: a tenth of the iterations, at least one: 20 x 8 B and 1 x 1 MiB.
        self.assertEqual(m["moved"]["moved"], str(8 * (20 + 200) + 1048576 * (1 + 3)))

    def test_corrupted_message_fails_without_numbers(self):
        p = mpi_pingpong("--corrupt", "200", "3")
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertEqual(mpi_lines(p.stdout), {}, p.stdout)
        self.assertIn("wrong byte at 1048576 B, iteration 3", p.stderr)

    def test_bad_arguments_fail(self):
        for args in (["0"], ["1", "2", "3"]):
            p = mpi_pingpong(*args)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertEqual(mpi_lines(p.stdout), {}, args)
            self.assertIn("usage: ", p.stderr, args)


if __name__ == "__main__":
    UDP_BASELINE, DATAPATH_BENCH = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:])
