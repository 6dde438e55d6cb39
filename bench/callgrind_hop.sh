#!/usr/bin/env bash
# Instructions per hop of an 8-byte RDMA WRITE ping-pong, per side, counted by callgrind (issue
# 14): not time, so a shared machine whose speed drifts still gives the same numbers.
#
#   bench/callgrind_hop.sh [N1 N2]     # default 1000 3000; SERVER_IP / CLIENT_IP / PORT to move it
#
# Runs `uroce perf write_lat -s 8` (Release build in build-release/, configured as
# bench/net_bench.sh does; UROCE=path for another binary) as two processes under
# `valgrind --tool=callgrind`, for N1 and then N2 iterations, and prints for each side the
# difference per iteration: the whole process (which includes the rounds that poll an empty
# socket while the peer works: their number depends on timing, so this total does not compare
# between runs), the rounds per iteration, and what does compare: the Ir of each received packet
# (UdpDatapath::handle_packet with the engine's handling under it), of each sent packet
# (Engine::transmit), of the sendmmsg batch (UdpDatapath::drain) and of the post
# (Device::post_send) per iteration, the mean Ir of a progress round less that packet work, and
# their sum with two rounds: the work of one hop on one side.
set -euo pipefail
n1=${1:-1000}
n2=${2:-3000}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
U=${UROCE:-$root/build-release/src/tools/uroce}
SIP=${SERVER_IP:-127.0.40.1}
CIP=${CLIENT_IP:-127.0.40.2}
P=${PORT:-19071}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cpu0=() cpu1=()
if (($(nproc) >= 2)) && command -v taskset >/dev/null; then
  cpu0=(taskset -c 0) cpu1=(taskset -c 1)
fi
cg=(valgrind --tool=callgrind --dump-instr=no)
for n in "$n1" "$n2"; do
  "${cpu0[@]}" "${cg[@]}" --callgrind-out-file="$tmp/srv.$n" "$U" perf write_lat -s 8 -n "$n" \
    --ip "$SIP" -p "$P" >/dev/null 2>&1 &
  srv=$!
  "${cpu1[@]}" "${cg[@]}" --callgrind-out-file="$tmp/cli.$n" "$U" perf write_lat -s 8 -n "$n" \
    --ip "$CIP" -p "$P" --connect_timeout 60 "$SIP" >/dev/null 2>&1
  wait $srv
done
python3 - "$tmp" "$n1" "$n2" <<'PY'
import collections, re, sys
tmp, n1, n2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
KEYS = [('round', r'UdpDevice::application_round\(bool\)'), ('rx', r'UdpDatapath::handle_packet\('),
        ('tx', r'Engine::transmit\('), ('drain', r'UdpDatapath::drain\(\)'),
        ('post', r'^uroce::Device::post_send\(')]
def stats(path):
    # Calls and inclusive Ir per callee, summed over its call sites (callgrind's format:
    # "cfn=" names the callee, "calls=" is followed by a line whose last number is the
    # inclusive cost of those calls; names are compressed as "(id) name" the first time).
    names, calls, incl = {}, collections.Counter(), collections.Counter()
    cfn, pending, total = None, None, 0
    for line in open(path):
        if line.startswith(('fn=', 'cfn=')):
            m = re.match(r'\((\d+)\)(?: (.*))?', line.split('=', 1)[1].rstrip('\n'))
            if m.group(2): names[m.group(1)] = m.group(2)
            if line.startswith('cfn='): cfn = names[m.group(1)]
        elif line.startswith('calls='):
            pending = int(line[6:].split()[0])
        elif pending is not None and (line[:1].isdigit() or line[:1] in '+-*'):
            calls[cfn] += pending
            incl[cfn] += int(line.split()[-1])
            pending = None
        elif line.startswith('summary:'):
            total = int(line.split()[1])
    d = {}
    for key, pat in KEYS:
        for name in incl:
            if re.search(pat, name):
                d[key] = (calls[name], incl[name])
                break
        else:
            d[key] = (0, 0)
    return d, total
for side, name in (('srv', 'server'), ('cli', 'client')):
    (a, ta), (b, tb) = stats(f'{tmp}/{side}.{n1}'), stats(f'{tmp}/{side}.{n2}')
    it = n2 - n1
    per = {k: ((b[k][0] - a[k][0]) / it, (b[k][1] - a[k][1]) / it) for k in b}
    pkt = lambda k: per[k][1] / per[k][0] if per[k][0] else 0
    work = per['rx'][1] + per['tx'][1] + per['drain'][1] + per['post'][1]
    rnd = (per['round'][1] - per['rx'][1] - per['tx'][1] - per['drain'][1]) / max(per['round'][0], 1)
    print(f"{name}: Ir/iteration {(tb - ta) / it:.0f} (rounds {per['round'][0]:.1f}); "
          f"per received packet {pkt('rx'):.0f}, per sent packet {pkt('tx'):.0f}, "
          f"sendmmsg batch {per['drain'][1]:.0f}, post {per['post'][1]:.0f}, round {rnd:.0f}; "
          f"hop (packets, post, two rounds) {work + 2 * rnd:.0f}")
PY
