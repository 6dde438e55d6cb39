#!/usr/bin/env python3
"""The real-network test bed of issue 39: N senders into one receiver through a bottleneck.

Network namespaces only (nothing is configured in the root namespace), named after this
process's pid (nb<pid>-...):

  nb<pid>-s1 .. -sN   senders: eth0 10.77.0.(10+i)/24
  nb<pid>-sw          the switch: bridge br0, one port p<i> per sender and the port pr towards
                      the receiver. pr's egress is the bottleneck: a TBF (rate, burst, limit =
                      the buffer) and, with ECN on, the BPF marker (netbed_bpf.c, section
                      tc/marker) on clsact egress in front of it.
  nb<pid>-d           only with an RTT: the delay stage between pr and the receiver. Data
                      (towards the receiver) passes at once (tc u32 + mirred redirect); the
                      return path (ACKs, CNPs, TCP ACKs) is held for the whole RTT by
                      delayline.c (this kernel has neither netem nor the fq qdisc).
  nb<pid>-r           the receiver: eth0 10.77.0.1/24, every flow's server.

Each flow is a uroce perf write_bw pair (data verified by uroce perf), an unmodified
ib_write_bw pair over the drop-in libibverbs.so.1, or an iperf3 TCP stream; flow i runs on
sender (i mod N) + 1. With ECN on, a BPF program on each sender's egress sets ECT(0) on Not-ECT
RoCEv2 packets (as a RoCE NIC with ECN enabled does; uroce does not set ECT itself yet), and TCP
senders ask for ECN (net.ipv4.tcp_ecn=1). A BPF program on the receiver's ingress counts every
IPv4 packet by ECN codepoint. Offloads (TSO, GSO, UDP GSO, checksum) are off on every veth, so
the TBF and the marker see wire-sized packets with complete checksums, and an XDP program that
passes everything is attached to every veth end (--veth-napi, on by default): it puts the veth
in NAPI mode, one receive ring taken off in order, where otherwise a frame goes through the
backlog of whichever CPU sent it and a flow whose sender moves between CPUs arrives reordered
(measured: 3 uroce senders, no drop anywhere, 13-25% of their packets retransmitted after
out-of-sequence NAKs without it, none with it).

Commands:
  netbed.py run [options]    one run; a table on stdout, the report as JSON with --json FILE
  netbed.py probe            exit 0 if the host can run the bed, 77 (with the reason) if not
  netbed.py reap             remove beds left behind by processes that no longer run
  netbed.py statsd           (internal) samples `uroce stats` counters inside a namespace

Exit status of run: 0 when every flow completed (uroce perf: data verified), 1 otherwise, 2 for
bad options, 77 when the host cannot run the bed (not root, a missing tool or kernel feature).
Python 3 standard library only.
"""
import argparse
import json
import math
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
NET = "10.77.0"
RECEIVER_IP = NET + ".1"
# Per packet, what the TBF counts (skb length: the Ethernet frame without FCS) around a RoCEv2
# payload: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4; a WRITE's first packet adds RETH 16.
ROCE_PKT_OVERHEAD = 14 + 20 + 8 + 12 + 4
RETH = 16
# TCP: Ethernet 14 + IPv4 20 + TCP 20 + timestamps option 12; MSS = interface MTU - 52.
TCP_PKT_OVERHEAD = 14 + 20 + 20 + 12
ECN_NAMES = ("not_ect", "ect1", "ect0", "ce")  # by codepoint 0..3
# A uroce flow's receiving device, from `uroce stats` (src/engine/stats.cc names them).
RECEIVER_COUNTERS = ("rcvd_pkts", "rx_drops", "out_of_seq_request", "duplicate_request",
                     "send_seq_err", "np_ecn_marked_roce_packets", "np_cnp_sent",
                     "out_of_order_kept", "thread_wakeups", "thread_rx_pkts")
# How a device's progress ran (`uroce stats`, the drop-in's scheduler; src/device/stats.cc).
PROGRESS_COUNTERS = ("app_rounds", "thread_rounds", "handoffs_to_app", "handoffs_to_thread",
                     "lease_expiries", "thread_spins", "thread_sleeps", "wake_signals",
                     "thread_wakeups", "thread_rx_pkts")
MARKER_COUNTERS = ("pkts", "bytes", "ect_pkts", "marked", "ce_already", "not_ect_over_kmin",
                   "not_ipv4", "vq_full")


class Skip(Exception):
    """The host cannot run the bed: not root, a missing tool or kernel feature."""


class BedError(Exception):
    """The bed could not be built or a step failed."""


class Interrupted(Exception):
    pass


def on_signal(signum, _frame):
    raise Interrupted(f"signal {signum}")


# ---- small helpers ----

def run(cmd, check=True, timeout=30, ns=None):
    """Runs a command (in namespace ns), returns its stdout; raises BedError on failure."""
    if ns:
        cmd = ["ip", "netns", "exec", ns] + cmd
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BedError(f"timed out after {timeout} s: {' '.join(cmd)}")
    except FileNotFoundError:
        raise BedError(f"not found: {cmd[0]}")
    if check and p.returncode != 0:
        raise BedError(f"{' '.join(cmd)}: exit {p.returncode}: {(p.stderr or p.stdout).strip()}")
    return p.stdout


def parse_rate(text):
    """'1gbit', '100mbit', '500kbit', '1e9' -> bits per second."""
    m = re.fullmatch(r"([0-9.]+)\s*([kmg]?)(bit|bps)?", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a rate: {text} (e.g. 1gbit, 100mbit)")
    return int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)])


def parse_bytes(text):
    """'256k', '1m', '65536' -> bytes (k = 1024)."""
    m = re.fullmatch(r"([0-9.]+)\s*([kmg]?)i?b?", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text} (e.g. 256k, 65536)")
    return int(float(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2)])


def jain(xs):
    xs = [x for x in xs if x is not None]
    if not xs or sum(x * x for x in xs) == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def roce_write_efficiency(size, mtu):
    """Goodput / what the TBF counts, for a stream of WRITEs of size bytes at path MTU mtu."""
    pkts = max(1, math.ceil(size / mtu))
    return size / (size + pkts * ROCE_PKT_OVERHEAD + RETH)


def tcp_efficiency(if_mtu):
    mss = if_mtu - 52
    return mss / (mss + TCP_PKT_OVERHEAD)


