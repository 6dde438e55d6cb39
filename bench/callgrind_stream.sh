#!/usr/bin/env bash
# The work per message of the 64-byte message-rate stream (issue 40): `uroce perf write_bw -s 64
# -t 1024`, many WRITEs in flight, coalesced ACKs, batches. bench/callgrind_hop.sh counts a
# ping-pong's hop; this counts the stream, on both sides, in what does not depend on time
# (instructions) and in what does (packets, ACKs and system calls per message: the batching).
#
#   bench/callgrind_stream.sh [N1 N2]        # default 20000 60000 messages
#   MODE=strace bench/callgrind_stream.sh    # system calls per message (strace -c -f)
#   MODE=native bench/callgrind_stream.sh    # the device's counters only, no tool in between
#   bench/callgrind_stream.sh --compare DIR_A DIR_B   # two KEEP dirs: per-function Ir/message
#   bench/callgrind_stream.sh --report DIR            # a KEEP dir's report again
#
# Runs the client and the server (pinned to CPUs 1 and 0) for N1 and then N2 messages and prints
# per side the difference per message, so that setup, connection and exit cancel out:
#   - the device's counters (UROCE_STATS_FILE, as `uroce stats` shows them): packets sent and
#     received (the server sends only ACKs, the client receives only ACKs), datagrams, sendmmsg
#     and recvmmsg calls; every mode;
#   - callgrind (default MODE): the process's instructions (the client's less `bw_stats`, the
#     report's sort, whose cost does not grow with N), progress rounds, and per call and per
#     message: the post (Device::post_send), the completion poll (Device::poll_cq), the received
#     packet (UdpDatapath::handle_packet with the engine's handling under it), the sent packet
#     (Engine::transmit) and its building (Qp::poll_transmit, congestion control's per-packet
#     hooks included), the sendmmsg batch (UdpDatapath::drain), congestion control per ACK
#     (Qp::report_ack, absent before dcqcn-aimd), the round less its packets, and the sum of the
#     post and the packets' work (what compares between runs); then the TOP
#     functions by self cost per message. Under callgrind each side runs ~50x slower, so rounds
#     that find nothing (and so the batch sizes) follow the tool's timing: compare per packet
#     and per call, and read the counters of MODE=native for the batching itself;
#   - strace: system calls per message by name (strace -c -f, the coordinator included).
# Instruction counts do not depend on the machine's load: run it under `chrt -i 0` on a shared
# machine. Environment: UROCE (the uroce binary, default build-release/src/tools/uroce: another
# commit's build measures that commit), SERVER_IP / CLIENT_IP / PORT, DEPTH (-t, 1024), SIZE
# (-s, 64), TOP (20), KEEP (a directory for the outputs, for --compare and
# bench-out/cgtree-style call trees), TIMEOUT (perf's --timeout on both sides, default 600 s: under
# callgrind and SCHED_IDLE beside a busy machine a run takes minutes, and the server's bound on
# the run is twice its --timeout).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/rounds_lib.sh
source "$root/bench/rounds_lib.sh"

