#!/usr/bin/env python3
"""Per-thread CPU of a netbed run's processes (issue 39): bench/netbed_threads.py DELAY SPAN.

Run beside `tests/netbed/netbed.py run` (as root, in the root namespace: /proc shows every
namespace's processes). Waits until a uroce or ib_write_bw client runs, then DELAY seconds,
then reads every thread of the flows' processes (uroce, ib_write_bw, iperf3), of the statsd
samplers and of ksoftirqd from /proc/PID/task/TID/stat and .../status, SPAN seconds apart, and
prints each thread's user and system CPU share, voluntary and involuntary context switches per
second, and each CPU's user, system, softirq, idle and steal shares (/proc/stat). A client is a
process whose last argument is the receiver's address (or iperf3 with -c)."""
import os, sys, time
NAMES = {"ib_write_bw", "uroce", "iperf3", "ksoftirqd/0", "ksoftirqd/1", "uroce-devd", "python3"}
HZ = os.sysconf("SC_CLK_TCK")

def snap():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            comm = open(f"/proc/{pid}/comm").read().strip()
            if comm not in NAMES:
                continue
            cmd = [x for x in open(f"/proc/{pid}/cmdline").read().split("\0") if x]
            if comm == "python3" and "statsd" not in cmd:
                continue
            role = "client" if (cmd and cmd[-1] == "10.77.0.1") or "-c" in cmd else "server"
            for tid in os.listdir(f"/proc/{pid}/task"):
                st = open(f"/proc/{pid}/task/{tid}/stat").read()
                rest = st[st.rindex(")") + 2:].split()
                ut, stt = int(rest[11]), int(rest[12])
                tcomm = st[st.index("(") + 1:st.rindex(")")]
                vol = nv = 0
                for line in open(f"/proc/{pid}/task/{tid}/status"):
                    if line.startswith("voluntary_ctxt_switches"):
                        vol = int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        nv = int(line.split()[1])
                out[(int(pid), int(tid))] = (comm, role, tcomm, ut, stt, vol, nv)
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    cpus = {}
    for line in open("/proc/stat"):
        if line.startswith("cpu"):
            f = line.split()
            cpus[f[0]] = [int(x) for x in f[1:]]
    return out, cpus, time.monotonic()

delay, span = float(sys.argv[1]), float(sys.argv[2])
# Wait (up to 60 s) for a flow's client to start, then DELAY more.
for _ in range(600):
    if any(v[1] == "client" and v[0] != "iperf3" for v in snap()[0].values()):
        break
    time.sleep(0.1)
time.sleep(delay)
a, ca, t0 = snap()
time.sleep(span)
b, cb, t1 = snap()
dt = t1 - t0
print(f"# {dt:.2f} s; per thread: user% sys% vol_cs/s invol_cs/s")
rows = []
for k, v in b.items():
    if k not in a:
        continue
    u = (v[3] - a[k][3]) / HZ / dt * 100
    s = (v[4] - a[k][4]) / HZ / dt * 100
    vc = (v[5] - a[k][5]) / dt
    nc = (v[6] - a[k][6]) / dt
    rows.append((v[0], v[1], k[0], k[1], v[2], u, s, vc, nc))
rows.sort(key=lambda r: (r[0], r[1], r[2], r[3]))
for r in rows:
    if r[5] + r[6] < 0.5 and r[7] < 5:
        continue
    print(f"{r[0]:12s} {r[1]:6s} pid {r[2]:7d} tid {r[3]:7d} {r[4]:16s} user {r[5]:5.1f} sys {r[6]:5.1f} vcs/s {r[7]:8.0f} ivcs/s {r[8]:7.0f}")
names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
for c in sorted(cb):
    d = [cb[c][i] - ca[c][i] for i in range(8)]
    tot = sum(d) or 1
    print(c, " ".join(f"{n} {100 * x / tot:.1f}" for n, x in zip(names, d)))
