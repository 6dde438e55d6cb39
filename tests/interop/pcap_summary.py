#!/usr/bin/env python3
"""Counts the RoCEv2 packets each address sent in a capture, and the largest of them.

usage: pcap_summary.py CAPTURE.pcap ADDRESS...
Prints one line per address: "ADDRESS packets N max_ip_bytes M after_others K" (M: the largest
IP packet, from the IP header to the ICRC, 0 when the address sent nothing; K: how many of its
packets came after the last packet of every other address given, i.e. after its peer had
stopped sending, perhaps because the peer's program had exited and destroyed its QPs).
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
    sent = {text: sent_from(argv[1], ipaddress.ip_address(text), with_time=True)
            for text in argv[2:]}
    for text, pkts in sent.items():
        others_last = max((when for other, ps in sent.items() if other != text for when, _ in ps),
                          default=0.0)
        after = sum(1 for when, _ in pkts if when > others_last)
        print('%s packets %d max_ip_bytes %d after_others %d' %
              (text, len(pkts), max((len(p) for _, p in pkts), default=0), after))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
