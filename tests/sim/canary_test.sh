#!/usr/bin/env bash
# Builds uroce with -DUROCE_CANARY=ON (the responder executes a duplicate atomic a second time)
# and checks that the simulator catches it: some seed of the fixed list must fail, and the
# failure must be the atomics oracle's.
# Usage: canary_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUROCE_CANARY=ON \
  -DUROCE_BUILD_TESTS=OFF -DUROCE_BUILD_BENCH=OFF -DUROCE_BUILD_FUZZ=OFF > "$build.log"
ninja -C "$build" uroce >> "$build.log"
set +e
"$build/src/tools/uroce" sim --seed 1 --swarm 50 > "$build/canary.out"
rc=$?
set -e
grep -m1 -A1 '^FAIL' "$build/canary.out" || true
tail -n 1 "$build/canary.out"
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the canary survived 50 seeds: the simulator does not catch re-executed atomics"
  exit 1
fi
if ! grep -q -e 'not linearizable' -e 'successful atomics' "$build/canary.out"; then
  echo "FAIL: the canary was caught, but not by the atomics oracle"
  exit 1
fi
echo "PASS: the canary was caught"
