#!/usr/bin/env bash
# The datapath's throughput and packet rate beside raw UDP, on loopback, in one run:
# bench/udp_baseline (raw UDP: GSO or sendmmsg, ping-pong, packet rate) and bench/datapath_bench
# (RoCE packets through datapath/udp: unbatched, sendmmsg, GSO+GRO), interleaved so that load
# from other processes falls on every row alike. Prints a table of medians (bench/udp_report.py).
#
# Usage: scripts/bench-udp.sh [rounds (default 5)] [seconds per run (default 2)]
# Builds in build-release/ (Release, sanitizers off) and leaves the raw JSON lines in
# build-release/bench/udp.jsonl.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${root}/build-release"
rounds="${1:-5}"
seconds="${2:-2}"

# The compilers as scripts/demo and bench/net_bench.sh give them: CMake drops a cache configured
# with other compiler paths, and the values given with it (the build type among them).
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
  -DCMAKE_C_COMPILER_LAUNCHER=ccache)
configure() {
  cmake -S "${root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUROCE_SANITIZE=OFF \
    -DCMAKE_C_COMPILER="${CC:-gcc}" -DCMAKE_CXX_COMPILER="${CXX:-g++}" \
    -DUROCE_BUILD_TESTS=OFF -DUROCE_BUILD_FUZZ=OFF -DUROCE_BUILD_BENCH=ON "${launcher[@]}" \
    >/dev/null 2>&1
}
configure
# After a compiler change CMake re-runs from an empty cache without the values above: once more.
grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "${build}/CMakeCache.txt" || configure
if ! grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "${build}/CMakeCache.txt"; then
  echo "bench-udp: ${build} is not a Release build; remove it and rerun" >&2
  exit 1
fi
cmake --build "${build}" --target udp_baseline datapath_bench

out="${build}/bench/udp.jsonl"
: >"${out}"
ub="${build}/bench/udp_baseline"
db="${build}/bench/datapath_bench"
# 4112 bytes = an RDMA WRITE Middle packet at MTU 4096 (BTH 12 + payload 4096 + ICRC 4);
# 64 bytes = a WRITE Only with 32 bytes of payload (BTH 12 + RETH 16 + 32 + ICRC 4).
runs=(
  "udp bw gso|${ub} bw --mode gso --segment 4112 --seconds ${seconds}"
  "udp bw mmsg|${ub} bw --mode mmsg --segment 4112 --seconds ${seconds}"
  "datapath single|${db} --mode single --mtu 4096 --message 65536 --seconds ${seconds}"
  "datapath mmsg|${db} --mode mmsg --mtu 4096 --message 65536 --seconds ${seconds}"
  "datapath gso|${db} --mode gso --mtu 4096 --message 65536 --seconds ${seconds}"
  "datapath gso 1MiB|${db} --mode gso --mtu 4096 --message 1048576 --seconds ${seconds}"
  "udp pps 64B|${ub} pps --size 64 --batch 32 --seconds ${seconds}"
  "datapath single 64B|${db} --mode single --message 32 --seconds ${seconds}"
  "datapath mmsg 64B|${db} --mode mmsg --message 32 --seconds ${seconds}"
  "udp pingpong 8B|${ub} pingpong --iters 100000 --size 8"
)
for ((r = 1; r <= rounds; r++)); do
  for run in "${runs[@]}"; do
    label="${run%%|*}"
    cmd="${run#*|}"
    json="$(${cmd})"
    echo "round ${r}: ${label}: ${json}" >&2
    echo "{\"label\":\"${label}\",\"result\":${json}}" >>"${out}"
  done
done
echo
echo "CPU: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), nproc $(nproc)," \
  "kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "${root}/bench/udp_report.py" "${out}"
