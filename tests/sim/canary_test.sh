#!/usr/bin/env bash
# Runs the canary program (uroce_sim_canary: the simulator's swarm, seeds 1..50, with a responder
# built with UROCE_CANARY, which executes a duplicate atomic a second time) and checks that the
# simulator catches it: some seed must fail, and the failure must be the atomics oracle's.
# Usage: canary_test.sh CANARY_BINARY OUTPUT_FILE
set -euo pipefail
bin=$1 out=$2
set +e
"$bin" > "$out"
rc=$?
set -e
grep -m1 -A1 '^FAIL' "$out" || true
tail -n 1 "$out"
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the canary survived 50 seeds: the simulator does not catch re-executed atomics"
  exit 1
fi
if ! grep -q -e 'not linearizable' -e 'successful atomics' "$out"; then
  echo "FAIL: the canary was caught, but not by the atomics oracle"
  exit 1
fi
echo "PASS: the canary was caught"
