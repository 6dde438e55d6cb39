#!/usr/bin/env python3
"""Seed corpus for fuzz/parser_fuzz.cc from the golden captures.

Usage: scripts/fuzz-seeds.py OUT_DIR [PCAP ...]   (default: tests/data/golden/*.pcap)

Each seed is one selector byte followed by a packet, numbered as in fuzz/parser_fuzz.cc:
  0          parse_roce(packet)                 (packet = BTH .. ICRC)
  1 + 2*i    parse_frame(LINK_TYPES[i], packet, verify_icrc = true)
  2 + 2*i    parse_frame(LINK_TYPES[i], packet, verify_icrc = false)

From each capture it keeps a few frames per (opcode, size class) and writes every entry point's
view of them: the frame as captured, the IP packet under each other link type (raw IP, Linux
cooked v1 and v2, Ethernet with a VLAN tag), the UDP payload alone, and an IPv6 copy of IPv4
packets (with its ICRC recomputed) so that the IPv6 paths start from valid packets too. A few
rejections the captures do not show (truncated frames, an oversized payload) are added from the
first packet. Files are named by the SHA-1 of their content, as libFuzzer names corpus files.
"""

import glob
import hashlib
import os
import struct
import sys
import zlib

# The order of kLinkTypes in fuzz/parser_fuzz.cc.
ETHERNET, RAW, LINUX_SLL, IPV4, IPV6, LINUX_SLL2 = range(6)
DLT_TO_INDEX = {1: ETHERNET, 101: RAW, 12: RAW, 14: RAW, 113: LINUX_SLL, 228: IPV4, 229: IPV6,
                276: LINUX_SLL2}
ROCE_PORT = 4791
MAX_PER_KEY = 2


def selector(link_index, verify):
    return 1 + 2 * link_index + (0 if verify else 1)


def read_pcap(path):
    """Returns (dlt, [frame bytes]) of a classic pcap file, or None for other formats."""
    with open(path, 'rb') as f:
        data = f.read()
    if len(data) < 24:
        return None
    magic = data[:4]
    if magic in (b'\xd4\xc3\xb2\xa1', b'\x4d\x3c\xb2\xa1'):
        endian = '<'
    elif magic in (b'\xa1\xb2\xc3\xd4', b'\xa1\xb2\x3c\x4d'):
        endian = '>'
    else:
        return None  # pcapng or not a capture
    dlt = struct.unpack(endian + 'I', data[20:24])[0] & 0x0fffffff
    frames = []
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(endian + 'I', data[off + 8:off + 12])[0]
        frames.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return dlt, frames


def ip_of(link_index, frame):
    """The IP packet inside a frame, or None."""
    if link_index == ETHERNET:
        off = 12
        while len(frame) >= off + 2 and frame[off:off + 2] in (b'\x81\x00', b'\x88\xa8'):
            off += 4
        if len(frame) < off + 2 or frame[off:off + 2] not in (b'\x08\x00', b'\x86\xdd'):
            return None
        return frame[off + 2:]
    if link_index == LINUX_SLL:
        return frame[16:]
    if link_index == LINUX_SLL2:
        return frame[20:]
    return frame


def split_ip(ip):
    """(ip_udp header bytes, RoCE bytes BTH..ICRC) of a RoCEv2 packet, or None."""
    if len(ip) < 1:
        return None
    version = ip[0] >> 4
    if version == 4:
        if len(ip) < 28 or ip[0] & 0xf != 5 or ip[9] != 17:
            return None
        total = struct.unpack('>H', ip[2:4])[0]
        hdr = 20
    elif version == 6:
        if len(ip) < 48 or ip[6] != 17:
            return None
        total = 40 + struct.unpack('>H', ip[4:6])[0]
        hdr = 40
    else:
        return None
    if total > len(ip) or struct.unpack('>H', ip[hdr + 2:hdr + 4])[0] != ROCE_PORT:
        return None
    return ip[:hdr + 8], ip[hdr + 8:total]


