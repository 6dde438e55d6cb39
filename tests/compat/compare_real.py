#!/usr/bin/env python3
"""The drop-in's pure functions answer as Debian's libibverbs does: the string helpers
(ibv_wc_status_str, ibv_event_type_str, ibv_node_type_str, ibv_port_state_str) and the rate
conversions, for every value in and around their ranges.

    compare_real.py OUR_LIBIBVERBS REAL_LIBIBVERBS

Both are loaded into this process by path (two distinct objects). Exit 77 (skip) when the real
library is not installed."""
import ctypes
import os
import sys

ours_path, real_path = sys.argv[1], sys.argv[2]
if not os.path.exists(real_path):
    print(f"SKIP: {real_path} not installed")
    sys.exit(77)
real = ctypes.CDLL(os.path.realpath(real_path))
ours = ctypes.CDLL(os.path.realpath(ours_path))
mismatches = 0


def compare(name, values, restype=ctypes.c_int):
    global mismatches
    fr, fo = getattr(real, name), getattr(ours, name)
    fr.restype = fo.restype = restype
    for v in values:
        r, o = fr(v), fo(v)
        if r != o:
            print(f"{name}({v}): rdma-core {r!r}, uroce {o!r}")
            mismatches += 1


for name, hi in [("ibv_wc_status_str", 30), ("ibv_event_type_str", 25),
                 ("ibv_node_type_str", 10), ("ibv_port_state_str", 8)]:
    compare(name, range(-2, hi), ctypes.c_char_p)
compare("ibv_rate_to_mult", range(-1, 40))
compare("mult_to_ibv_rate", range(-1, 600))
compare("ibv_rate_to_mbps", range(-1, 40))
mbps = [2500, 5000, 10000, 14062, 20000, 25781, 28125, 30000, 40000, 53125, 56250, 60000, 80000,
        103125, 112500, 120000, 168750, 206250, 309375, 425000, 637500, 850000, 1275000]
compare("mbps_to_ibv_rate", list(range(-1, 1300000, 997)) + mbps)
print(f"{mismatches} mismatches")
sys.exit(1 if mismatches else 0)
