#!/usr/bin/env python3
"""Compares two captures of the same RoCEv2 traffic, from the IP header on.

usage: same_frames.py [--late-ok] [--qp1 only|none] [--rx-faults LOG]
                     WIRE.pcap UROCE.pcap PEER_ADDRESS UROCE_ADDRESS
WIRE.pcap is tcpdump's view of the wire, UROCE.pcap what uroce wrote (UROCE_PCAP). The packets
sent from each address must be the same in both captures: the same number, in the same order,
the same bytes from the IP header to the ICRC (the Ethernet header is left out: uroce's capture
has no real MAC addresses).
- What the peer sent, uroce received through a UDP socket and reconstructed the headers: they
  must be exact, IPv4 identification (recovered from the ICRC) and checksums included.
- What uroce sent, the kernel completed: TTL/hop limit, TOS/traffic class, IPv6 flow label and
  the checksums are the kernel's, so those fields (the ones the ICRC masks) are not compared.
--late-ok: the last packets the peer sent may be missing from uroce's capture: they reached the
host when the program had closed its device, or was closing it (it had exited while the peer
still sent, e.g. ACKs or messages of QPs it destroyed with work outstanding). They are counted
and printed; the others must match.
--qp1 only|none: compare only the packets to QP 1 (the connection manager's MADs, which uroce's
device coordinator sends and receives, in its own capture: UROCE_DEVD_PCAP), or all the others
(a program's own, in its UROCE_PCAP capture); in both captures.
--rx-faults LOG: uroce's capture has a companion log of the faults its device injected
(UROCE_PCAP's FILE.faults: "time_ns dir packet kind class dest_qpn peer rule"). A packet its
transmit stage dropped is neither on the wire nor in its capture, nothing to do; one its receive
stage dropped (rx loss, burst_loss, partition, queue_full) is on the wire and not in its
capture: those are taken out of the peer's packets on the wire before the comparison, by their
number (the receive stage's count of the packets it took, from 1: the peer's packets in wire
order when its rules take every packet and uroce has one peer, as in the matrix; not with
--qp1), each checked against the log's DestQP. Other receive faults (duplicate, reorder, delay, corrupt) change what uroce
captured in ways this comparison does not undo: refused (exit 2).
Exit 0 when they match, 1 with the first differences otherwise.
"""
import ipaddress
import struct
import sys


def frames(path, with_time=False):
    """The frames of a pcap file; with_time: (seconds, frame) pairs."""
    with open(path, 'rb') as f:
        head = f.read(24)
        magic = struct.unpack('<I', head[:4])[0]
        endian = '<' if magic in (0xa1b2c3d4, 0xa1b23c4d) else '>'
        # Nanosecond captures have their own magic numbers.
        frac = 1e-9 if magic in (0xa1b23c4d, 0x4d3cb2a1) else 1e-6
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            sec, sub, incl, _ = struct.unpack(endian + 'IIII', rec)
            data = f.read(incl)
            yield (sec + sub * frac, data) if with_time else data


def last_time(path):
    t = 0.0
    for when, _ in frames(path, with_time=True):
        t = max(t, when)
    return t


def dest_qp(ip):
    """The BTH's destination QP of a RoCEv2 packet (from its IP header on), or None."""
    off = (ip[0] & 0xf) * 4 if ip[0] >> 4 == 4 else 40
    if len(ip) < off + 8 + 8:
        return None
    return struct.unpack('>I', ip[off + 8 + 4:off + 8 + 8])[0] & 0xffffff


def sent_from(path, addr, with_time=False, qp1=None):
    """IP packets (from the IP header on) whose source is addr; with_time: (seconds, packet).
    qp1: None, all of them; 'only', those to QP 1; 'none', the others."""
    packed = addr.packed
    out = []
    for when, fr in frames(path, with_time=True):
        off = 14
        ether_type = struct.unpack('>H', fr[12:14])[0]
        if ether_type == 0x8100:
            ether_type = struct.unpack('>H', fr[16:18])[0]
            off = 18
        ip = fr[off:]
        pkt = None
        if ether_type == 0x0800 and addr.version == 4 and ip[12:16] == packed:
            pkt = ip[:struct.unpack('>H', ip[2:4])[0]]
        elif ether_type == 0x86dd and addr.version == 6 and ip[8:24] == packed:
            pkt = ip[:40 + struct.unpack('>H', ip[4:6])[0]]
        if pkt is not None and qp1 is not None and (dest_qp(pkt) == 1) != (qp1 == 'only'):
            pkt = None
        if pkt is not None:
            out.append((when, pkt) if with_time else pkt)
    return out


