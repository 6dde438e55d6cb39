#!/usr/bin/env python3
"""Many processes on one shared device, some SIGKILLed mid-run (issue 43).

    bench/many_procs.py --bin build/bench/many_procs --uroce build/src/tools/uroce \\
        --ip 127.81.43.1 --procs 64 --kill 16 --seed 1

Starts a holder (`many_procs --hold 1`: one context that keeps the device's coordinator up across
the run), takes the device's state from `uroce stats` (contexts, QPN blocks in use, closed QPs,
rdma_cm IDs), then starts --procs workers (bench/many_procs.cc) in pairs on that device, each with
--qps RC QPs to its partner and --iters iterations of verified RDMA WRITE + SEND traffic. It relays
each worker's QPNs to its partner, starts the traffic once every worker is connected ("rts" to
all), and when a worker says "half" (it has done half of its iterations and waits, progressing)
either lets it go on ("go") or, for the --kill victims chosen with --seed, SIGKILLs it there.

It fails (exit 1) unless:
- every victim died of the SIGKILL (or, when its partner was a victim killed first, exited 3
  before it got to half), every worker whose partner lived exited 0 with all its data
  checked, and every worker whose partner was killed exited 3 (it cannot finish: the partner
  stopped answering, retry exceeded): none hung (a worker still running at --timeout is one),
  none saw wrong data;
- once all workers have exited, `uroce stats` shows the device as before the run: the holder the
  only context, the QPN blocks in use and rdma_cm IDs as before, no closed QP still answered for
  (they expire after their peer's retry budget: this waits for that), and no worker's stats
  endpoint left; the same coordinator process runs, with as many open files as before.
With --rounds R it does this R times in a row against the same coordinator (round r's victims
from seed + r), and reports the coordinator's RSS after each round (growth would be a leak).
No step waits on a timer: each waits for a worker's line, its exit, or `uroce stats`' answer
(the reclaim check looks again every 50 ms until the state is back or --timeout).
Prints a JSON line per round and one for the whole run: the counts, the reclaim figures and
the wall-clock times.
"""
import argparse
import json
import os
import random
import re
import selectors
import signal
import subprocess
import sys
import time


def stats(uroce, ip):
    """The shared device's lines of `uroce stats` for ip (the other devices' lines ignored)."""
    out = subprocess.run([uroce, "stats"], capture_output=True, text=True, timeout=120).stdout
    st = {"members": {}, "contexts": None, "qpn_blocks_used": None, "closed_qps": None,
          "cm_ids": None, "unsteered_pkts": None}
    key = f"{ip}:4791"
    for line in out.splitlines():
        f = line.split()
        if len(f) < 2 or f[1] != key:
            continue
        kv = dict(zip(f[2::2], f[3::2]))
        if f[0] == "member":
            st["members"][int(kv["pid"])] = int(kv["qpn_blocks"])
        elif f[0] == "shared":
            for k in ("contexts", "qpn_blocks_used", "closed_qps", "unsteered_pkts"):
                st[k] = int(kv[k]) if k in kv else None
        elif f[0] == "cm":
            st["cm_ids"] = int(kv.get("cm_ids", -1))
    return st


