#!/usr/bin/env python3
"""ctest: the real-network test bed (netbed.py) comes up, carries traffic, reports, goes away.

  netbed_test.py UROCE   (the uroce command of the build under test)

1. A bed of 2 senders into one receiver through a 100 Mbit/s TBF with the BPF ECN marker on
   (Kmin 10 kB, Kmax 100 kB, Pmax 20%), one uroce perf write_bw flow and one iperf3 TCP flow
   for 3 s. Asserts behaviour, never a timing: both flows completed (uroce perf verified its
   data on both sides), the TBF counted packets, uroce's RoCEv2 packets left ECT(0) (its
   default congestion control's; with UROCE_CC=none or aimd the senders' stamper sets it),
   the marker set CE on some and the receiver saw RoCEv2 packets arrive with CE, the report
   has every field, and no namespace of the bed is left.
2. A bed stopped by SIGTERM while its flows run removes its namespaces before it exits.
3. A bed killed by SIGKILL (no cleanup runs) is removed by `netbed.py reap`.
100 Mbit/s, not 1 Gbit/s: any build (a sanitizer build on a busy machine too) fills it, so the
queue builds and the marker has something to mark.

Exit 0 when every check passed, 1 otherwise, 77 (skipped, the reason printed) when the host
cannot run the bed: not root, a missing tool or kernel feature.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NETBED = os.path.join(HERE, "netbed.py")
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import netbed  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def bed_namespaces(pid):
    return [ns for ns in netbed.list_namespaces() if ns.startswith(f"nb{pid}-")]


def wait_for(what, predicate, limit_s):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)  # the pause between two checks of the condition
    print(f"gave up waiting for {what} after {limit_s} s")
    return False


REPORT_KEYS = {
    "params": ["senders", "uroce_flows", "ibv_flows", "tcp_flows", "rate_bit_s", "buffer_bytes",
               "burst_bytes", "rtt_us", "ecn", "ect_roce", "kmin_bytes", "kmax_bytes", "pmax",
               "mtu", "if_mtu", "size", "seconds"],
    "ceiling": ["roce_write_efficiency", "roce_goodput_ceiling_gbit_s", "tcp_efficiency",
                "tcp_goodput_ceiling_gbit_s", "roce_bytes_per_write"],
    "totals": ["goodput_gbit_s", "utilisation", "jain", "roce_retransmitted_share",
               "roce_ack_timeouts", "roce_retry_exceeded_err", "all_completed"],
    "bottleneck": ["tbf_sent_pkts", "tbf_sent_bytes", "tbf_drops", "tbf_overlimits", "window_s",
                   "wire_gbit_s", "tbf_utilisation_mid"],
    "marker": list(netbed.MARKER_COUNTERS) + ["vq_max_bytes"],
    "ect_stamp": ["stamped", "already_ecn"],
    "udp": ["receiver", "senders"],
    "receiver_ip": ["InReceives", "InHdrErrors", "InCsumErrors", "InDiscards"],
}
FLOW_KEYS = ["id", "kind", "sender", "goodput_gbit_s", "link_share", "efficiency", "completed",
             "client_exit", "server_exit"]
UROCE_FLOW_KEYS = ["verified", "sent_pkts", "retransmitted_pkts", "retransmitted_share",
                   "ack_timeouts", "retry_exceeded_err", "receiver"]


def bed_with_traffic(uroce):
    argv = ["run", "--uroce-bin", uroce, "--senders", "2", "--uroce", "1", "--tcp", "1",
            "--rate", "100mbit", "--buffer", "256k", "--ecn", "--kmin", "10000", "--kmax",
            "100000", "--pmax", "0.2", "--mtu", "1024", "--seconds", "3"]
    ap = netbed.argparse.ArgumentParser()
    netbed.add_run_options(ap)
    args = ap.parse_args(argv[1:])
    netbed.finish_options(ap, args)
    print("netbed.py " + " ".join(argv))
    try:
        r = netbed.run_bed(args)
    except netbed.Skip as e:
        print(f"SKIP: {e}")
        sys.exit(77)
    print(netbed.table(r))
    print(json.dumps(r, indent=1, sort_keys=True))

    check(r["namespaces_left"] == [] and bed_namespaces(os.getpid()) == [],
          "the bed's namespaces are gone after the run")
    for section, keys in REPORT_KEYS.items():
        missing = [k for k in keys if r.get(section) is None or r[section].get(k) is None]
        check(not missing, f"the report's {section} has every field" +
              (f" (missing: {missing})" if missing else ""))
    check(len(r.get("flows", [])) == 2, "the report has both flows")
    for f in r.get("flows", []):
        keys = FLOW_KEYS + (UROCE_FLOW_KEYS if f["kind"] == "uroce" else ["tcp_retransmits"])
        missing = [k for k in keys if f.get(k) is None]
        check(not missing, f"flow {f['id']} has every field" +
              (f" (missing: {missing})" if missing else ""))
        check(f["completed"], f"flow {f['id']} completed (both sides exited 0, a goodput)")
    uroce_flow = next((f for f in r.get("flows", []) if f["kind"] == "uroce"), {})
    check(uroce_flow.get("verified") is True, "uroce perf verified the data on both sides")
    check(uroce_flow.get("sent_pkts", 0) > 0, "the uroce flow's counters were sampled")
    rc = uroce_flow.get("receiver") or {}
    check(all(rc.get(k) is not None for k in netbed.RECEIVER_COUNTERS) and rc["rcvd_pkts"] > 0,
          "the uroce flow's receiving device's counters were sampled")
    b = r.get("bottleneck", {})
    check(b.get("tbf_sent_pkts", 0) > 0 and b.get("tbf_sent_bytes", 0) > 0,
          "the TBF counted the packets it sent")
    st = r.get("ect_stamp") or {}
    if os.environ.get("UROCE_CC", "dcqcn-aimd") in ("none", "aimd"):
        check(st.get("stamped", 0) > 0, "the senders' stamper set ECT(0) on RoCEv2 packets")
    else:  # the default, dcqcn-aimd, sends ECT(0) itself: the stamper finds it set
        check(st.get("already_ecn", 0) > 0 and st.get("stamped", 0) == 0,
              "uroce's RoCEv2 packets left ECN-capable on their own (none for the stamper)")
    m = r.get("marker") or {}
    check(m.get("marked", 0) > 0, "the marker set CE on packets")
    if os.environ.get("UROCE_CC", "dcqcn-aimd") != "none":
        # Notification point to reaction point, end to end: the receiving device counted the
        # CE-marked RoCEv2 packets and answered with CNPs (rate-limited per QP, so fewer), and
        # the sending device took them (a CNP cannot be lost on the way back: only the
        # receiver's port is a bottleneck). The two devices are sampled at different moments,
        # so the two counts are not compared.
        t = r.get("totals", {})
        marked = (uroce_flow.get("receiver") or {}).get("np_ecn_marked_roce_packets") or 0
        check(marked > 0, "the receiving device counted CE-marked RoCEv2 packets")
        check(0 < (t.get("roce_cnps_sent") or 0) <= marked,
              "it sent CNPs for them, at most one per marked packet")
        check((t.get("roce_cnps_handled") or 0) > 0, "the sending device handled CNPs")
    check(m.get("pkts", 0) > 0 and m.get("ect_pkts", 0) > 0, "the marker saw ECT packets")
    rx = r.get("receiver_ecn", {})
    check(rx.get("roce", {}).get("ce", 0) > 0, "the receiver saw RoCEv2 packets with CE")
    check(rx.get("roce", {}).get("ect0", 0) > 0, "the receiver saw RoCEv2 packets with ECT(0)")
    check(rx.get("tcp", {}).get("ect0", 0) > 0, "the TCP flow negotiated ECN (ECT(0) seen)")
    marked_seen = rx.get("roce", {}).get("ce", 0) + rx.get("tcp", {}).get("ce", 0)
    # Every CE the receiver saw was set by the marker (nothing arrives with CE: ce_already is 0);
    # a marked packet may still be dropped by the TBF behind the marker.
    check(m.get("ce_already", 1) == 0 and 0 < marked_seen <= m.get("marked", 0),
          "every CE seen at the receiver was the marker's")
    ip = r.get("receiver_ip", {})
    check(ip.get("InReceives", 0) > 0 and ip.get("InHdrErrors") == 0 and
          ip.get("InCsumErrors") == 0,
          "the marks kept IPv4 checksums right (no header or checksum error at the receiver)")


def stopped_bed(uroce, how):
    """Starts a bed with a long flow, stops it with SIGTERM (once the flows run) or SIGKILL (once
    its namespaces exist), and checks that nothing is left."""
    cmd = [sys.executable, NETBED, "run", "--uroce-bin", uroce, "--uroce", "1", "--seconds",
           "60", "--rate", "100mbit", "--ecn"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        if how == "SIGTERM":
            # The flow runs once the sender's namespace holds two processes (the uroce perf
            # client and the counter sampler; only one, ping, while the bed comes up).
            ready = wait_for("the flow to run", lambda: p.poll() is None and len(netbed.run(
                ["ip", "netns", "pids", f"nb{p.pid}-s1"], check=False).split()) >= 2, 60)
            p.terminate()
        else:
            ready = wait_for("the bed's namespaces", lambda: len(bed_namespaces(p.pid)) >= 3, 60)
            p.kill()
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    check(ready, f"a bed came up to be stopped by {how}")
    if how == "SIGTERM":
        check(p.returncode == 1, f"the bed stopped by SIGTERM exited 1 (got {p.returncode})")
        left = bed_namespaces(p.pid)
        check(not left, f"a bed stopped by SIGTERM removed its namespaces (left: {left})")
    else:
        check(bool(bed_namespaces(p.pid)), "a bed killed by SIGKILL left its namespaces")
        subprocess.run([sys.executable, NETBED, "reap"], timeout=60)
        left = bed_namespaces(p.pid)
        check(not left, f"netbed.py reap removed what SIGKILL left (left: {left})")
    if failures:
        print(out)


def main():
    if len(sys.argv) != 2:
        print("usage: netbed_test.py UROCE", file=sys.stderr)
        return 2
    uroce = sys.argv[1]
    bed_with_traffic(uroce)
    stopped_bed(uroce, "SIGTERM")
    stopped_bed(uroce, "SIGKILL")
    print(f"netbed_test: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
