#!/usr/bin/env bash
# Runs a canary program (uroce_sim_canary: the simulator's swarm, seeds 1..50, with a responder
# built with UROCE_CANARY, which executes a duplicate atomic a second time; or another canary
# with its own bug) and checks that the simulator catches it: some seed must fail, and the
# failure must be the named oracle's.
# Usage: canary_test.sh CANARY_BINARY OUTPUT_FILE [SWARM PATTERN WHAT]
#   PATTERN (grep -e, '|' between alternatives) must match the failure; WHAT names the bug.
#   Without them: 50 seeds, the atomics oracle, re-executed atomics.
set -euo pipefail
bin=$1 out=$2
swarm=${3:-50}
pattern=${4:-'not linearizable|successful atomics'}
what=${5:-'re-executed atomics'}
set +e
"$bin" "$swarm" > "$out"
rc=$?
set -e
grep -m1 -A1 '^FAIL' "$out" || true
tail -n 1 "$out"
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the canary survived $swarm seeds: the simulator does not catch $what"
  exit 1
fi
if ! grep -q -E "$pattern" "$out"; then
  echo "FAIL: the canary was caught, but not by the oracle for $what"
  exit 1
fi
echo "PASS: the canary was caught"