def devd_resources(ip):
    """(pid, open fds, RSS kB) of the device's coordinator (the uroce-devd run with --ip ip)."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            if not args[0].endswith(b"uroce-devd") or ip.encode() not in args:
                continue
            fds = len(os.listdir(f"/proc/{d}/fd"))
            with open(f"/proc/{d}/status") as f:
                rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
            return int(d), fds, rss
        except (OSError, StopIteration):
            continue
    return None, None, None


def stats_endpoint_pids():
    """Pids with a uroce stats endpoint (@uroce/<pid>/<device>) in this network namespace."""
    pids = set()
    with open("/proc/net/unix") as f:
        for line in f:
            m = re.search(r"@uroce/(\d+)/", line)
            if m:
                pids.add(int(m.group(1)))
    return pids


class Proc:
    def __init__(self, idx, argv, stderr):
        self.idx = idx
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=stderr, bufsize=0)
        self.buf = b""
        self.lines = []
        self.last = ""
        self.killed = False
        self.eof = False

    def send(self, line):
        try:
            self.p.stdin.write((line + "\n").encode())
        except (BrokenPipeError, ValueError):
            pass  # it died (a victim, or failed): its exit says so


def run_round(a, rnd, seed, before, devd_pid, failures, errfile, deadline):
    """One round: --procs workers, the victims of `seed` killed; returns the round's figures."""
    victims = set(random.Random(seed).sample(range(a.procs), a.kill))
    print(f"many_procs: round {rnd} seed {seed} victims {sorted(victims)}", flush=True)
    t_start = time.monotonic()
    common = ["--ip", a.ip, "--qps", str(a.qps), "--iters", str(a.iters), "--size", str(a.size),
              "--ack-timeout", str(a.ack_timeout)]
    workers = [Proc(i, [a.bin] + common, errfile(f"round{rnd}.worker{i}.err"))
               for i in range(a.procs)]
    partner = lambda i: i ^ 1
    sel = selectors.DefaultSelector()
    for w in workers:
        sel.register(w.p.stdout, selectors.EVENT_READ, w)
    open_pipes = len(workers)
    rts = 0
    during = None
    t_setup = None
    while open_pipes:
        left = deadline - time.monotonic()
        events = sel.select(timeout=max(left, 0)) if left > 0 else []
        if not events:
            hung = [w.idx for w in workers if not w.eof]
            failures.append(f"round {rnd}: workers {hung} still running at the {a.timeout} s "
                            "guard (a hang)")
            for w in workers:
                if w.p.poll() is None:
                    w.p.kill()
            break
        for key, _ in events:
            w = key.data
            chunk = os.read(w.p.stdout.fileno(), 65536)
            if not chunk:
                sel.unregister(w.p.stdout)
                w.eof = True
                open_pipes -= 1
                continue
            w.buf += chunk
            while b"\n" in w.buf:
                raw, w.buf = w.buf.split(b"\n", 1)
                line = raw.decode(errors="replace")
                w.last = line
                p = workers[partner(w.idx)]
                if line.startswith("ready "):
                    p.send(line)
                elif line == "rts":
                    # A barrier: traffic starts once every worker is connected, after a look at
                    # the coordinator with every context in and none gone.
                    rts += 1
                    if rts == len(workers):
                        t_setup = time.monotonic() - t_start
                        during = stats(a.uroce, a.ip)
                        _, during["devd_fds"], during["devd_rss_kb"] = devd_resources(a.ip)
                        for x in workers:
                            x.send("rts")
                elif line == "half":
                    # The worker waits here (progressing) for "go": a victim is killed with its
                    # QPs in RTS and half of its traffic done, and its partner cannot finish.
                    if w.idx in victims:
                        w.p.send_signal(signal.SIGKILL)
                        w.killed = True
                    else:
                        w.send("go")
    outcome = {"done": 0, "peer_gone_exit3": 0, "killed": 0, "victim_partner_gone_first": 0}
    bytes_checked = 0
    probes = 0
    for w in workers:
        rc = w.p.wait()
        partner_killed = partner(w.idx) in victims
        if w.idx in victims:
            if rc == -signal.SIGKILL and w.killed:
                outcome["killed"] += 1
            elif rc == 3 and partner_killed and not w.killed:
                # Its partner, a victim too, was killed first: it never got to half.
                outcome["victim_partner_gone_first"] += 1
            else:
                failures.append(f"round {rnd}: victim {w.idx} exited {rc} ({w.last!r}), not by "
                                "its SIGKILL")
            continue
        m = re.search(r"bytes_checked (\d+) probes (\d+)", w.last)
        if rc == 0 and m and not partner_killed:
            bytes_checked += int(m.group(1))
            probes += int(m.group(2))
            outcome["done"] += 1
        elif rc == 3 and partner_killed:
            outcome["peer_gone_exit3"] += 1
        else:
            why = "its partner was killed" if partner_killed else "its partner lived"
            failures.append(f"round {rnd}: worker {w.idx} exited {rc} ({w.last!r}); {why}")
    t_exited = time.monotonic() - t_start
    blocks_each = (a.qps + 255) // 256
    if during is not None and (
            during["contexts"] != a.procs + 1 or
            during["qpn_blocks_used"] != before["qpn_blocks_used"] + a.procs * blocks_each):
        failures.append(f"round {rnd}: at full load {during}, expected {a.procs + 1} contexts "
                        f"and {before['qpn_blocks_used'] + a.procs * blocks_each} QPN blocks")

    # Reclaim: the coordinator removes a dead context once its process has exited, and answers
    # for closed QPs for their peers' retry budget: poll its state until it is back (or the guard).
    worker_pids = {w.p.pid for w in workers}
    polls = 0
    while True:
        polls += 1
        after = stats(a.uroce, a.ip)
        pid_now, after["devd_fds"], after["devd_rss_kb"] = devd_resources(a.ip)
        leftover = worker_pids & stats_endpoint_pids()
        same = (after["contexts"] == before["contexts"] and
                after["qpn_blocks_used"] == before["qpn_blocks_used"] and
                after["members"] == before["members"] and after["cm_ids"] == before["cm_ids"] and
                after["closed_qps"] == 0 and not leftover and pid_now == devd_pid and
                after["devd_fds"] == before["devd_fds"])
        if same or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # between looks at a state that changes on its own timers
    t_reclaim = time.monotonic() - t_start - t_exited
    if not same:
        failures.append(f"round {rnd}: not reclaimed: before {before}, after {after}, "
                        f"stats endpoints of workers left: {sorted(leftover)}")
    shown = ("contexts", "qpn_blocks_used", "closed_qps", "cm_ids", "devd_fds", "devd_rss_kb")
    return {
        "seed": seed, "killed": outcome["killed"],
        "victims_whose_partner_died_first": outcome["victim_partner_gone_first"],
        "done": outcome["done"], "partner_killed_exit3": outcome["peer_gone_exit3"],
        "bytes_checked": bytes_checked, "probes": probes,
        "during": {k: during[k] for k in shown if k in during} if during else None,
        "after": {k: after[k] for k in shown},
        "unsteered_pkts": after["unsteered_pkts"], "reclaim_polls": polls,
        "setup_s": round(t_setup, 2) if t_setup is not None else None,
        "all_exited_s": round(t_exited, 2), "reclaim_s": round(t_reclaim, 2),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="bench/many_procs")
    ap.add_argument("--uroce", required=True, help="the uroce tool (uroce stats)")
    ap.add_argument("--ip", required=True, help="the shared device's address (loopback)")
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--kill", type=int, default=16, help="workers SIGKILLed mid-run")
    ap.add_argument("--seed", type=int, default=None,
                    help="victims' choice (round r: seed + r; default: random)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of --procs workers one after another on the same coordinator")
    ap.add_argument("--qps", type=int, default=16)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--ack-timeout", type=int, default=18,
                    help="QPs' ACK timeout exponent: a dead partner is seen after 8 of them")
    ap.add_argument("--timeout", type=float, default=600,
                    help="hang guard for the whole run: workers still running then fail it")
    ap.add_argument("--logdir", default=None, help="each worker's stderr (default: discarded)")
    a = ap.parse_args()
    if a.procs < 2 or a.procs % 2 or not 0 <= a.kill <= a.procs or a.rounds < 1:
        ap.error("--procs must be even and >= 2, --kill between 0 and --procs, --rounds >= 1")
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"many_procs: seed {seed}", flush=True)
    failures = []
    t_start = time.monotonic()
    deadline = t_start + a.timeout

    def errfile(name):
        if a.logdir is None:
            return subprocess.DEVNULL
        os.makedirs(a.logdir, exist_ok=True)
        return open(os.path.join(a.logdir, name), "w")

    holder = Proc(-1, [a.bin, "--ip", a.ip, "--hold", "1", "--qps", "1"], errfile("holder.err"))
    ready = holder.p.stdout.readline().decode()
    if not ready.startswith("ready"):
        print(f"many_procs: the holder did not start: {ready!r}", file=sys.stderr)
        return 1
    before = stats(a.uroce, a.ip)
    devd_pid, before["devd_fds"], before["devd_rss_kb"] = devd_resources(a.ip)
    print(f"many_procs: before {json.dumps(before)}", flush=True)
    rounds = []
    for r in range(a.rounds):
        rounds.append(run_round(a, r, seed + r, before, devd_pid, failures, errfile, deadline))
        print(f"many_procs: round {r} {json.dumps(rounds[-1])}", flush=True)
        if failures:
            break
    holder.send("end")
    if holder.p.wait() != 0:
        failures.append("the holder failed")
    shown = ("contexts", "qpn_blocks_used", "closed_qps", "cm_ids", "devd_fds", "devd_rss_kb")
    total = lambda k: sum(x[k] for x in rounds)
    result = {
        "procs": a.procs, "qps_per_proc": a.qps, "iters": a.iters, "size": a.size, "seed": seed,
        "rounds": len(rounds), "killed": total("killed"),
        "victims_whose_partner_died_first": total("victims_whose_partner_died_first"),
        "done": total("done"), "partner_killed_exit3": total("partner_killed_exit3"),
        "bytes_checked": total("bytes_checked"),
        "before": {k: before[k] for k in shown},
        "devd_rss_kb_after_each_round": [x["after"]["devd_rss_kb"] for x in rounds],
        "seconds": round(time.monotonic() - t_start, 2),
        "failures": failures,
    }
    print(json.dumps(result), flush=True)
    for f in failures:
        print(f"many_procs: FAIL: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