def icrc(ip_udp, roce_without_icrc, rxe=False):
    """The RoCEv2 ICRC (as src/wire/icrc.cc computes it), as the 4 bytes stored on the wire.
    rxe: the kernel's Soft-RoCE's form of a FLUSH's (wire/icrc.h, icrc_rxe_continue): its 32
    header bytes covered again, unmasked, after the IBTA's."""
    masked = bytearray(ip_udp)
    if masked[0] >> 4 == 6:
        masked[0] |= 0x0f
        masked[1:4] = b'\xff\xff\xff'
        masked[7] = 0xff
        hdr = 40
    else:
        masked[1] = 0xff
        masked[8] = 0xff
        masked[10:12] = b'\xff\xff'
        hdr = 20
    masked[hdr + 6:hdr + 8] = b'\xff\xff'
    bth = bytearray(roce_without_icrc[:12])
    bth[4] = 0xff
    crc = zlib.crc32(b'\xff' * 8 + bytes(masked) + bytes(bth) + roce_without_icrc[12:])
    if rxe:
        crc = zlib.crc32(roce_without_icrc, crc)
    return struct.pack('<I', crc)


def to_ipv6(ip_udp, roce):
    """An IPv6 copy of an IPv4 RoCEv2 packet (IPv4-mapped addresses), with its ICRC redone."""
    udp = bytearray(ip_udp[20:28])
    tos, ttl = ip_udp[1], ip_udp[8]
    src = b'\x00' * 10 + b'\xff\xff' + ip_udp[12:16]
    dst = b'\x00' * 10 + b'\xff\xff' + ip_udp[16:20]
    v6 = struct.pack('>IHBB', (6 << 28) | (tos << 20), len(udp) + len(roce), 17, ttl) + src + dst
    new_ip_udp = v6 + bytes(udp)
    body = roce[:-4]
    return new_ip_udp + body + icrc(new_ip_udp, body)


def ethernet(ip, vlan=False):
    ether_type = b'\x86\xdd' if ip[0] >> 4 == 6 else b'\x08\x00'
    hdr = b'\x02\x00\x00\x00\x00\x02' + b'\x02\x00\x00\x00\x00\x01'
    if vlan:
        hdr += b'\x81\x00\x00\x05'
    return hdr + ether_type + ip


def linux_sll(ip):
    ether_type = b'\x86\xdd' if ip[0] >> 4 == 6 else b'\x08\x00'
    return struct.pack('>HHH', 0, 1, 6) + b'\x02\x00\x00\x00\x00\x01\x00\x00' + ether_type + ip


def linux_sll2(ip):
    ether_type = b'\x86\xdd' if ip[0] >> 4 == 6 else b'\x08\x00'
    return (ether_type + b'\x00\x00' + struct.pack('>IHBB', 1, 1, 0, 6) +
            b'\x02\x00\x00\x00\x00\x01\x00\x00' + ip)


def size_class(n):
    for limit in (64, 512, 1500):
        if n <= limit:
            return limit
    return 9000


def seeds_for(link_index, frame):
    ip = ip_of(link_index, frame)
    if ip is None:
        return
    parts = split_ip(ip)
    if parts is None:
        return
    ip_udp, roce = parts
    ip = ip_udp + roce  # trimmed to the IP length (drops Ethernet padding)
    yield selector(link_index, True), frame
    yield selector(link_index, False), frame
    yield 0, roce
    packets = [ip]
    if ip[0] >> 4 == 4 and len(roce) >= 16:
        packets.append(to_ipv6(ip_udp, roce))
    for pkt in packets:
        yield selector(RAW, True), pkt
        yield selector(IPV6 if pkt[0] >> 4 == 6 else IPV4, True), pkt
        yield selector(ETHERNET, True), ethernet(pkt)
        yield selector(ETHERNET, True), ethernet(pkt, vlan=True)
        yield selector(LINUX_SLL, True), linux_sll(pkt)
        yield selector(LINUX_SLL2, True), linux_sll2(pkt)


