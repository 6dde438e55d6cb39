#!/usr/bin/env python3
"""Counts the RoCEv2 packets each address sent in a capture, and the largest of them.

usage: pcap_summary.py [--qp1 only|none] [--classes] CAPTURE.pcap ADDRESS...
Prints one line per address: "ADDRESS packets N max_ip_bytes M after_others K" (M: the largest
IP packet, from the IP header to the ICRC, 0 when the address sent nothing; K: how many of its
packets came after the last packet of every other address given, i.e. after its peer had
stopped sending, perhaps because the peer's program had exited and destroyed its QPs).
--qp1 only|none: count only the packets to QP 1 (the connection manager's MADs), or only the
others. With --qp1 only each line ends with "mads NAME:COUNT,..." (the MADs by attribute).
--classes: each line ends with "classes CLASS:COUNT,...", the packets by the class uroce's fault
stage aims at (src/fault/fault.h: req, ack, read, atomic, cnp, cm, other).
"""
import ipaddress
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from same_frames import dest_qp, sent_from  # noqa: E402

CM_ATTRS = {0x10: 'REQ', 0x11: 'MRA', 0x12: 'REJ', 0x13: 'REP', 0x14: 'RTU', 0x15: 'DREQ',
            0x16: 'DREP', 0x17: 'SIDR_REQ', 0x18: 'SIDR_REP', 0x19: 'LAP', 0x1a: 'APR'}


def mad_attr(ip):
    """The CM attribute of a MAD to QP 1 (from its IP header on): BTH 12, DETH 8, attr_id at 16."""
    off = ((ip[0] & 0xf) * 4 if ip[0] >> 4 == 4 else 40) + 8 + 12 + 8 + 16
    if len(ip) < off + 2:
        return '?'
    attr = struct.unpack('>H', ip[off:off + 2])[0]
    return CM_ATTRS.get(attr, '0x%04x' % attr)


def packet_class(ip):
    """The class of a RoCEv2 packet (from its IP header on) as fault::classify() says it: by
    the BTH opcode (wire/opcodes.def), a UD MAD to QP 1 being cm."""
    off = ((ip[0] & 0xf) * 4 if ip[0] >> 4 == 4 else 40) + 8
    if len(ip) < off + 12:
        return 'other'
    op = ip[off]
    if op == 0x81:
        return 'cnp'
    if op in (0x64, 0x65) and dest_qp(ip) == 1:
        # A MAD: 256 bytes after BTH and DETH, before the ICRC (and the pad, 0 here).
        return 'cm' if len(ip) - off - 12 - 8 - 4 == 256 else 'other'
    if op <= 0x0c or op in (0x16, 0x17) or 0x20 <= op <= 0x2b or op in (0x64, 0x65):
        return 'req'
    if 0x0d <= op <= 0x10:
        return 'read'
    if op in (0x11, 0x12):
        return 'ack'
    if op in (0x13, 0x14):
        return 'atomic'
    return 'other'


def main(argv):
    qp1 = None
    if len(argv) > 2 and argv[1] == '--qp1' and argv[2] in ('only', 'none'):
        qp1 = argv[2]
        argv = argv[:1] + argv[3:]
    classes = len(argv) > 1 and argv[1] == '--classes'
    if classes:
        argv = argv[:1] + argv[2:]
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    sent = {text: sent_from(argv[1], ipaddress.ip_address(text), with_time=True, qp1=qp1)
            for text in argv[2:]}
    for text, pkts in sent.items():
        others_last = max((when for other, ps in sent.items() if other != text for when, _ in ps),
                          default=0.0)
        after = sum(1 for when, _ in pkts if when > others_last)
        line = '%s packets %d max_ip_bytes %d after_others %d' % (
            text, len(pkts), max((len(p) for _, p in pkts), default=0), after)
        if qp1 == 'only':
            counts = {}
            for _, p in pkts:
                counts[mad_attr(p)] = counts.get(mad_attr(p), 0) + 1
            line += ' mads ' + (','.join('%s:%d' % kv for kv in sorted(counts.items())) or '-')
        if classes:
            counts = {}
            for _, p in pkts:
                counts[packet_class(p)] = counts.get(packet_class(p), 0) + 1
            line += ' classes ' + (','.join('%s:%d' % kv for kv in sorted(counts.items())) or '-')
        print(line)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
