#!/usr/bin/env python3
"""Counts the RoCEv2 packets each address sent in a capture, and the largest of them.

usage: pcap_summary.py CAPTURE.pcap ADDRESS...
Prints one line per address: "ADDRESS packets N max_ip_bytes M" (M: the largest IP packet, from
the IP header to the ICRC; 0 when the address sent nothing).
"""
import ipaddress
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from same_frames import sent_from  # noqa: E402


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    for text in argv[2:]:
        pkts = sent_from(argv[1], ipaddress.ip_address(text))
        print('%s packets %d max_ip_bytes %d' % (text, len(pkts), max(map(len, pkts), default=0)))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