analysis() {
  python3 - "$@" <<'PY'
import collections, glob, os, re, sys

KEYS = [('round', r'^uroce::engine::UdpDevice::application_round\(bool\)'),
        ('post', r'^uroce::Device::post_send\('), ('poll', r'^uroce::Device::poll_cq\('),
        ('rx', r'^uroce::datapath::UdpDatapath::handle_packet\('),
        ('tx', r'^uroce::engine::Engine::transmit\('),
        ('build', r'^uroce::transport::Qp::poll_transmit\('),
        ('drain', r'^uroce::datapath::UdpDatapath::drain\(\)'),
        ('cc', r'^uroce::transport::Qp::report_ack\('),
        ('bw_stats', r'::bw_stats\('), ('sendmmsg', r'^(__)?sendmmsg$'),
        ('recvmmsg', r'^(__)?recvmmsg$'), ('ppoll', r'^(__)?p?poll$')]

def callgrind(path):
    """Per function: calls into it, inclusive Ir of those calls, self Ir; and the total."""
    names, calls, incl, self_ = {}, collections.Counter(), collections.Counter(), collections.Counter()
    fn = cfn = pending = None
    total = 0
    for line in open(path):
        if line.startswith(('fn=', 'cfn=')):
            m = re.match(r'\((\d+)\)(?: (.*))?', line.split('=', 1)[1].rstrip('\n'))
            if m.group(2): names[m.group(1)] = m.group(2)
            if line.startswith('fn='): fn = names[m.group(1)]
            else: cfn = names[m.group(1)]
        elif line.startswith('calls='):
            pending = int(line[6:].split()[0])
        elif line[:1].isdigit() or line[:1] in '+-*':
            v = int(line.split()[-1])
            if pending is not None:
                calls[cfn] += pending
                incl[cfn] += v
                pending = None
            else:
                self_[fn] += v
        elif line.startswith('summary:'):
            total = int(line.split()[1])
    return calls, incl, self_, total

def counters(path):
    """The device's counters (the last line UROCE_STATS_FILE got): name -> value."""
    line = ''
    for l in open(path) if os.path.exists(path) else []:
        if l.startswith('link '): line = l
    w = line.split()
    start = w.index('pid') + 2 if 'pid' in w else len(w)
    return {w[i]: int(w[i + 1]) for i in range(start, len(w) - 1, 2) if w[i + 1].isdigit()}

def strace(path):
    """strace -c's table: syscall -> calls."""
    out = {}
    for l in open(path) if os.path.exists(path) else []:
        w = l.split()
        if len(w) >= 5 and w[0][0].isdigit() and not w[-1].startswith('total'):
            out[w[-1]] = int(w[3])
    return out

def find(calls, pat):
    return [n for n in calls if re.search(pat, n)]

def per_side(tmp, side, n1, n2, mode, top):
    m = n2 - n1
    a, b = counters(f'{tmp}/{side}.{n1}.stats'), counters(f'{tmp}/{side}.{n2}.stats')
    keys = ['sent_pkts', 'rcvd_pkts', 'rx_datagrams', 'tx_send_calls', 'rx_recv_calls',
            'tx_gso_datagrams', 'rx_gro_datagrams', 'tx_acks_held', 'tx_acks_deferred',
            'timer_fires', 'retransmitted_pkts', 'ack_timeouts', 'adaptive_timeouts',
            'tail_probes', 'out_of_seq_request', 'duplicate_request']
    c = ', '.join(f'{k} {(b.get(k, 0) - a.get(k, 0)) / m:.4f}' for k in keys if k in b)
    print(f'  counters per message: {c}')
    if mode == 'strace':
        sa, sb = strace(f'{tmp}/{side}.{n1}.strace'), strace(f'{tmp}/{side}.{n2}.strace')
        d = sorted(((sb.get(k, 0) - sa.get(k, 0)) / m, k) for k in sb)
        print('  system calls per message: total %.4f; %s' % (
            sum(v for v, _ in d), ', '.join(f'{k} {v:.4f}' for v, k in reversed(d) if abs(v) >= 0.0005)))
    if mode != 'callgrind':
        return
    (ca, ia, sa, ta), (cb, ib, sb, tb) = (callgrind(f'{tmp}/{side}.{n}') for n in (n1, n2))
    per = {}
    for key, pat in KEYS:
        calls = sum(cb[n] - ca.get(n, 0) for n in find(cb, pat)) / m
        incl = sum(ib[n] - ia.get(n, 0) for n in find(ib, pat)) / m
        per[key] = (calls, incl)
    each = lambda k: per[k][1] / per[k][0] if per[k][0] else 0
    total = (tb - ta) / m - per['bw_stats'][1]
    rounds = per['round'][0]
    packets = per['rx'][1] + per['build'][1] + per['tx'][1] + per['drain'][1]
    rest = (per['round'][1] - packets) / max(rounds, 1e-9)
    print(f'  Ir per message {total:.0f}; rounds {rounds:.4f} (less their packets {rest:.0f} Ir '
          f'each); post {per["post"][1]:.0f}; poll_cq {per["poll"][0]:.4f} calls, '
          f'{per["poll"][1]:.0f} Ir')
    # What does not depend on how many rounds the timing gave: the post and the packets.
    print(f'  per message without the rounds: post + packets built, sent, batched and received '
          f'{per["post"][1] + packets:.0f} Ir')
    print(f'  received packets {per["rx"][0]:.4f} x {each("rx"):.0f} Ir; built (Qp::poll_transmit)'
          f' {per["build"][1]:.0f} Ir; sent packets '
          f'{per["tx"][0]:.4f} x {each("tx"):.0f} Ir; sendmmsg batches {per["drain"][0]:.4f} x '
          f'{each("drain"):.0f} Ir; cc per ACK {per["cc"][0]:.4f} x {each("cc"):.0f} Ir; '
          f'calls sendmmsg {per["sendmmsg"][0]:.4f} recvmmsg {per["recvmmsg"][0]:.4f} '
          f'(p)poll {per["ppoll"][0]:.4f}')
    if top:
        d = sorted(((sb[n] - sa.get(n, 0)) / m, n) for n in sb)
        print(f'  top {top} functions by self Ir per message:')
        for v, n in reversed(d[-top:]):
            print(f'    {v:8.1f}  {re.sub(r"uroce::", "", n)[:110]}')

def self_per_message(d):
    """A KEEP dir's self Ir per message per function, per side."""
    n1, n2 = map(int, open(f'{d}/runs').read().split())
    out = {}
    for side in ('srv', 'cli'):
        _, _, sa, _ = callgrind(f'{d}/{side}.{n1}')
        _, _, sb, _ = callgrind(f'{d}/{side}.{n2}')
        out[side] = {n: (sb[n] - sa.get(n, 0)) / (n2 - n1) for n in sb}
    return out

if sys.argv[1] == '--compare':
    A, B, top = self_per_message(sys.argv[2]), self_per_message(sys.argv[3]), int(sys.argv[4])
    for side, name in (('srv', 'server'), ('cli', 'client')):
        a, b = A[side], B[side]
        names = set(a) | set(b)
        rows = sorted(names, key=lambda n: -abs(b.get(n, 0) - a.get(n, 0)))[:top]
        print(f'{name}: self Ir per message, A {sum(a.values()):.0f}, B {sum(b.values()):.0f}')
        print('       A        B    B-A  function')
        for n in rows:
            print(f'  {a.get(n, 0):7.1f}  {b.get(n, 0):7.1f}  {b.get(n, 0) - a.get(n, 0):+6.1f}  '
                  f'{re.sub(r"uroce::", "", n)[:100]}')
    sys.exit(0)
tmp, n1, n2, mode, top = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
for side, name in (('srv', 'server'), ('cli', 'client')):
    print(f'{name} ({n2 - n1} messages):')
    per_side(tmp, side, n1, n2, mode, top)
PY
}

