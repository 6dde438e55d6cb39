#!/usr/bin/env bash
# Open MPI's ping-pong over pml ucx on uroce against pml ob1 over its TCP BTL, measured side by
# side in one run (issue 16): bench/mpi_pingpong.c as 2 ranks on this host (loopback),
#   - uroce: --mca pml ucx, UCX_TLS=rc_verbs,ud_verbs on uroce0:1 (no shared memory, no self
#     transport for the data), the Release drop-in libibverbs.so.1 of build-release/; each rank
#     its own device (UROCE_DEVICES=uroce0=SERVER_IP for rank 0, CLIENT_IP for rank 1), as
#     ucx_bench.sh has them; uroce's counters (UROCE_STATS_FILE) must show each rank's device
#     sent and received at least the bytes the ping-pong moved, or the run fails;
#   - tcp: --mca pml ob1 --mca btl tcp,self on lo (no shared-memory BTL).
# Metrics (mpi_pingpong.c): 8 B one-way latency (median round trip / 2, us) and 1 MiB ping-pong
# bandwidth (2 MiB over the median round trip, MB/s = 10^6 B/s). The two transports alternate
# ROUNDS times (default 3) so that a drift of the machine's speed touches both; the table gives
# each one's median over the rounds and the ratios.
#
# Ranks are bound to cores 0 and 1 (--bind-to core) where the host has two. They busy-poll
# (mpi_yield_when_idle 0, Open MPI's default when not oversubscribed): each has a core of its
# own, and a rank that polls the drop-in's CQ runs uroce's progress itself, so yielding would
# only add a system call to every idle turn of both transports' wait loops.
# Needs root once for `uroce setup` (the /dev/infiniband/uverbs0 link UCX looks for); mpirun runs
# with --allow-run-as-root.
#
# Usage: bench/mpi_bench.sh [ROUNDS]
# Environment: SERVER_IP, CLIENT_IP (default 127.0.11.1, 127.0.11.2) for uroce's devices;
# LAT_ITERS, BW_ITERS (default 20000, 300) for mpi_pingpong.
# Ports: the TCP BTL binds in 18800-18899 and only on lo (its default would take the first free
# port from 1024 up, on every interface but lo); mpirun's out-of-band TCP listens on
# 18950-18959 (on the wildcard address, as Open MPI does; only lo's address is given out). The
# BTL binds without SO_REUSEADDR, so a port whose connection closed stays taken for TCP's
# TIME_WAIT (60 s): each round takes two, and the range lets runs follow one another.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/rounds_lib.sh
R=$(rounds_arg mpi_bench "${1:-3}")
SIP=${SERVER_IP:-127.0.11.1}
CIP=${CLIENT_IP:-127.0.11.2}
LAT_ITERS=${LAT_ITERS:-20000}
BW_ITERS=${BW_ITERS:-300}

release_build uroce uroce-devd uroce_ibverbs mpi_pingpong
U=build-release/src/tools/uroce
LIB=$(cd build-release/compat && pwd)
PP=$PWD/build-release/bench/mpi_pingpong
"$U" setup >/dev/null

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Nothing from the user's UCX configuration or preloads.
unset UCX_TLS UCX_NET_DEVICES LD_PRELOAD
if (($(nproc) >= 2)); then
  place=(--map-by core --bind-to core --mca mpi_yield_when_idle 0)
else # two busy-polling ranks on one CPU would take turns by the scheduler's time slice
  place=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
fi
# The uroce arm's `--mca btl self` keeps Open MPI's own verbs BTL (openib) off the device and
# every other BTL's sockets closed; mtl ^ofi spares every MPI_Init libfabric's slow probe
# (README, "Open MPI").
common=(--allow-run-as-root "${place[@]}" --mca mtl '^ofi'
  --mca oob_tcp_if_include lo --mca oob_tcp_dynamic_ipv4_ports 18950-18959)