def edge_seeds(ip_udp, roce):
    """Rejections the captures never show, built from one captured IPv4 packet."""
    # A frame shorter than an Ethernet header.
    yield selector(ETHERNET, True), ethernet(ip_udp + roce)[:10]
    # A RoCE part shorter than BTH + ICRC, which the ICRC check meets first.
    short = bytearray(ip_udp)
    short[2:4] = struct.pack('>H', 20 + 8 + 8)
    short[24:26] = struct.pack('>H', 8 + 8)
    yield selector(RAW, True), bytes(short) + roce[:8]
    # An RC SEND Only whose payload is one word longer than the largest path MTU (4096).
    bth = bytearray(roce[:12])
    bth[0] = 0x04
    bth[1] &= 0xcf  # pad count 0
    yield 0, bytes(bth) + bytes(4100) + bytes(4)


def ipv4_checksum(hdr):
    total = sum(struct.unpack('>10H', bytes(hdr[:10]) + b'\x00\x00' + bytes(hdr[12:20])))
    while total > 0xffff:
        total = (total & 0xffff) + (total >> 16)
    return struct.pack('>H', ~total & 0xffff)


def reframed(ip_udp, body, rxe=False):
    """An IPv4 packet carrying `body` (BTH .. pad) in place of a captured one's, ICRC redone
    (rxe's form of it with `rxe`)."""
    hdr = bytearray(ip_udp)
    hdr[2:4] = struct.pack('>H', 20 + 8 + len(body) + 4)
    hdr[10:12] = ipv4_checksum(hdr)
    hdr[24:26] = struct.pack('>H', 8 + len(body) + 4)
    return bytes(hdr) + body + icrc(bytes(hdr), body, rxe)


def entry_views(ip_udp, bodies):
    """Each body (BTH .. pad) reframed on ip_udp's addresses, as the UDP payload, a raw IPv4
    packet, an Ethernet frame and an IPv6 copy."""
    for body in bodies:
        pkt = reframed(ip_udp, body)
        yield 0, pkt[28:]
        yield selector(RAW, True), pkt
        yield selector(ETHERNET, True), ethernet(pkt)
        yield selector(IPV6, True), to_ipv6(pkt[:28], pkt[28:])


def ibta15_seeds(ip_udp, roce):
    """The IBTA 1.5 requests (ATOMIC WRITE, FLUSH), which no golden capture has, on the first
    captured IPv4 packet's addresses: valid ones, and ones with bad fields for the parser."""
    bth = bytearray(roce[:12])
    bth[1] &= 0xcf  # pad count 0
    reth = struct.pack('>QII', 0x7f0000001000, 0x1234, 8)
    bth[0] = 0x1d  # RC ATOMIC WRITE: RETH and 8 bytes
    bodies = [bytes(bth) + reth + struct.pack('>Q', 0x0102030405060708),
              bytes(bth) + reth]  # no payload
    bth[0] = 0x1c  # RC FLUSH: FETH (placement, selectivity) then RETH
    for feth in (0x01, 0x12, 0x03, 0xffffffff):
        bodies.append(bytes(bth) + struct.pack('>I', feth) + reth)
    bodies.append(bytes(bth) + struct.pack('>I', 1) + reth + bytes(4))  # FLUSH with a payload
    yield from entry_views(ip_udp, bodies)
    # A FLUSH with rxe's ICRC (accepted), and an ATOMIC WRITE with rxe's form (refused).
    for body in (bytes(bth) + struct.pack('>I', 1) + reth, bodies[0]):
        pkt = reframed(ip_udp, body, rxe=True)
        yield selector(RAW, True), pkt
        yield selector(ETHERNET, True), ethernet(pkt)