def wait_until(what, predicate, limit_s, alive=None):
    """Polls predicate every 20 ms until it holds (bounded by limit_s); alive() false gives up."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if predicate():
            return
        if alive is not None and not alive():
            raise BedError(f"{what}: a process it waits for exited")
        time.sleep(0.02)  # the pause between two checks of the condition
    raise BedError(f"{what}: not after {limit_s} s")


def multiarch_include():
    for cc in ("cc", "gcc"):
        if shutil.which(cc):
            out = subprocess.run([cc, "-print-multiarch"], capture_output=True, text=True)
            if out.returncode == 0 and out.stdout.strip():
                return ["-I/usr/include/" + out.stdout.strip()]
    return []


# ---- namespaces ----

NS_RE = re.compile(r"^nb([0-9]+)-(sw|r|d|probe|s[0-9]+)$")


def list_namespaces():
    out = run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def kill_namespace(ns):
    for pid in run(["ip", "netns", "pids", ns], check=False).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    run(["ip", "netns", "del", ns], check=False)


def reap(quiet=False):
    """Removes the namespaces of beds whose process no longer runs (killed: no cleanup ran)."""
    for ns in list_namespaces():
        m = NS_RE.match(ns)
        if not m:
            continue
        pid = int(m.group(1))
        if pid_runs(pid):
            continue  # its own process still runs (this one too)
        if not quiet:
            print(f"netbed: removing {ns}, left behind by pid {pid}", file=sys.stderr)
        kill_namespace(ns)
    tmp = tempfile.gettempdir()
    for d in os.listdir(tmp):
        m = re.match(r"^nb([0-9]+)-", d)
        if m and os.path.isdir(os.path.join(tmp, d)) and not pid_runs(int(m.group(1))):
            shutil.rmtree(os.path.join(tmp, d), ignore_errors=True)


def pid_runs(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# ---- the host's fitness ----

def need_tools(args):
    if os.geteuid() != 0:
        raise Skip("not root (network namespaces, tc and BPF need CAP_NET_ADMIN and CAP_BPF)")
    tools = ["ip", "tc", "ethtool", "bpftool", "clang", "ping", "ss"]
    if args.tcp:
        tools.append("iperf3")
    if args.ibv:
        tools.append("ib_write_bw")
    if args.rtt_us:
        tools.append("cc")
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        raise Skip(f"missing tools: {' '.join(missing)} (scripts/install-deps installs them)")


def build_bpf(args, workdir):
    """Compiles netbed_bpf.c with this run's marker parameters; returns the object's path."""
    obj = os.path.join(workdir, "netbed_bpf.o")
    cmd = ["clang", "-O2", "-g", "-target", "bpf", "-Wall", "-Werror"] + multiarch_include() + [
        f"-DNB_RATE_BPS={args.rate // 8}ULL", f"-DNB_LIMIT={args.buffer}ULL",
        f"-DNB_KMIN={args.kmin}ULL",
        f"-DNB_KMAX={args.kmax}ULL", f"-DNB_PMAX_PPM={round(args.pmax * 1e6)}ULL",
        "-c", os.path.join(HERE, "netbed_bpf.c"), "-o", obj]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        if "bpf/bpf_helpers.h" in p.stderr or "No available targets" in p.stderr:
            raise Skip("cannot build BPF programs (clang's bpf target, libbpf-dev): "
                       + p.stderr.strip().splitlines()[0])
        raise BedError("clang: " + p.stderr.strip())
    return obj


def build_delayline(workdir):
    exe = os.path.join(workdir, "delayline")
    run(["cc", "-O2", "-Wall", "-o", exe, os.path.join(HERE, "delayline.c")], timeout=60)
    return exe


def probe(obj, prefix):
    """Checks in a scratch namespace that the kernel has what the bed needs."""
    ns = prefix + "-probe"
    steps = [
        ("network namespaces", ["ip", "netns", "add", ns]),
        ("veth", ["ip", "-n", ns, "link", "add", "name", "x0", "type", "veth", "peer", "name",
                  "x1"]),
        ("the bridge", ["ip", "-n", ns, "link", "add", "name", "b0", "type", "bridge"]),
        ("the TBF qdisc", ["tc", "-n", ns, "qdisc", "add", "dev", "x0", "root", "tbf", "rate",
                           "1gbit", "burst", "16k", "limit", "256k"]),
        ("the clsact qdisc", ["tc", "-n", ns, "qdisc", "add", "dev", "x0", "clsact"]),
        # The smallest of the programs: a kernel without cls_bpf is a skip; a marker the
        # verifier rejects is the bed's own failure (Bed.up).
        ("tc BPF (cls_bpf)", ["tc", "-n", ns, "filter", "add", "dev", "x0", "egress", "bpf",
                              "da", "obj", obj, "sec", "tc/drop"]),
        ("XDP on veth (NAPI mode)", ["ip", "-n", ns, "link", "set", "dev", "x1", "xdpdrv", "obj",
                                     obj, "sec", "xdp"]),
        ("the clsact qdisc", ["tc", "-n", ns, "qdisc", "add", "dev", "x1", "clsact"]),
        ("u32 and mirred", ["tc", "-n", ns, "filter", "add", "dev", "x1", "ingress", "protocol",
                            "all", "u32", "match", "u32", "0", "0", "action", "mirred",
                            "egress", "redirect", "dev", "x0"]),
    ]
    try:
        for what, cmd in steps:
            try:
                run(cmd)
            except BedError as e:
                raise Skip(f"this kernel lacks {what}: {e}")
    finally:
        run(["ip", "netns", "del", ns], check=False)


# ---- the bed ----

class Bed:
    def __init__(self, args, prefix, workdir, obj, delayline):
        self.a = args
        self.prefix = prefix
        self.dir = workdir
        self.obj = obj
        self.delayline = delayline
        self.senders = [f"{prefix}-s{i}" for i in range(1, args.senders + 1)]
        self.sw = prefix + "-sw"
        self.rx = prefix + "-r"
        self.dl = prefix + "-d" if args.rtt_us else None
        self.namespaces = [self.sw, self.rx] + ([self.dl] if self.dl else []) + self.senders
        self.delay_proc = None

    def sender_ip(self, i):  # i from 0
        return f"{NET}.{10 + i + 1}"

    def up(self):
        a = self.a
        for ns in self.namespaces:
            run(["ip", "netns", "add", ns])
            # lo up; no IPv6 (no router solicitations or MLD reports in the counts)
            run(["sh", "-c", "ip link set lo up && sysctl -q -w "
                 "net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"], ns=ns)
        run(["ip", "-n", self.sw, "link", "add", "name", "br0", "type", "bridge"])
        for i, s in enumerate(self.senders):
            run(["ip", "-n", self.sw, "link", "add", "name", f"p{i + 1}", "mtu", str(a.if_mtu),
                 "type", "veth", "peer", "name", "eth0", "netns", s, "mtu", str(a.if_mtu)])
            run(["ip", "-n", self.sw, "link", "set", "dev", f"p{i + 1}", "master", "br0"])
            run(["ip", "-n", s, "addr", "add", self.sender_ip(i) + "/24", "dev", "eth0"])
        if self.dl:
            run(["ip", "-n", self.sw, "link", "add", "name", "pr", "mtu", str(a.if_mtu), "type",
                 "veth", "peer", "name", "tosw", "netns", self.dl, "mtu", str(a.if_mtu)])
            run(["ip", "-n", self.dl, "link", "add", "name", "torx", "mtu", str(a.if_mtu),
                 "type", "veth", "peer", "name", "eth0", "netns", self.rx, "mtu", str(a.if_mtu)])
        else:
            run(["ip", "-n", self.sw, "link", "add", "name", "pr", "mtu", str(a.if_mtu), "type",
                 "veth", "peer", "name", "eth0", "netns", self.rx, "mtu", str(a.if_mtu)])
        run(["ip", "-n", self.sw, "link", "set", "dev", "pr", "master", "br0"])
        run(["ip", "-n", self.rx, "addr", "add", RECEIVER_IP + "/24", "dev", "eth0"])

        # Wire-sized packets with complete checksums everywhere (see the module's comment).
        ends = [(s, "eth0") for s in self.senders] + [(self.rx, "eth0")]
        ends += [(self.sw, f"p{i + 1}") for i in range(len(self.senders))] + [(self.sw, "pr")]
        if self.dl:
            ends += [(self.dl, "tosw"), (self.dl, "torx")]
        for ns, dev in ends:
            run(["ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off",
                 "tx-udp-segmentation", "off", "tx", "off"], ns=ns)
        for ns, dev in ends + [(self.sw, "br0")]:
            run(["ip", "-n", ns, "link", "set", "dev", dev, "up"])
        if a.veth_napi:  # in order through every veth (netbed_bpf.c, xdp_pass)
            for ns, dev in ends:
                run(["ip", "-n", ns, "link", "set", "dev", dev, "xdpdrv", "obj", self.obj, "sec",
                     "xdp"])

        # The bottleneck: the TBF, and the marker in front of it.
        run(["tc", "-n", self.sw, "qdisc", "add", "dev", "pr", "root", "tbf", "rate",
             str(a.rate), "burst", str(a.burst), "limit", str(a.buffer)])
        if a.ecn:
            run(["tc", "-n", self.sw, "qdisc", "add", "dev", "pr", "clsact"])
            self.attach(self.sw, "pr", "egress", "tc/marker")
            for s in self.senders:
                if a.ect_roce:
                    run(["tc", "-n", s, "qdisc", "add", "dev", "eth0", "clsact"])
                    self.attach(s, "eth0", "egress", "tc/ect_stamp")
                run(["sysctl", "-q", "-w", "net.ipv4.tcp_ecn=1"], ns=s)
        run(["tc", "-n", self.rx, "qdisc", "add", "dev", "eth0", "clsact"])
        self.attach(self.rx, "eth0", "ingress", "tc/ecn_count")

        if self.dl:
            # Data straight through; the return path through the delay line.
            run(["tc", "-n", self.dl, "qdisc", "add", "dev", "tosw", "clsact"])
            run(["tc", "-n", self.dl, "filter", "add", "dev", "tosw", "ingress", "protocol",
                 "all", "u32", "match", "u32", "0", "0", "action", "mirred", "egress",
                 "redirect", "dev", "torx"])
            # The delay line reads frames arriving on torx from its packet socket (taps come
            # before tc ingress); the namespace's own stack never sees them.
            run(["tc", "-n", self.dl, "qdisc", "add", "dev", "torx", "clsact"])
            self.attach(self.dl, "torx", "ingress", "tc/drop")
            # Real-time priority where chrt works: the delay line mostly sleeps, and a late
            # wake-up beside busy-polling flows would add to the delay (late_max_us says).
            rt = ["chrt", "-f", "1"] if shutil.which("chrt") and subprocess.run(
                ["chrt", "-f", "1", "true"], capture_output=True).returncode == 0 else []
            self.delay_proc = subprocess.Popen(
                ["ip", "netns", "exec", self.dl] + rt + [self.delayline, "torx", "tosw",
                                                         str(a.rtt_us), str(a.delay_slots)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            # "ready" once bound, or EOF on failure (bounded: it binds at once or not at all)
            ready, _, _ = select.select([self.delay_proc.stdout], [], [], 10)
            line = self.delay_proc.stdout.readline() if ready else ""
            if line.strip() != "ready":
                self.delay_proc.kill()
                _, err = self.delay_proc.communicate()
                raise BedError("delayline did not start: " + err.strip())

        # Carrier on every end, then every sender reaches the receiver (ARP, bridge learning).
        def carriers_up():
            return all("LOWER_UP" in run(["ip", "-n", ns, "-br", "link", "show", dev])
                       for ns, dev in ends)
        wait_until("veth carriers", carriers_up, 10)
        for i, s in enumerate(self.senders):
            ok = False
            for _ in range(50):  # bounded: ping itself waits up to 200 ms per try
                if subprocess.run(["ip", "netns", "exec", s, "ping", "-c", "1", "-W", "0.2",
                                   RECEIVER_IP], capture_output=True).returncode == 0:
                    ok = True
                    break
            if not ok:
                raise BedError(f"{s} cannot reach the receiver {RECEIVER_IP}")

    def attach(self, ns, dev, direction, section):
        run(["tc", "-n", ns, "filter", "add", "dev", dev, direction, "bpf", "da", "obj",
             self.obj, "sec", section])

    def bpf_maps(self, ns, dev, direction):
        """The maps of the BPF program on ns/dev/direction, by name: {name: [values]}."""
        out = json.loads(run(["tc", "-n", ns, "-j", "filter", "show", "dev", dev, direction]))
        ids = [f["options"]["prog"]["id"] for f in out
               if f.get("kind") == "bpf" and "prog" in f.get("options", {})]
        maps = {}
        for pid in ids:
            prog = json.loads(run(["bpftool", "prog", "show", "id", str(pid), "-j"]))
            for mid in prog.get("map_ids", []):
                info = json.loads(run(["bpftool", "map", "show", "id", str(mid), "-j"]))
                dump = json.loads(run(["bpftool", "map", "dump", "id", str(mid), "-j"]))
                maps[info["name"]] = [e["formatted"]["value"] for e in
                                      sorted(dump, key=lambda e: e["formatted"]["key"])]
        return maps

    def tbf_stats(self):
        out = json.loads(run(["tc", "-n", self.sw, "-s", "-j", "qdisc", "show", "dev", "pr"]))
        for q in out:
            if q.get("kind") == "tbf":
                return {k: q.get(k, 0) for k in ("bytes", "packets", "drops", "overlimits",
                                                 "requeues", "backlog", "qlen")}
        raise BedError("no TBF on the bottleneck port")

    def net_counters(self):
        """The kernel's UDP counters (/proc/net/snmp) of the receiver and, summed, the senders
        (where RoCEv2 packets were lost outside the bottleneck: a full socket buffer), and the
        receiver's IPv4 header and checksum errors (/proc/net/snmp, /proc/net/netstat): a CE
        mark with a wrong checksum would show there."""
        def table(ns, prefix):
            text = run(["cat", "/proc/net/snmp", "/proc/net/netstat"], ns=ns)
            lines = [line.split() for line in text.splitlines() if line.startswith(prefix)]
            return dict(zip(lines[0][1:], map(int, lines[1][1:]))) if len(lines) >= 2 else {}
        senders = {}
        for s in self.senders:
            for k, v in table(s, "Udp:").items():
                senders[k] = senders.get(k, 0) + v
        ip = table(self.rx, "Ip:")
        ip.update(table(self.rx, "IpExt:"))
        return {"receiver": table(self.rx, "Udp:"), "senders": senders, "receiver_ip": ip}

    def stop_delayline(self):
        if not self.delay_proc:
            return None
        p, self.delay_proc = self.delay_proc, None
        if p.poll() is None:
            p.terminate()
        try:
            out, _ = p.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            return None
        for line in out.splitlines():
            if line.startswith("{"):
                return json.loads(line)
        return None

    def down(self):
        """Ends every process in the bed's namespaces and removes them (every namespace of this
        prefix: also one whose creation was interrupted); idempotent."""
        if self.delay_proc:
            self.delay_proc.kill()
            self.delay_proc.communicate()
            self.delay_proc = None
        for ns in list_namespaces():
            if ns.startswith(self.prefix + "-"):
                kill_namespace(ns)


# ---- flows ----

class Flow:
    def __init__(self, index, kind, sender_index, bed):
        self.kind = kind
        self.id = f"{kind}{index + 1}"
        self.sender = sender_index
        self.ns = bed.senders[sender_index]
        self.ip = bed.sender_ip(sender_index)
        self.port = {"uroce": 18515, "ibv": 18600, "tcp": 5201}[kind] + index
        self.server = self.client = None
        self.out = {}
        self.rc = {}

    def server_cmd(self, a):
        if self.kind == "uroce":
            return [a.uroce, "perf", "write_bw", "--ip", RECEIVER_IP, "-p", str(self.port),
                    "-s", str(a.size), "-m", str(a.mtu), "-D", str(a.seconds), "--json",
                    "--timeout", "60"] + a.uroce_args
        if self.kind == "ibv":
            return ["env", f"LD_LIBRARY_PATH={a.compat}", f"UROCE_DEVICES={RECEIVER_IP}"] + \
                self.ibv_env() + ["ib_write_bw", "-p", str(self.port), "-s", str(a.size),
                                  "-m", str(a.mtu), "-D", str(a.seconds), "--report_gbits", "-F"]
        return ["iperf3", "-s", "-1", "-B", RECEIVER_IP, "-p", str(self.port)]

    def client_cmd(self, a):
        if self.kind == "uroce":
            return [a.uroce, "perf", "write_bw", "--ip", self.ip, "-p", str(self.port), "-s",
                    str(a.size), "-m", str(a.mtu), "-D", str(a.seconds), "--json",
                    "--timeout", "60", "--connect_timeout", "30"] + a.uroce_args + [RECEIVER_IP]
        if self.kind == "ibv":
            return ["env", f"LD_LIBRARY_PATH={a.compat}", f"UROCE_DEVICES={self.ip}"] + \
                self.ibv_env() + ["ib_write_bw", "-p", str(self.port), "-s", str(a.size),
                                  "-m", str(a.mtu), "-D", str(a.seconds), "--report_gbits", "-F",
                                  RECEIVER_IP]
        return ["iperf3", "-c", RECEIVER_IP, "-B", self.ip, "-p", str(self.port), "-t",
                str(a.seconds), "-J", "--connect-timeout", "10000"]

    def ibv_env(self):
        # A sanitizer build of the drop-in needs its runtime loaded first (perftest is not
        # instrumented); perftest's own leaks are not ours to report.
        pre = os.environ.get("UROCE_TEST_PRELOAD", "").strip()
        return [f"LD_PRELOAD={pre}", "ASAN_OPTIONS=detect_leaks=0"] if pre else []


def start(ns, cmd, path):
    f = open(path, "w")
    try:
        return subprocess.Popen(["ip", "netns", "exec", ns] + cmd, stdout=f,
                                stderr=subprocess.STDOUT, text=True)
    finally:
        f.close()


def listening(ns, ports):
    out = run(["ss", "-Hltn"], ns=ns)
    have = set()
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 4:
            have.add(cols[3].rsplit(":", 1)[-1])
    return all(str(p) in have for p in ports)


def parse_uroce(text):
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def parse_perftest(text):
    """ib_write_bw --report_gbits: the result line '#bytes #iterations peak avg msgrate'."""
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 5 and all(re.fullmatch(r"[0-9.]+", c) for c in cols[:5]):
            return {"bytes": int(cols[0]), "iterations": int(cols[1]),
                    "bw_peak_gbit_s": float(cols[2]), "bw_avg_gbit_s": float(cols[3]),
                    "msg_rate_mpps": float(cols[4])}
    return None


def parse_iperf(text):
    try:
        d = json.loads(text)
    except ValueError:
        return None
    end = d.get("end", {})
    if "sum_received" not in end:
        return None
    return {"goodput_gbit_s": end["sum_received"]["bits_per_second"] / 1e9,
            "bytes": end["sum_received"]["bytes"],
            "retransmits": end.get("sum_sent", {}).get("retransmits"),
            "error": d.get("error")}


# ---- one run ----

def run_bed(args):
    """Builds the bed, runs the flows, tears it down; returns the report (a dict)."""
    need_tools(args)
    prefix = f"nb{os.getpid()}"
    reap(quiet=False)
    workdir = tempfile.mkdtemp(prefix=prefix + "-")
    bed = None
    samplers = []
    procs = []
    report = {"params": params(args), "errors": []}
    try:
        obj = build_bpf(args, workdir)
        probe(obj, prefix)
        delayline = build_delayline(workdir) if args.rtt_us else None
        bed = Bed(args, prefix, workdir, obj, delayline)
        t0 = time.monotonic()
        bed.up()
        report["bed_up_s"] = round(time.monotonic() - t0, 3)

        kinds = ["uroce"] * args.uroce_flows + ["ibv"] * args.ibv + ["tcp"] * args.tcp
        counters = {"uroce": 0, "ibv": 0, "tcp": 0}
        flows = []
        for i, kind in enumerate(kinds):
            flows.append(Flow(counters[kind], kind, i % args.senders, bed))
            counters[kind] += 1

        # Servers first; the clients once every port listens.
        for f in flows:
            f.server = start(bed.rx, f.server_cmd(args), os.path.join(workdir, f.id + ".server"))
            procs.append(f.server)
        wait_until("servers listening", lambda: listening(bed.rx, [f.port for f in flows]), 30,
                   alive=lambda: all(f.server.poll() is None for f in flows))
        # uroce's counters: sampled inside each sender namespace with a uroce flow, and in the
        # receiver's (where a loss that is not the network's shows).
        roce_ns = {f.ns for f in flows if f.kind != "tcp"}
        for ns in sorted(roce_ns) + ([bed.rx] if roce_ns else []):
            p = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable,
                                  os.path.abspath(__file__), "statsd"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            samplers.append((ns, p))
        tbf0, net0 = bed.tbf_stats(), bed.net_counters()
        t_start = time.monotonic()
        for f in flows:
            f.client = start(f.ns, f.client_cmd(args), os.path.join(workdir, f.id + ".client"))
            procs.append(f.client)
        # Until every process of every flow has exited (bounded), the TBF's counters sampled
        # every 100 ms: the link's use while all flows run, not only over the whole window.
        limit = args.seconds + 90
        tbf_samples = [(0.0, tbf0["bytes"])]
        running = [(f, side) for f in flows for side in ("client", "server")]
        while running and time.monotonic() < t_start + limit:
            time.sleep(0.1)  # the sampling period (the processes' exits are polled with it)
            tbf_samples.append((time.monotonic() - t_start, bed.tbf_stats()["bytes"]))
            running = [(f, side) for f, side in running if getattr(f, side).poll() is None]
        for f, side in running:
            getattr(f, side).kill()
            report["errors"].append(f"{f.id} {side}: killed after {limit} s")
        for f in flows:
            for side in ("client", "server"):
                f.rc[side] = getattr(f, side).wait()
                with open(os.path.join(workdir, f"{f.id}.{side}")) as fh:
                    f.out[side] = fh.read()
        t_end = time.monotonic()
        tbf1, net1 = bed.tbf_stats(), bed.net_counters()
        stats = {}
        for ns, p in samplers:
            p.terminate()
            try:
                out, err = p.communicate(timeout=10)
                stats[ns] = json.loads(out) if out.strip() else {}
            except (subprocess.TimeoutExpired, ValueError) as e:
                p.kill()
                p.communicate()
                report["errors"].append(f"stats sampler in {ns}: {e}")
                stats[ns] = {}
        samplers = []
        delay = bed.stop_delayline()
        marker = bed.bpf_maps(bed.sw, "pr", "egress") if args.ecn else {}
        stamps = {}
        if args.ecn and args.ect_roce:
            for s in bed.senders:
                for k, v in enumerate(bed.bpf_maps(s, "eth0", "egress").get("stamp_cnt", [])):
                    stamps[k] = stamps.get(k, 0) + v
        rx_ecn = bed.bpf_maps(bed.rx, "eth0", "ingress").get("rx_ecn", [0] * 12)
        report.update(collect(args, flows, stats, bed.rx, tbf0, tbf1, t_end - t_start, marker,
                              stamps, rx_ecn, delay, report["errors"]))
        report["bottleneck"]["tbf_utilisation_mid"] = mid_utilisation(tbf_samples, args)
        keys = ("InDatagrams", "OutDatagrams", "InErrors", "RcvbufErrors", "SndbufErrors")
        report["udp"] = {side: {k: net1[side].get(k, 0) - net0[side].get(k, 0) for k in keys}
                         for side in ("receiver", "senders")}
        report["receiver_ip"] = {
            k: net1["receiver_ip"].get(k, 0) - net0["receiver_ip"].get(k, 0)
            for k in ("InReceives", "InHdrErrors", "InCsumErrors", "InDiscards")}
        # The end of what a flow that failed printed, for the reader of the report.
        report["failed_flow_outputs"] = {
            f.id: {side: f.out.get(side, "")[-2000:] for side in ("server", "client")}
            for f in flows if not f_ok(report, f.id)}
        if args.outputs:  # every flow's output, e.g. the parameters perftest printed
            report["flow_outputs"] = {
                f.id: {side: f.out.get(side, "")[-8000:] for side in ("server", "client")}
                for f in flows}
    finally:
        for _, p in samplers:
            p.kill()
            p.communicate()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if bed:
            bed.down()
        run(["ip", "netns", "del", prefix + "-probe"], check=False)
        shutil.rmtree(workdir, ignore_errors=True)
        left = [ns for ns in list_namespaces() if ns.startswith(prefix + "-")]
        report["namespaces_left"] = left
    return report


def mid_utilisation(samples, args):
    """The TBF's bytes (headers and retransmissions included) over the middle 60% of the flows'
    duration (from 20% to 80% of --seconds after the clients started, when every flow runs),
    over the rate; from samples [(seconds since the start, bytes)], interpolated."""
    def at(t):
        for (t0, b0), (t1, b1) in zip(samples, samples[1:]):
            if t0 <= t <= t1:
                return b0 + (b1 - b0) * (t - t0) / (t1 - t0) if t1 > t0 else b1
        return None
    lo, hi = 0.2 * args.seconds, 0.8 * args.seconds
    b_lo, b_hi = at(lo), at(hi)
    if b_lo is None or b_hi is None:
        return None
    return (b_hi - b_lo) * 8 / (hi - lo) / args.rate


def f_ok(report, fid):
    return any(f["id"] == fid and f["completed"] for f in report.get("flows", []))


def params(a):
    return {"senders": a.senders, "uroce_flows": a.uroce_flows, "ibv_flows": a.ibv,
            "tcp_flows": a.tcp, "rate_bit_s": a.rate, "buffer_bytes": a.buffer,
            "burst_bytes": a.burst, "rtt_us": a.rtt_us, "ecn": a.ecn,
            "ect_roce": bool(a.ecn and a.ect_roce), "kmin_bytes": a.kmin, "kmax_bytes": a.kmax,
            "pmax": a.pmax, "mtu": a.mtu, "if_mtu": a.if_mtu, "size": a.size,
            "seconds": a.seconds, "uroce_args": a.uroce_args, "veth_napi": a.veth_napi}


def device_sample(stats, ns, pid):
    """The last `uroce stats --json` object sampled for process pid in namespace ns."""
    for name, devices in stats.get(ns, {}).items():
        for d in devices:
            if d.get("pid") == pid:
                return d
    return None


# A sending QP's recovery and congestion-control state, as its last sample showed it (`uroce
# stats --qp`, src/device/stats.cc): the window and rate in force and the rule's cuts so far.
SENDER_QP_FIELDS = ("srtt_ns", "min_rtt_ns", "send_window", "cc_window", "cc_rate_mbps",
                    "cc_loss_cuts", "cc_delay_cuts", "cc_spurious_timeouts", "cc_competing",
                    "rp_cnp_handled", "selective_repeat", "selective_retransmits")


def sender_qp_state(device):
    """The busiest RC QP of a device sample (most packets sent): SENDER_QP_FIELDS, or None."""
    qps = [q for q in device.get("qps", []) if isinstance(q, dict) and q.get("type") == "RC"]
    if not qps:
        return None
    q = max(qps, key=lambda q: q.get("sent_pkts", 0))
    return {k: q.get(k) for k in SENDER_QP_FIELDS}


def collect(args, flows, stats, rx_ns, tbf0, tbf1, window_s, marker, stamps, rx_ecn, delay,
            errors):
    eff_roce = roce_write_efficiency(args.size, args.mtu)
    eff_tcp = tcp_efficiency(args.if_mtu)
    rows = []
    for f in flows:
        row = {"id": f.id, "kind": f.kind, "sender": f.ns.rsplit("-", 1)[1],
               "client_exit": f.rc.get("client"), "server_exit": f.rc.get("server"),
               "goodput_gbit_s": None, "verified": None, "sent_pkts": None,
               "retransmitted_pkts": None, "retransmitted_share": None, "ack_timeouts": None,
               "retry_exceeded_err": None, "tcp_retransmits": None}
        if f.kind == "uroce":
            c, s = parse_uroce(f.out.get("client", "")), parse_uroce(f.out.get("server", ""))
            if c:
                row["goodput_gbit_s"] = c.get("bw_avg_gbit_s")
                row["verified"] = bool(c.get("verified")) and bool(s and s.get("verified"))
        elif f.kind == "ibv":
            c = parse_perftest(f.out.get("client", ""))
            if c:
                row["goodput_gbit_s"] = c["bw_avg_gbit_s"]
            row["verified"] = None  # perftest does not check its data
        else:
            c = parse_iperf(f.out.get("client", ""))
            if c:
                row["goodput_gbit_s"] = c["goodput_gbit_s"]
                row["tcp_retransmits"] = c["retransmits"]
        if f.kind != "tcp":
            d = device_sample(stats, f.ns, f.client.pid)
            if d:
                row["sent_pkts"] = d.get("sent_pkts")
                row["retransmitted_pkts"] = d.get("retransmitted_pkts")
                row["ack_timeouts"] = d.get("ack_timeouts")
                row["retry_exceeded_err"] = d.get("retry_exceeded_err")
                # DCQCN's reaction point (CNPs that reached the sender and cut its rate) and
                # selective repeat's resends, device-wide (the one QP of the flow and CM's).
                row["rp_cnp_handled"] = d.get("rp_cnp_handled")
                row["selective_retransmits"] = d.get("selective_retransmits")
                # The drop-in's progress thread (0 for uroce perf, which runs none): how often
                # it woke, and the packets its own rounds received (the rest were the
                # application's, polling).
                row["sender_thread_wakeups"] = d.get("thread_wakeups")
                row["sender_thread_rx_pkts"] = d.get("thread_rx_pkts")
                row["sender_progress"] = {k: d.get(k) for k in PROGRESS_COUNTERS}
                if d.get("sent_pkts"):
                    row["retransmitted_share"] = d["retransmitted_pkts"] / d["sent_pkts"]
                row["sender_qp"] = sender_qp_state(d)
            else:
                errors.append(f"{f.id}: no uroce stats sample from pid {f.client.pid}")
            # The receiving side's view: packets its device dropped (ICRC, parse, no room...),
            # requests out of sequence (a loss before them: NAKed) and duplicates.
            d = device_sample(stats, rx_ns, f.server.pid)
            row["receiver"] = {k: d.get(k) for k in RECEIVER_COUNTERS} if d else None
            row["receiver_progress"] = {k: d.get(k) for k in PROGRESS_COUNTERS} if d else None
        row["completed"] = (row["client_exit"] == 0 and row["server_exit"] == 0 and
                            row["goodput_gbit_s"] is not None and row["verified"] is not False)
        if not row["completed"]:
            errors.append(f"{f.id}: did not complete (client exit {row['client_exit']}, "
                          f"server exit {row['server_exit']})")
        row["efficiency"] = eff_tcp if f.kind == "tcp" else eff_roce
        rows.append(row)
    rate_gbit = args.rate / 1e9
    goodputs = [r["goodput_gbit_s"] or 0.0 for r in rows]
    wire = sum((r["goodput_gbit_s"] or 0.0) / r["efficiency"] for r in rows)
    for r in rows:
        g = r["goodput_gbit_s"] or 0.0
        r["link_share"] = g / r["efficiency"] / rate_gbit
    roce = [r for r in rows if r["kind"] != "tcp"]
    sent = sum(r["sent_pkts"] or 0 for r in roce)
    retx = sum(r["retransmitted_pkts"] or 0 for r in roce)
    dbytes = tbf1["bytes"] - tbf0["bytes"]
    totals = {
        "goodput_gbit_s": sum(goodputs),
        # Each flow's goodput over its own per-packet efficiency is the wire rate it used, as
        # the TBF counts it; their sum over the TBF's rate is the link's utilisation against the
        # goodput ceiling (for RoCE flows alone: total goodput / (rate * roce efficiency)).
        "utilisation": wire / rate_gbit,
        "jain": jain(goodputs) if rows else None,
        "roce_retransmitted_share": retx / sent if sent else None,
        "roce_ack_timeouts": sum(r["ack_timeouts"] or 0 for r in roce) if roce else None,
        "roce_retry_exceeded_err": sum(r["retry_exceeded_err"] or 0 for r in roce) if roce
        else None,
        "all_completed": all(r["completed"] for r in rows),
        # CNPs: sent by the receiving devices (their notification point, for CE-marked RoCE
        # packets), and handled by the sending ones (their reaction point).
        "roce_cnps_sent": sum((r.get("receiver") or {}).get("np_cnp_sent") or 0 for r in roce)
        if roce else None,
        "roce_cnps_handled": sum(r.get("rp_cnp_handled") or 0 for r in roce) if roce else None,
        "roce_selective_retransmits": sum(r.get("selective_retransmits") or 0 for r in roce)
        if roce else None,
    }
    ceiling = {
        "roce_write_efficiency": eff_roce,
        "roce_goodput_ceiling_gbit_s": rate_gbit * eff_roce,
        "tcp_efficiency": eff_tcp,
        "tcp_goodput_ceiling_gbit_s": rate_gbit * eff_tcp,
        "roce_bytes_per_write": args.size + math.ceil(args.size / args.mtu) * ROCE_PKT_OVERHEAD
        + RETH,
    }
    bottleneck = {
        "tbf_sent_pkts": tbf1["packets"] - tbf0["packets"],
        "tbf_sent_bytes": dbytes,
        "tbf_drops": tbf1["drops"] - tbf0["drops"],
        "tbf_overlimits": tbf1["overlimits"] - tbf0["overlimits"],
        "window_s": window_s,
        # The TBF's bytes over the flows' whole window (connection setup and teardown included)
        "wire_gbit_s": dbytes * 8 / window_s / 1e9 if window_s > 0 else None,
    }
    mk = None
    if args.ecn:
        c = marker.get("marker_cnt", [0] * len(MARKER_COUNTERS))
        mk = dict(zip(MARKER_COUNTERS, c))
        vq = (marker.get("marker_vq") or [{}])[0]
        mk["vq_max_bytes"] = vq.get("max_bytes")
    recv = {cls: dict(zip(ECN_NAMES, rx_ecn[i * 4:i * 4 + 4]))
            for i, cls in enumerate(("roce", "tcp", "other_ipv4"))}
    return {"ceiling": ceiling, "flows": rows, "totals": totals, "bottleneck": bottleneck,
            "marker": mk,
            "ect_stamp": ({"stamped": stamps.get(0, 0), "already_ecn": stamps.get(1, 0)}
                          if args.ecn and args.ect_roce else None),
            "receiver_ecn": recv, "delay": delay}


# ---- the report as a table ----

def fmt(v, spec="{:.3f}"):
    return "n/a" if v is None else spec.format(v)


def table(r):
    p = r["params"]
    lines = []
    lines.append(
        f"netbed: {p['senders']} senders, {p['uroce_flows']} uroce + {p['ibv_flows']} ib_write_bw"
        f" + {p['tcp_flows']} TCP flows; bottleneck {p['rate_bit_s'] / 1e9:g} Gbit/s, buffer "
        f"{p['buffer_bytes']} B, RTT {p['rtt_us']} us, ECN {'on' if p['ecn'] else 'off'}, "
        f"MTU {p['mtu']} (interface {p['if_mtu']}), {p['seconds']} s")
    lines.append("| flow | sender | goodput Gb/s | link share | retransmitted | ACK timeouts "
                 "| retry exceeded | receiver: dropped, out of sequence, duplicates "
                 "| TCP retransmits | data verified | completed |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for f in r.get("flows", []):
        rc = f.get("receiver")
        rtext = (f"{rc['rx_drops']}, {rc['out_of_seq_request']}, {rc['duplicate_request']}"
                 if rc else "n/a")
        lines.append(
            f"| {f['id']} | {f['sender']} | {fmt(f['goodput_gbit_s'])} | {fmt(f['link_share'])} "
            f"| {fmt(f['retransmitted_share'], '{:.2%}')} | {fmt(f['ack_timeouts'], '{}')} "
            f"| {fmt(f['retry_exceeded_err'], '{}')} | {rtext} "
            f"| {fmt(f['tcp_retransmits'], '{}')} | {fmt(f['verified'], '{}')} "
            f"| {f['completed']} |")
    for f in r.get("flows", []):
        q = f.get("sender_qp")
        if q:
            lines.append(f"{f['id']} sender QP (last sample): " +
                         ", ".join(f"{k} {q[k]}" for k in SENDER_QP_FIELDS if q.get(k) is not None))
    t, b, c = r.get("totals", {}), r.get("bottleneck", {}), r.get("ceiling", {})
    if t:
        lines.append(
            f"total goodput {fmt(t['goodput_gbit_s'])} Gb/s; utilisation {fmt(t['utilisation'])} "
            f"of the goodput ceiling (RoCE WRITE {fmt(c['roce_goodput_ceiling_gbit_s'])} Gb/s, "
            f"TCP {fmt(c['tcp_goodput_ceiling_gbit_s'])} Gb/s); Jain {fmt(t['jain'])}; RoCE "
            f"retransmitted {fmt(t['roce_retransmitted_share'], '{:.2%}')}, ACK timeouts "
            f"{fmt(t['roce_ack_timeouts'], '{}')}, selectively resent "
            f"{fmt(t['roce_selective_retransmits'], '{}')}; CNPs sent "
            f"{fmt(t['roce_cnps_sent'], '{}')}, handled {fmt(t['roce_cnps_handled'], '{}')}")
        lines.append(
            f"bottleneck: {b['tbf_sent_pkts']} packets, {b['tbf_sent_bytes']} bytes "
            f"({fmt(b['wire_gbit_s'])} Gb/s over {b['window_s']:.2f} s; "
            f"{fmt(b.get('tbf_utilisation_mid'))} of the rate in the middle of the run), "
            f"drops {b['tbf_drops']}")
    m = r.get("marker")
    if m:
        lines.append(
            f"marker: {m['marked']} CE marks of {m['ect_pkts']} ECT packets ({m['pkts']} IPv4); "
            f"virtual queue max {m['vq_max_bytes']} B, full for {m['vq_full']} packets; "
            f"Not-ECT packets above Kmin (not marked) {m['not_ect_over_kmin']}")
    rx = r.get("receiver_ecn")
    if rx:
        lines.append("receiver ECN codepoints: " + "; ".join(
            f"{cls} " + " ".join(f"{k} {v}" for k, v in d.items()) for cls, d in rx.items()
            if sum(d.values())))
    u = r.get("udp")
    if u:
        lines.append(
            f"UDP (kernel): receiver in {u['receiver']['InDatagrams']}, receive errors "
            f"{u['receiver']['InErrors']} (socket buffer full {u['receiver']['RcvbufErrors']}); "
            f"senders out {u['senders']['OutDatagrams']}, send buffer errors "
            f"{u['senders']['SndbufErrors']}")
    ip = r.get("receiver_ip")
    if ip:
        lines.append(f"IPv4 (kernel) at the receiver: in {ip['InReceives']}, header errors "
                     f"{ip['InHdrErrors']}, checksum errors {ip['InCsumErrors']}")
    if r.get("delay"):
        d = r["delay"]
        lines.append(f"delay line: {d['forwarded']} frames held {d['delay_us']} us, "
                     f"{d['dropped_full']} dropped (ring full); "
                     f"sent late by {d['late_mean_us']} us "
                     f"on average, at most {d['late_max_us']} us")
    for e in r.get("errors", []):
        lines.append("error: " + e)
    return "\n".join(lines)


# ---- statsd: runs inside a namespace ----

def statsd(interval):
    """Samples every uroce device in this namespace (its stats socket, as `uroce stats --json`
    asks it) every interval seconds; on SIGTERM prints {socket: [device objects]} with the
    last answer of each, and exits."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    last = {}
    while not stop:
        names = set()
        try:
            with open("/proc/net/unix") as fh:
                for line in fh:
                    path = line.split()[-1]
                    if path.startswith("@uroce/"):
                        names.add(path[1:])
        except OSError:
            pass
        for name in sorted(names):
            answer = query_device(name, timeout_s=0.5)
            if answer is not None:
                try:
                    last[name] = [json.loads(answer)]
                except ValueError:
                    pass
        time.sleep(interval)  # the sampling period
    print(json.dumps(last))


