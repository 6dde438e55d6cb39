#!/bin/bash
# PROGRAM for tests/compat/run_pair.sh in run_test.sh: runs its arguments' program through
# `uroce run --ip RUN_IP --`, with the sanitizer runtimes of a sanitizer build preloaded.
#   RUN_UROCE=path RUN_IP=addr RUN_PROGRAM=prog run_wrap.sh ARGS...
if [ -n "${UROCE_TEST_PRELOAD:-}" ]; then
  export LD_PRELOAD=$UROCE_TEST_PRELOAD ASAN_OPTIONS=detect_leaks=0
fi
exec "$RUN_UROCE" run --ip "$RUN_IP" -- "$RUN_PROGRAM" "$@"
