#!/usr/bin/env bash
# UCX over uroce against UCX over its own TCP transport, measured side by side in one run
# (issue 16): Debian's ucx_perftest (UCX 1.13) between two processes on loopback,
#   - ucp_put_bw -s 1048576 (bandwidth, MB/s): uroce (UCX_TLS=rc_verbs,ud_verbs on uroce0:1,
#     the drop-in libibverbs.so.1 of build-release/) against UCX_TLS=tcp on lo;
#   - tag_lat -s 8 (one-way latency, us; the typical value, UCX's 50th percentile): the same two.
# The two transports alternate ROUNDS times (default 3) so that a drift of the machine's speed
# touches both; the table gives each one's median over the rounds and the ratios.
# Each pair of processes is pinned to CPUs 0 and 1 where the host has two. Needs root once for
# `uroce setup` (the /dev/infiniband/uverbs0 link UCX looks for).
#
# Usage: bench/ucx_bench.sh [ROUNDS]
# Environment: SERVER_IP, CLIENT_IP (default 127.0.0.1, 127.0.0.2) for uroce's devices.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/rounds_lib.sh
R=$(rounds_arg ucx_bench "${1:-3}")
SIP=${SERVER_IP:-127.0.0.1}
CIP=${CLIENT_IP:-127.0.0.2}

release_build uroce uroce-devd uroce_ibverbs
U=build-release/src/tools/uroce
LIB=$(cd build-release/compat && pwd)
"$U" setup >/dev/null

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cpu0=() cpu1=()
if (($(nproc) >= 2)) && command -v taskset >/dev/null; then
  cpu0=(taskset -c 0) cpu1=(taskset -c 1)
fi
# Nothing from the user's UCX configuration.
unset UCX_TLS UCX_NET_DEVICES

port=18990
# One ucx_perftest pair; prints the client's "Final:" line.
perftest() { # uroce|tcp TEST SIZE ITERS
  local how=$1 test=$2 size=$3 iters=$4 env_s env_c
  port=$((port == 18999 ? 18990 : port + 1))
  if [[ $how == uroce ]]; then
    env_s=(env "LD_LIBRARY_PATH=$LIB" "UROCE_DEVICES=uroce0=$SIP" UCX_TLS=rc_verbs,ud_verbs
      UCX_NET_DEVICES=uroce0:1)
    env_c=(env "LD_LIBRARY_PATH=$LIB" "UROCE_DEVICES=uroce0=$CIP" UCX_TLS=rc_verbs,ud_verbs
      UCX_NET_DEVICES=uroce0:1)
  else
    env_s=(env UCX_TLS=tcp UCX_NET_DEVICES=lo)
    env_c=("${env_s[@]}")
  fi
  "${env_s[@]}" "${cpu0[@]}" timeout 120 ucx_perftest -p "$port" >"$tmp/server" 2>&1 &
  local srv=$!
  for _ in $(seq 300); do
    ss -Hltn "sport = :$port" | grep -q . && break
    sleep 0.05
  done
  "${env_c[@]}" "${cpu1[@]}" timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$test" \
    -s "$size" -n "$iters" >"$tmp/client" 2>&1 || {
    cat "$tmp/client" >&2
    echo "ucx_bench: ucx_perftest over $how failed" >&2
    exit 1
  }
  wait "$srv" || true
  grep '^Final:' "$tmp/client"
  devd_gone "$SIP" "$CIP"
}

declare -A vals
for ((r = 1; r <= R; ++r)); do
  for how in uroce tcp; do
    # Final: iterations, overhead 50%, avg, overall (us), bandwidth avg, overall (MB/s), ...
    line=$(perftest "$how" ucp_put_bw 1048576 500)
    echo "round $r $how ucp_put_bw 1MiB: $line"
    vals[$how.bw]+="$(awk '{print $7}' <<<"$line") "
    line=$(perftest "$how" tag_lat 8 100000)
    echo "round $r $how tag_lat 8B: $line"
    vals[$how.lat]+="$(awk '{print $3}' <<<"$line") "
  done
done

echo
echo "| measure (median of $R rounds) | uroce (rc_verbs) | UCX tcp | ratio | goal |"
echo "| --- | --- | --- | --- | --- |"
ratio_row "ucp_put_bw 1 MiB (MB/s)" %.0f "${vals[uroce.bw]}" "${vals[tcp.bw]}" ">= 1.0x"
ratio_row "tag_lat 8 B (us, typical)" %.2f "${vals[uroce.lat]}" "${vals[tcp.lat]}" "<= 1.0x"
echo
echo "CPU: $(cpu_model)"