def query_device(name, timeout_s):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.bind("")  # autobind: an abstract address the device can answer to
        s.settimeout(timeout_s)
        s.sendto(b"json qp", "\0" + name)
        parts = []
        while True:
            data = s.recv(1 << 20)
            parts.append(data[1:])
            if data[:1] == b".":
                return b"".join(parts).decode()
            if data[:1] != b"+":
                return None
    except OSError:
        return None
    finally:
        s.close()


# ---- command line ----

def default_path(*candidates):
    for c in candidates:
        p = os.path.join(REPO, c)
        if os.path.exists(p):
            return p
    return os.path.join(REPO, candidates[0])


def add_run_options(ap):
    ap.add_argument("--senders", type=int, help="sender namespaces (default: one per flow)")
    ap.add_argument("--uroce", dest="uroce_flows", type=int, default=1,
                    help="uroce perf write_bw flows (1)")
    ap.add_argument("--ibv", type=int, default=0,
                    help="ib_write_bw flows over the drop-in libibverbs.so.1 (0)")
    ap.add_argument("--tcp", type=int, default=0, help="iperf3 TCP flows (0)")
    ap.add_argument("--rate", type=parse_rate, default=parse_rate("1gbit"),
                    help="bottleneck rate (1gbit)")
    ap.add_argument("--buffer", type=parse_bytes, default=256 << 10,
                    help="bottleneck buffer, the TBF's limit (256k)")
    ap.add_argument("--burst", type=parse_bytes, default=16 << 10,
                    help="the TBF's bucket (16k)")
    ap.add_argument("--rtt-us", type=int, default=0,
                    help="added round-trip time in microseconds, on the return path (0: none)")
    ap.add_argument("--delay-slots", type=int, default=16384,
                    help="frames the delay line can hold (16384)")
    ap.add_argument("--ecn", action=argparse.BooleanOptionalAction, default=False,
                    help="ECN marking at the bottleneck (off)")
    ap.add_argument("--ect-roce", action=argparse.BooleanOptionalAction, default=True,
                    help="with --ecn: set ECT(0) on RoCEv2 packets at the senders (on)")
    ap.add_argument("--kmin", type=parse_bytes, default=5000, help="marking from (5000 B)")
    ap.add_argument("--kmax", type=parse_bytes, default=200000,
                    help="every ECT packet marked from (200000 B)")
    ap.add_argument("--pmax", type=float, default=0.01, help="marking probability at Kmax (0.01)")
    ap.add_argument("--veth-napi", action=argparse.BooleanOptionalAction, default=True,
                    help="an XDP pass program on every veth end, so that flows stay in order "
                    "(on)")
    ap.add_argument("--mtu", type=int, default=1024, choices=(256, 512, 1024, 2048, 4096),
                    help="RoCE path MTU (1024)")
    ap.add_argument("--if-mtu", type=int,
                    help="interface MTU (default 1500, or 9000 for a path MTU above 1024)")
    ap.add_argument("--size", type=int, default=65536, help="WRITE size (65536)")
    ap.add_argument("--seconds", type=int, default=5, help="duration of every flow (5)")
    ap.add_argument("--uroce-bin", dest="uroce",
                    default=default_path("build-release/src/tools/uroce", "build/src/tools/uroce"),
                    help="the uroce command (build-release/src/tools/uroce)")
    ap.add_argument("--compat", default=default_path("build-release/compat", "build/compat"),
                    help="directory of the drop-in libibverbs.so.1 (build-release/compat)")
    ap.add_argument("--uroce-args", default="",
                    help="more options for both sides of uroce perf (e.g. '-u 14')")
    ap.add_argument("--json", metavar="FILE", help="write the report there ('-': stdout)")
    ap.add_argument("--outputs", action="store_true",
                    help="keep every flow's output in the report (flow_outputs)")


