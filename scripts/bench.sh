#!/usr/bin/env bash
# Runs the ICRC benchmark (bench/icrc_bench.cc) from a Release build and prints ICRC and plain
# CRC-32 throughput beside memcpy of the same bytes, with the ratios.
#
# Usage: scripts/bench.sh [extra Google Benchmark flags]
#   UROCE_BENCH_REPETITIONS (default 20) repetitions; the report uses their median.
#
# Builds in build-release/ (Ninja, -DCMAKE_BUILD_TYPE=Release, sanitizers, tests and fuzzing off)
# and leaves the raw results in build-release/bench/icrc_bench.json.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${root}/build-release"
repetitions="${UROCE_BENCH_REPETITIONS:-20}"

cmake -S "${root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUROCE_SANITIZE=OFF \
  -DUROCE_BUILD_TESTS=OFF -DUROCE_BUILD_FUZZ=OFF -DUROCE_BUILD_BENCH=ON >/dev/null
cmake --build "${build}" --target icrc_bench

json="${build}/bench/icrc_bench.json"
"${build}/bench/icrc_bench" --benchmark_repetitions="${repetitions}" \
  --benchmark_report_aggregates_only=true --benchmark_min_time=0.2 \
  --benchmark_enable_random_interleaving=true \
  --benchmark_out="${json}" --benchmark_out_format=json "$@"
echo
echo "CPU: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), nproc $(nproc)"
python3 "${root}/bench/icrc_report.py" "${json}"