if [[ ${1:-} == --compare ]]; then
  analysis --compare "$2" "$3" "${TOP:-30}"
  exit 0
fi
if [[ ${1:-} == --report ]]; then
  read -r n1 n2 <"$2/runs"
  analysis "$2" "$n1" "$n2" "${MODE:-callgrind}" "${TOP:-20}"
  exit 0
fi
n1=${1:-20000}
n2=${2:-60000}
mode=${MODE:-callgrind}
U=${UROCE:-$root/build-release/src/tools/uroce}
SIP=${SERVER_IP:-127.0.40.3}
CIP=${CLIENT_IP:-127.0.40.4}
P=${PORT:-19073}
depth=${DEPTH:-1024}
size=${SIZE:-64}
if [[ -n ${KEEP:-} ]]; then
  tmp=$KEEP
  mkdir -p "$tmp"
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
fi
pin_pair
for n in "$n1" "$n2"; do
  wrap_s=() wrap_c=()
  case $mode in
    callgrind)
      wrap_s=(valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$tmp/srv.$n")
      wrap_c=(valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$tmp/cli.$n")
      ;;
    strace)
      wrap_s=(strace -c -f -o "$tmp/srv.$n.strace")
      wrap_c=(strace -c -f -o "$tmp/cli.$n.strace")
      ;;
    native) ;;
    *)
      echo "callgrind_stream: MODE is callgrind, strace or native" >&2
      exit 2
      ;;
  esac
  rm -f "$tmp/srv.$n.stats" "$tmp/cli.$n.stats"
  args=(perf write_bw -s "$size" -t "$depth" -n "$n" -p "$P" --timeout "${TIMEOUT:-600}")
  UROCE_STATS_FILE="$tmp/srv.$n.stats" "${cpu0[@]}" "${wrap_s[@]}" "$U" "${args[@]}" \
    --ip "$SIP" >"$tmp/srv.$n.out" 2>&1 &
  srv=$!
  UROCE_STATS_FILE="$tmp/cli.$n.stats" "${cpu1[@]}" "${wrap_c[@]}" "$U" "${args[@]}" \
    --ip "$CIP" --connect_timeout 60 --json "$SIP" >"$tmp/cli.$n.out" 2>&1 || {
    echo "callgrind_stream: the client failed:" >&2
    cat "$tmp/cli.$n.out" >&2
    exit 1
  }
  wait $srv
  devd_gone "$SIP" "$CIP"
done
echo "$n1 $n2" >"$tmp/runs"
echo "$U, MODE=$mode: write_bw -s $size -t $depth, $n1 and $n2 messages, per message of the difference"
analysis "$tmp" "$n1" "$n2" "$mode" "${TOP:-20}"