def ieth_seeds(ip_udp, roce):
    """SEND with Invalidate (the IETH: the R_Key to invalidate, a memory window's for instance),
    which no golden capture has, on the first captured IPv4 packet's addresses: Only and Last,
    with and without payload, with a pad, and one cut inside the IETH."""
    bth = bytearray(roce[:12])
    bth[1] &= 0xcf  # pad count 0
    ieth = struct.pack('>I', 0x00abcd5a)  # index << 8 | key byte, as a window's rkey
    bodies = []
    for opcode in (0x17, 0x16):  # RC SEND Only with Invalidate, RC SEND Last with Invalidate
        bth[0] = opcode
        bodies.append(bytes(bth) + ieth + b'invalidate: 24 bytes ...')
        bodies.append(bytes(bth) + ieth)  # no payload
    padded = bytearray(bth)
    padded[0] = 0x17
    padded[1] |= 0x30  # pad count 3
    bodies.append(bytes(padded) + ieth + b'x' + bytes(3))
    bodies.append(bytes(bth[:12]) + ieth[:2])  # cut inside the IETH
    yield from entry_views(ip_udp, bodies)


def xrc_seeds(ip_udp, roce):
    """XRC requests and responses (opcode prefix 101b; requests carry the 4-byte XRCETH, a
    reserved byte and the XRC SRQ number, before any RETH or AtomicETH), which no golden capture
    has, on the first captured IPv4 packet's addresses: SEND Only, RDMA WRITE Only with
    Immediate, Compare & Swap, an ACK, a nonzero reserved byte, and one cut inside the XRCETH."""
    bth = bytearray(roce[:12])
    bth[1] &= 0xcf  # pad count 0
    xrceth = struct.pack('>I', 0x00000123)
    reth = struct.pack('>QII', 0x7f0000001000, 0x1234, 8)
    bodies = []
    bth[0] = 0xa4  # XRC SEND Only
    bodies.append(bytes(bth) + xrceth + b'xrc send')
    bodies.append(bytes(bth) + struct.pack('>I', 0xff000123) + b'xrc send')  # reserved byte set
    bodies.append(bytes(bth) + xrceth[:2])  # cut inside the XRCETH
    bth[0] = 0xab  # XRC RDMA WRITE Only with Immediate: XRCETH, RETH, ImmDt
    bodies.append(bytes(bth) + xrceth + reth + struct.pack('>I', 7) + bytes(8))
    bth[0] = 0xb3  # XRC Compare & Swap: XRCETH, AtomicETH
    bodies.append(bytes(bth) + xrceth + struct.pack('>QIQQ', 0x7f0000001000, 0x1234, 1, 2))
    bth[0] = 0xb1  # XRC Acknowledge: AETH, no XRCETH
    bodies.append(bytes(bth) + struct.pack('>I', 0x1f000001))
    yield from entry_views(ip_udp, bodies)


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    out_dir = argv[1]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pcaps = argv[2:] or sorted(glob.glob(os.path.join(root, 'tests/data/golden/*.pcap')))
    os.makedirs(out_dir, exist_ok=True)
    written = set()
    for path in pcaps:
        capture = read_pcap(path)
        if capture is None or capture[0] not in DLT_TO_INDEX:
            sys.stderr.write(f'fuzz-seeds: skipping {path} (not a classic pcap of a known link '
                             'type)\n')
            continue
        dlt, frames = capture
        link_index = DLT_TO_INDEX[dlt]
        per_key = {}
        for frame in frames:
            ip = ip_of(link_index, frame)
            parts = split_ip(ip) if ip is not None else None
            if parts is None or len(parts[1]) < 1:
                continue
            key = (parts[1][0], size_class(len(parts[1])))
            if per_key.get(key, 0) >= MAX_PER_KEY:
                continue
            per_key[key] = per_key.get(key, 0) + 1
            seeds = list(seeds_for(link_index, frame))
            if not written and ip[0] >> 4 == 4:
                seeds += list(edge_seeds(*parts))
                seeds += list(ibta15_seeds(*parts))
                seeds += list(ieth_seeds(*parts))
                seeds += list(xrc_seeds(*parts))
            for sel, data in seeds:
                seed = bytes([sel]) + data
                name = hashlib.sha1(seed).hexdigest()
                if name not in written:
                    written.add(name)
                    with open(os.path.join(out_dir, name), 'wb') as f:
                        f.write(seed)
    print(f'fuzz-seeds: {len(written)} seeds in {out_dir}')
    return 0 if written else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