# One run of mpi_pingpong over uroce|tcp; prints its output (metric lines) or fails.
run() { # uroce|tcp
  local how=$1 rc=0
  if [[ $how == uroce ]]; then
    rm -f "$tmp"/*.stats
    # Each rank its device and its counters file (MPMD: one app context per rank).
    local a=(env "LD_LIBRARY_PATH=$LIB" "UROCE_DEVICES=uroce0=$SIP"
      "UROCE_STATS_FILE=$tmp/$SIP.stats")
    local b=(env "LD_LIBRARY_PATH=$LIB" "UROCE_DEVICES=uroce0=$CIP"
      "UROCE_STATS_FILE=$tmp/$CIP.stats")
    timeout -k 5 300 mpirun "${common[@]}" --mca pml ucx --mca pml_ucx_devices any --mca btl self \
      -x UCX_TLS=rc_verbs,ud_verbs -x UCX_NET_DEVICES=uroce0:1 \
      -np 1 "${a[@]}" "$PP" "$LAT_ITERS" "$BW_ITERS" : \
      -np 1 "${b[@]}" "$PP" "$LAT_ITERS" "$BW_ITERS" >"$tmp/out" 2>&1 || rc=$?
  else
    timeout -k 5 300 mpirun "${common[@]}" --mca pml ob1 --mca btl tcp,self \
      --mca btl_tcp_if_include lo --mca btl_tcp_port_min_v4 18800 --mca btl_tcp_port_range_v4 100 \
      -np 2 "$PP" "$LAT_ITERS" "$BW_ITERS" >"$tmp/out" 2>&1 || rc=$?
  fi
  if ((rc != 0)) || ! grep -q 'metric=bandwidth' "$tmp/out"; then
    cat "$tmp/out" >&2
    echo "mpi_bench: mpirun over $how exited $rc" >&2
    exit 1
  fi
  grep '^mpi_pingpong: metric=' "$tmp/out"
  [[ $how == uroce ]] || return 0
  # The data went over uroce: each rank's device carried the ping-pong's bytes both ways.
  local moved addr sent rcvd
  moved=$(sed -n 's/^mpi_pingpong: moved=\([0-9]*\) .*/\1/p' "$tmp/out")
  for addr in "$SIP" "$CIP"; do
    read -r sent rcvd < <(awk '$1 == "link" { for (i = 2; i < NF; i++) {
        if ($i == "sent_bytes") s += $(i + 1); if ($i == "rcvd_bytes") r += $(i + 1) } }
        END { print s + 0, r + 0 }' "$tmp/$addr.stats" 2>/dev/null || echo 0 0)
    if ((sent < moved || rcvd < moved)); then
      cat "$tmp"/*.stats >&2 || true
      echo "mpi_bench: uroce0 at $addr sent $sent and received $rcvd bytes," \
        "less than the $moved the ping-pong moved each way" >&2
      exit 1
    fi
    echo "uroce0 at $addr: sent_bytes $sent rcvd_bytes $rcvd (ping-pong: $moved each way)"
  done
  devd_gone "$SIP" "$CIP"
}

declare -A vals
for ((r = 1; r <= R; ++r)); do
  for how in uroce tcp; do
    out=$(run "$how")
    while read -r line; do echo "round $r $how: $line"; done <<<"$out"
    vals[$how.lat]+="$(sed -n 's/.*latency .*one_way_us_median=\([0-9.]*\).*/\1/p' <<<"$out") "
    vals[$how.bw]+="$(sed -n 's/.*bandwidth .*mb_per_s=\([0-9.]*\).*/\1/p' <<<"$out") "
  done
done

echo
echo "| measure (median of $R rounds) | pml ucx, uroce | pml ob1, btl tcp | ratio | goal |"
echo "| --- | --- | --- | --- | --- |"
ratio_row "ping-pong 1 MiB (MB/s)" %.0f "${vals[uroce.bw]}" "${vals[tcp.bw]}" ">= 1.0x"
ratio_row "ping-pong 8 B (us one-way, median)" %.2f "${vals[uroce.lat]}" "${vals[tcp.lat]}" \
  "<= 1.0x"
echo
echo "CPU: $(cpu_model)"
