#!/usr/bin/env bash
# What the drop-in libibverbs.so.1 costs: perftest's ib_write_bw and ib_write_lat (unmodified
# Debian binaries) over build-release/compat/libibverbs.so.1, beside `uroce perf write_bw` and
# `uroce perf write_lat` (the same tests on uroce's C++ API), interleaved in one run.
#
#   bench/compat_vs_perf.sh [ROUNDS]     # default 3; SERVER_IP / CLIENT_IP to move it
#   bench/compat_vs_perf.sh ROUNDS shared
#   BASELINE=/path/to/other/build-release bench/compat_vs_perf.sh [ROUNDS]   # BASELINE_SERVER_IP / _CLIENT_IP: its addresses
#
# BASELINE: also the drop-in of another (Release) build, e.g. of the commit before a change
# (`git worktree add /tmp/old COMMIT`, then configure_release and build it there), in every
# round beside this one's, so that a change to the drop-in is measured side by side.
#
# `shared`: what sharing a device costs instead: each test with both processes on one shared
# device (both on SERVER_IP) beside both on two exclusive devices (UROCE_SHARED=0, one address
# each, as before devices were shared), for perftest over the drop-in and for `uroce perf`.
#
# Each test runs as two processes on loopback, the server pinned to CPU 0 and the client to
# CPU 1 when there are two CPUs (as bench/net_bench.sh does), with the tools' defaults: 5000 x
# 64 KiB RDMA WRITEs for bandwidth, 1000 x 2-byte RDMA WRITE ping-pongs for latency. Prints each
# client's result line, prefixed by the round and the test.
set -euo pipefail
rounds=${1:-3}
mode=${2:-}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build-release
sip=${SERVER_IP:-127.0.0.201}
cip=${CLIENT_IP:-127.0.0.202}
# The baseline's drop-in on addresses of its own: this build's coordinator lingers on $sip and $cip
# after a run, and one of another build may speak another protocol version (it then fails).
bsip=${BASELINE_SERVER_IP:-127.0.0.205}
bcip=${BASELINE_CLIENT_IP:-127.0.0.206}
if [[ -n ${BASELINE:-} && ! -e $BASELINE/compat/libibverbs.so.1 ]]; then
  echo "BASELINE: no compat/libibverbs.so.1 under $BASELINE" >&2
  exit 2
fi
for b in ib_write_bw ib_write_lat; do
  command -v "$b" >/dev/null || { echo "$b not found (Debian package perftest)" >&2; exit 2; }
done
# Configured as bench/net_bench.sh and scripts/demo configure build-release/, so that they share it.
(cd "$root" && source bench/rounds_lib.sh && configure_release)
ninja -C "$build" uroce uroce-devd uroce_ibverbs >/dev/null

cpu0=() cpu1=()
if (($(nproc) >= 2)) && command -v taskset >/dev/null; then
  cpu0=(taskset -c 0) cpu1=(taskset -c 1)
fi
port=19500
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
result() { grep -E '^ *[0-9]+ +[0-9]+ ' "$1" | tail -1; }

# uroce_perf TEST [CLIENT_IP [ENV...]]
uroce_perf() {
  local t=$1 c=${2:-$cip}
  shift $(($# < 2 ? $# : 2))
  port=$((port + 1))
  env "$@" "${cpu0[@]}" timeout 300 "$build/src/tools/uroce" perf "$t" --ip "$sip" -p "$port" \
    >"$tmp/s" 2>&1 &
  local s=$!
  sleep 0.5
  env "$@" "${cpu1[@]}" timeout 300 "$build/src/tools/uroce" perf "$t" --ip "$c" -p "$port" "$sip" \
    >"$tmp/c" 2>&1 || true
  wait "$s" || true
  result "$tmp/c"
}
# drop_in PROGRAM [CLIENT_IP [ENV...]]; the drop-in of $lib (this build's unless set)
drop_in() {
  local prog=$1 c=${2:-$cip} l=${lib:-$build/compat}
  shift $(($# < 2 ? $# : 2))
  port=$((port + 1))
  env LD_LIBRARY_PATH="$l" UROCE_DEVICES="$sip" "$@" "${cpu0[@]}" timeout 300 "$prog" \
    -p "$port" >"$tmp/s" 2>&1 &
  local s=$!
  sleep 0.5
  env LD_LIBRARY_PATH="$l" UROCE_DEVICES="$c" "$@" "${cpu1[@]}" timeout 300 "$prog" \
    -p "$port" "$sip" >"$tmp/c" 2>&1 || true
  wait "$s" || true
  result "$tmp/c"
}

if [[ $mode == shared ]]; then
  xsip=127.0.0.203 xcip=127.0.0.204
  for r in $(seq 1 "$rounds"); do
    echo "round $r (load average $(cut -d' ' -f1 /proc/loadavg))"
    # The exclusive runs use their own addresses: a shared run's coordinator lingers on $sip.
    echo "  ib_write_bw  two devices | $(sip=$xsip drop_in ib_write_bw "$xcip" UROCE_SHARED=0)"
    echo "  ib_write_bw  one shared  | $(drop_in ib_write_bw "$sip")"
    echo "  ib_write_lat two devices | $(sip=$xsip drop_in ib_write_lat "$xcip" UROCE_SHARED=0)"
    echo "  ib_write_lat one shared  | $(drop_in ib_write_lat "$sip")"
    echo "  perf write_bw  exclusive | $(sip=$xsip uroce_perf write_bw "$xcip" UROCE_SHARED=0)"
    echo "  perf write_bw  shared    | $(uroce_perf write_bw "$cip")"
    echo "  perf write_lat exclusive | $(sip=$xsip uroce_perf write_lat "$xcip" UROCE_SHARED=0)"
    echo "  perf write_lat shared    | $(uroce_perf write_lat "$cip")"
  done
  exit 0
fi

for r in $(seq 1 "$rounds"); do
  echo "round $r (load average $(cut -d' ' -f1 /proc/loadavg))"
  echo "  uroce perf write_bw   | $(uroce_perf write_bw)"
  echo "  ib_write_bw (drop-in) | $(drop_in ib_write_bw)"
  [[ -z ${BASELINE:-} ]] ||
    echo "  ib_write_bw (baseline)| $(lib=$BASELINE/compat sip=$bsip drop_in ib_write_bw "$bcip")"
  echo "  uroce perf write_lat  | $(uroce_perf write_lat)"
  echo "  ib_write_lat (drop-in)| $(drop_in ib_write_lat)"
  [[ -z ${BASELINE:-} ]] ||
    echo "  ib_write_lat (baseline)| $(lib=$BASELINE/compat sip=$bsip drop_in ib_write_lat "$bcip")"
done
