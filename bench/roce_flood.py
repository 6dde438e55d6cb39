#!/usr/bin/env python3
"""A flood of bad RoCEv2 packets at a uroce device's UDP port 4791, on loopback only.

    bench/roce_flood.py --dst 127.0.0.1 --mode garbage --rate 20000 --seconds 10
    bench/roce_flood.py --dst 127.0.0.1 --src 127.0.0.2 --mode valid --qpn 17-24 --seconds 10

Modes:
  garbage  random bytes of random length (0 to 1500), to port 4791;
  valid    packets that look like RoCEv2: a well-formed BTH (RC, UC and UD opcodes), P_Key 0xffff,
           in turn: an unknown (random) destination QPN with a good ICRC; a known one (--qpn) with
           a bad ICRC; a known one with a good ICRC and a wrong (random) PSN; a known one with
           a good ICRC, a RETH pointing anywhere and a random rkey (--kinds: some of these, or
           garbage among them too).
The ICRC is the IBTA's (CRC-32 over the masked IPv4 and UDP headers and the BTH on), computed
for IPv4 identification 0 with DF set, which is what an unconnected socket with
IP_PMTUDISC_DO sends. Only 127.0.0.0/8 destinations are accepted. Prints one line at the end:
"roce_flood: MODE sent N packets in S s", for valid followed by how many of each kind
("(unknown_qpn A, bad_icrc B, wrong_psn C, random_rkey D)"). Stops after --seconds, after --count
packets when given (whichever comes first), on SIGTERM/SIGINT too.
"""
import argparse
import ipaddress
import random
import signal
import socket
import struct
import sys
import time
import zlib

ROCE_PORT = 4791
IP_MTU_DISCOVER = 10
IP_PMTUDISC_DO = 2


def icrc(src: bytes, dst: bytes, sport: int, payload: bytes) -> bytes:
    """The ICRC of a RoCEv2 packet whose UDP payload (BTH on, ICRC excluded) is payload."""
    udp_len = 8 + len(payload) + 4
    total = 20 + udp_len
    # IPv4 header: TOS, TTL and checksum masked to ones; identification 0, DF.
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0xFF, total, 0, 0x4000, 0xFF, 17, 0xFFFF, src, dst)
    udp = struct.pack("!HHHH", sport, ROCE_PORT, udp_len, 0xFFFF)
    # BTH byte 4 (FECN, BECN, reserved) masked to ones.
    bth = payload[:4] + b"\xff" + payload[5:]
    crc = zlib.crc32(b"\xff" * 8 + ip + udp + bth) & 0xFFFFFFFF
    return struct.pack("<I", crc)


# (opcode, extension headers' length, payload length): SEND Only, WRITE Only (RETH), READ
# Request (RETH), Compare&Swap (AtomicETH), UC SEND Only, UD SEND Only (DETH), RC Acknowledge
# (AETH).
OPCODES = [(0x04, 0, 64), (0x0A, 16, 64), (0x0C, 16, 0), (0x13, 28, 0), (0x24, 0, 64),
           (0x64, 8, 64), (0x11, 4, 0)]


KINDS = ["unknown_qpn", "bad_icrc", "wrong_psn", "random_rkey", "garbage"]


def bth_packet(rng: random.Random, qpn: int, psn: int) -> bytes:
    op, ext, plen = rng.choice(OPCODES)
    bth = struct.pack("!BBHII", op, 0, 0xFFFF, qpn & 0xFFFFFF, (1 << 31) | (psn & 0xFFFFFF))
    return bth + rng.randbytes(ext) + rng.randbytes(plen)


def parse_qpns(text: str) -> list:
    out = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out.extend(range(int(lo, 0), int(hi, 0) + 1))
        elif part:
            out.append(int(part, 0))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dst", required=True, help="the device's address (127.0.0.0/8)")
    ap.add_argument("--src", default="127.0.0.254", help="source address (127.0.0.0/8)")
    ap.add_argument("--mode", choices=["garbage", "valid"], required=True)
    ap.add_argument("--qpn", default="17-80", help="known QPNs: N, N-M, comma separated")
    ap.add_argument("--rate", type=float, default=20000, help="packets per second (0: no limit)")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--kinds", default=",".join(KINDS[:4]),
                    help="valid: which kinds, in turn (default all but garbage)")
    ap.add_argument("--count", type=int, default=0, help="packets to send (0: no limit)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    for addr in (a.dst, a.src):
        if not ipaddress.ip_address(addr) in ipaddress.ip_network("127.0.0.0/8"):
            print(f"roce_flood: {addr} is not a loopback address", file=sys.stderr)
            return 2
    kinds = [KINDS.index(k) for k in a.kinds.split(",") if k in KINDS]
    if not kinds or len(kinds) != len(a.kinds.split(",")):
        print(f"roce_flood: --kinds takes {','.join(KINDS)}", file=sys.stderr)
        return 2
    known = parse_qpns(a.qpn)
    if not known:
        print("roce_flood: no QPN in --qpn", file=sys.stderr)
        return 2
    rng = random.Random(a.seed)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    sock.bind((a.src, 0))
    sport = sock.getsockname()[1]
    src, dst = socket.inet_aton(a.src), socket.inet_aton(a.dst)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    # A pool of packets made in advance, so that the rate is the socket's, not Python's.
    pool = []
    for i in range(4096):
        kind = kinds[i % len(kinds)]
        if a.mode == "garbage" or KINDS[kind] == "garbage":
            pool.append(rng.randbytes(rng.randrange(0, 1501)))
            continue
        qpn = rng.randrange(0x100000, 0x1000000) if kind == 0 else rng.choice(known)
        p = bth_packet(rng, qpn, rng.randrange(0, 1 << 24))
        if kind == 3:  # a WRITE Only with a RETH anywhere, a random rkey
            p = struct.pack("!BBHII", 0x0A, 0, 0xFFFF, qpn, (1 << 31) | rng.randrange(1 << 24))
            p += struct.pack("!QII", rng.getrandbits(64), rng.getrandbits(32), 64)
            p += rng.randbytes(64)
        crc = icrc(src, dst, sport, p)
        if kind == 1:
            crc = bytes(b ^ 0x5A for b in crc)
        pool.append(p + crc)
    start = time.monotonic()
    sent = 0
    batch = 64
    while not stop:
        now = time.monotonic() - start
        if now >= a.seconds or (a.count and sent >= a.count):
            break
        if a.rate > 0 and sent >= now * a.rate:
            time.sleep(min(0.001, batch / a.rate))
            continue
        for _ in range(batch if not a.count else min(batch, a.count - sent)):
            try:
                sock.sendto(pool[sent % len(pool)], (a.dst, ROCE_PORT))
            except OSError:
                pass  # a full socket buffer: the flood goes on
            sent += 1
    tail = ""
    if a.mode == "valid":
        # Packet i of the run is pool[i % len(pool)], of kind kinds[(i % len(pool)) % len(kinds)].
        n = [0] * len(KINDS)
        for i in range(sent):
            n[kinds[(i % len(pool)) % len(kinds)]] += 1
        tail = " (" + ", ".join(f"{k} {n[j]}" for j, k in enumerate(KINDS)) + ")"
    print(f"roce_flood: {a.mode} sent {sent} packets in {time.monotonic() - start:.1f} s{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
