#!/usr/bin/env bash
# Fuzzes the wire parser (fuzz/parser_fuzz.cc) for a bounded time.
#
# Usage: scripts/fuzz.sh [SECONDS]     (default 60)
#
# Configures a clang build with ASan, UBSan and libFuzzer coverage in build-fuzz/ (Ninja), builds
# only the fuzz target, replays fuzz/regressions/, seeds a corpus from tests/data/golden/*.pcap
# (scripts/fuzz-seeds.py) and fuzzes. Exits non-zero on any crash, sanitizer report, invariant
# failure, timeout or out-of-memory; the input that caused it is left in build-fuzz/fuzz/artifacts/.
# The working corpus in build-fuzz/fuzz/corpus/ is kept between runs.
#
# Needs clang 14 with compiler-rt (libclang-rt-14-dev), ninja, python3 and the library deps.
set -euo pipefail

seconds="${1:-60}"
if ! [[ "${seconds}" =~ ^[0-9]+$ ]] || [[ "${seconds}" -eq 0 ]]; then
  echo "usage: $0 [SECONDS]" >&2
  exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${root}/build-fuzz"
work="${build}/fuzz"
fuzzer="${work}/parser_fuzz"

# Debug keeps UROCE_ASSERT (the bounds checks in base/bytes.h) on; -O1 makes it fast enough.
cmake -S "${root}" -B "${build}" -G Ninja \
  -DCMAKE_C_COMPILER="${CC:-clang}" -DCMAKE_CXX_COMPILER="${CXX:-clang++}" \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DUROCE_BUILD_FUZZ=ON -DUROCE_BUILD_TESTS=OFF -DUROCE_BUILD_BENCH=OFF >/dev/null
cmake --build "${build}" --target parser_fuzz

mkdir -p "${work}/corpus" "${work}/artifacts"
rm -rf "${work}/seeds"
python3 "${root}/scripts/fuzz-seeds.py" "${work}/seeds"

common=(-artifact_prefix="${work}/artifacts/" -rss_limit_mb=2048 -timeout=10 -max_len=4608)

# Inputs that once failed: each must now run clean.
shopt -s nullglob
regressions=("${root}"/fuzz/regressions/*)
shopt -u nullglob
if ((${#regressions[@]} > 0)); then
  echo "fuzz: replaying ${#regressions[@]} regression input(s)"
  if ! "${fuzzer}" "${common[@]}" "${regressions[@]}" >"${work}/regressions.log" 2>&1; then
    cat "${work}/regressions.log" >&2
    echo "fuzz: FAILED: a regression input fails again (log above)" >&2
    exit 1
  fi
fi

# New inputs go to the first directory (corpus/); seeds/ is only read.
echo "fuzz: fuzzing for ${seconds} s (log: ${work}/fuzz.log)"
status=0
"${fuzzer}" "${common[@]}" -max_total_time="${seconds}" -print_final_stats=1 \
  "${work}/corpus" "${work}/seeds" >"${work}/fuzz.log" 2>&1 || status=$?
if ((status != 0)); then
  tail -n 80 "${work}/fuzz.log" >&2
  echo "fuzz: FAILED (libFuzzer exit status ${status}); reproducer in ${work}/artifacts/" >&2
  exit 1
fi
grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "${work}/fuzz.log" || true
grep -E '^#[0-9]+[[:space:]]+DONE' "${work}/fuzz.log" || true
echo "fuzz: OK, no finding"
