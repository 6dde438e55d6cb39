#!/usr/bin/env python3
"""A `uroce perf` server that answers on TCP but not on RoCE: it speaks the QP exchange and
advertises a GID at which nothing listens (an unreachable peer), so that the client's QP must
end in RETRY_EXC_ERR within its retry budget. Usage: perf_fake_peer.py LISTEN_IP PORT DEAD_IP"""
import socket
import sys


def main():
    listen_ip, port, dead_ip = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    gid = "00000000000000000000ffff" + "".join("%02x" % int(x) for x in dead_ip.split("."))
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((listen_ip, port))
    srv.listen(1)
    srv.settimeout(60)  # hang guard
    print("listening", flush=True)
    conn, _ = srv.accept()
    conn.settimeout(60)
    f = conn.makefile("rw")
    hello = dict(kv.split("=", 1) for kv in f.readline().split()[1:] if "=" in kv)
    f.write("OK mtu=1024\n")
    for i in range(int(hello["qps"])):
        f.write("QP idx=%d qpn=%x psn=0 gid=%s rkey=1234 addr=10000 half=800000\n" % (i, 0x11 + i, gid))
    f.flush()
    for _ in range(int(hello["qps"])):
        f.readline()  # the client's QPs
    if f.readline().startswith("SIZE"):
        f.write("READY\n")
        f.flush()
    while f.readline():  # until the client gives up and closes
        pass


if __name__ == "__main__":
    main()