def masked(ip):
    """The packet with the fields that the ICRC masks (and the kernel fills in) zeroed."""
    b = bytearray(ip)
    if b[0] >> 4 == 4:
        ihl = (b[0] & 0xf) * 4
        b[1] = 0
        b[8] = 0
        b[10:12] = b'\0\0'
        b[ihl + 6:ihl + 8] = b'\0\0'
    else:
        b[0] &= 0xf0
        b[1:4] = b'\0\0\0'
        b[7] = 0
        b[46:48] = b'\0\0'
    return bytes(b)


RX_DROPS = ('loss', 'burst_loss', 'partition', 'queue_full')


def rx_dropped(path):
    """{packet number: dest_qpn} of the packets uroce's receive stage dropped (the fault log at
    path), or a string saying why the log cannot be used."""
    dropped = {}
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words or words[0].startswith('#'):
                continue
            if len(words) < 8:
                return 'malformed line in %s: %s' % (path, line.strip())
            _, direction, number, kind, _, qpn = words[:6]
            if direction != 'rx':
                continue
            if kind not in RX_DROPS:
                return ('%s: uroce\'s receive stage injected %s: its capture cannot be compared '
                        'with the wire by taking out dropped packets' % (path, kind))
            dropped[int(number)] = int(qpn)
    return dropped


def main(argv):
    late_ok = len(argv) > 1 and argv[1] == '--late-ok'
    if late_ok:
        argv = argv[:1] + argv[2:]
    qp1 = None
    if len(argv) > 2 and argv[1] == '--qp1' and argv[2] in ('only', 'none'):
        qp1 = argv[2]
        argv = argv[:1] + argv[3:]
    dropped = {}
    if len(argv) > 2 and argv[1] == '--rx-faults':
        dropped = rx_dropped(argv[2])
        argv = argv[:1] + argv[3:]
        if isinstance(dropped, str):
            print(dropped)
            return 2
        if dropped and qp1 is not None:
            print('--rx-faults with --qp1: the receive stage\'s numbers count every packet')
            return 2
    if len(argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    wire_path, uroce_path = argv[1], argv[2]
    ok = True
    for text, exact in ((argv[3], True), (argv[4], False)):
        addr = ipaddress.ip_address(text)
        wire = sent_from(wire_path, addr, qp1=qp1)
        mine = sent_from(uroce_path, addr, qp1=qp1)
        if exact and dropped:
            # The peer's packets that uroce's receive stage dropped: on the wire, never captured.
            wrong = [n for n, qpn in sorted(dropped.items())
                     if n > len(wire) or dest_qp(wire[n - 1]) != qpn]
            if wrong:
                n = wrong[0]
                print('%s: the fault log\'s receive drop #%d (DestQP %d) is %s' %
                      (text, n, dropped[n], 'beyond the %d packets on the wire' % len(wire)
                       if n > len(wire) else 'packet %d on the wire, to DestQP %s' %
                       (n, dest_qp(wire[n - 1]))))
                ok = False
                continue
            print('%s: %d packet(s) dropped by uroce\'s receive stage (its fault log): left out' %
                  (text, len(dropped)))
            wire = [p for i, p in enumerate(wire, 1) if i not in dropped]
        if exact and late_ok and len(wire) > len(mine):
            # The peer's last packets, beyond those uroce captured: the program had closed the
            # device (or had not read them yet when it closed). Allowed only at the end: the
            # packets uroce did capture must still be the first ones, exactly.
            closed = last_time(uroce_path)
            late = sent_from(wire_path, addr, with_time=True, qp1=qp1)[len(mine):]
            print('%s: the last %d packet(s) reached the host as uroce\'s device closed: not in '
                  'its capture (on the wire %+.6f to %+.6f s after its last captured packet)' %
                  (text, len(late), late[0][0] - closed, late[-1][0] - closed))
            wire = wire[:len(mine)]
        if not exact:
            wire = [masked(p) for p in wire]
            mine = [masked(p) for p in mine]
        if len(wire) != len(mine):
            print('%s: %d packets on the wire, %d in uroce\'s capture' % (text, len(wire), len(mine)))
            ok = False
            continue
        bad = [i for i, (a, b) in enumerate(zip(wire, mine)) if a != b]
        for i in bad[:3]:
            a, b = wire[i], mine[i]
            offs = [k for k in range(min(len(a), len(b))) if a[k] != b[k]]
            print('%s: packet %d differs (lengths %d/%d) at IP offsets %s' %
                  (text, i + 1, len(a), len(b), offs[:12]))
        if bad:
            ok = False
        else:
            print('%s: %d packets, identical in both captures%s' %
                  (text, len(wire), '' if exact else ' (ICRC-masked fields aside)'))
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