def finish_options(ap, a):
    a.uroce_args = a.uroce_args.split()
    flows = a.uroce_flows + a.ibv + a.tcp
    if flows < 1:
        ap.error("no flows")
    a.senders = a.senders or flows
    if a.senders < 1 or a.senders > 200:
        ap.error("--senders: 1..200")
    if a.if_mtu is None:
        a.if_mtu = 1500 if a.mtu <= 1024 else 9000
    if a.if_mtu < a.mtu + 20 + 8 + 12 + RETH + 4:
        ap.error(f"--if-mtu {a.if_mtu} cannot carry a RoCE path MTU of {a.mtu}")
    if not 0 < a.kmin < a.kmax or not 0 <= a.pmax <= 1:
        ap.error("need 0 < kmin < kmax and 0 <= pmax <= 1")
    if a.seconds < 1:
        ap.error("--seconds: at least 1")
    a.uroce = os.path.abspath(a.uroce)
    a.compat = os.path.abspath(a.compat)
    if a.uroce_flows and not os.access(a.uroce, os.X_OK):
        ap.error(f"no uroce command at {a.uroce} (build it, or --uroce-bin)")
    if a.ibv and not os.path.exists(os.path.join(a.compat, "libibverbs.so.1")):
        ap.error(f"no libibverbs.so.1 in {a.compat} (build uroce_ibverbs, or --compat)")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    add_run_options(sub.add_parser("run", help="one run of the bed"))
    sub.add_parser("reap", help="remove beds whose process no longer runs")
    sub.add_parser("probe", help="can this host run the bed?")
    sd = sub.add_parser("statsd", help=argparse.SUPPRESS)
    sd.add_argument("--interval", type=float, default=0.1)
    a = ap.parse_args(argv)
    if a.cmd == "statsd":
        statsd(a.interval)
        return 0
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    if a.cmd == "reap":
        reap()
        return 0
    if a.cmd == "probe":
        try:
            if os.geteuid() != 0:
                raise Skip("not root")
            workdir = tempfile.mkdtemp(prefix="nbprobe-")
            try:
                marker = argparse.Namespace(rate=10 ** 9, buffer=1 << 18, kmin=1, kmax=2, pmax=0)
                obj = build_bpf(marker, workdir)
                probe(obj, f"nb{os.getpid()}")
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
        except Skip as e:
            print(f"SKIP: {e}")
            return SKIP
        print("netbed: this host can run the bed")
        return 0
    finish_options(ap, a)
    try:
        report = run_bed(a)
    except Skip as e:
        print(f"SKIP: {e}")
        return SKIP
    except (BedError, Interrupted) as e:
        print(f"netbed: {e}", file=sys.stderr)
        return 1
    print(table(report))
    if a.json:
        text = json.dumps(report, indent=1, sort_keys=True)
        if a.json == "-":
            print(text)
        else:
            with open(a.json, "w") as fh:
                fh.write(text + "\n")
    ok = report.get("totals", {}).get("all_completed") and not report["namespaces_left"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
