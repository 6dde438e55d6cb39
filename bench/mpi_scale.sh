#!/usr/bin/env bash
# Open MPI at scale over uroce (issue 43): tests/compat/mpi_test.sh with 16 ranks on four network
# namespaces (4 ranks sharing each namespace's uroce0, pml ucx over rc_verbs/ud_verbs, every rank
# a QP to each other rank), the Release drop-ins of build-release/, the project's MPI program
# (tests/compat/mpi_check.c, every result checked) at full size: a ping-pong from 1 B to
# MAX_BYTES between ranks of different namespaces, allreduce up to 1 MiB, alltoall blocks up to
# 64 KiB, BARRIERS barriers. Without loss and with 1% of the packets between namespaces lost
# (uroce's fault stage), alternating, ROUNDS times; prints each run's phase times (mpi_check's
# own, wall-clock) and per condition the medians.
#
#   bench/mpi_scale.sh [ROUNDS] [MAX_BYTES] [BARRIERS]   # defaults 3, 4194304, 1000
#
# Environment: MPI_SCALE_LOSS, the conditions of a round (default "none 1%"; "1%" runs the loss
# condition only); MPI_RANK_ENV, VAR=VALUE pairs for every rank (mpi_test.sh: e.g.
# UCX_ADAPTIVE_PROGRESS=n); MPI_SCALE_WATCH=DIR, each run watched by bench/mpi_watch.sh (a minute
# without a packet from any device while the ranks get CPU is a hang: it keeps every device's
# `uroce stats --qp` and every rank's stacks in DIR/round-R-LOSS and ends the run).
#
# Needs root (network namespaces) and Open MPI with its compiler wrapper (mpicc builds
# mpi_check.c here); namespaces uroce-mpi43-PID-*, addresses 10.143.11.0/24.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/rounds_lib.sh
R=$(rounds_arg mpi_scale "${1:-3}")
MAX=${2:-4194304}
BARRIERS=${3:-1000}
((EUID == 0)) || {
  echo "mpi_scale: needs root (network namespaces)" >&2
  exit 2
}
release_build uroce uroce-devd uroce_ibverbs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/mpi_check" tests/compat/mpi_check.c

declare -A vals
phases=(ping-pong allreduce alltoall barriers total)
read -ra conditions <<<"${MPI_SCALE_LOSS:-none 1%}"
for ((r = 1; r <= R; ++r)); do
  for loss in "${conditions[@]}"; do
    arg=()
    [[ $loss == none ]] || arg=("$loss")
    start=$(date +%s.%N)
    MPI_HOSTS=4 MPI_RANKS_PER_HOST=4 MPI_CHECK_ARGS="$MAX $BARRIERS" MPI_TIMEOUT=900 \
      tests/compat/mpi_test.sh "$PWD/build-release/compat" build-release/src/tools/uroce \
      "$tmp/mpi_check" 10.143.11 "${arg[@]}" >"$tmp/out" 2>&1 &
    run=$!
    watch=
    if [[ -n ${MPI_SCALE_WATCH:-} ]]; then
      bench/mpi_watch.sh "$run" build-release/src/tools/uroce \
        "$MPI_SCALE_WATCH/round-$r-${loss%\%}" &
      watch=$!
    fi
    rc=0
    wait "$run" || rc=$?
    hung=
    if [[ -n $watch ]]; then
      wait "$watch" || hung=" (hung: $MPI_SCALE_WATCH/round-$r-${loss%\%})"
    fi
    if ((rc != 0)); then
      cat "$tmp/out" >&2
      echo "mpi_scale: round $r, loss $loss failed$hung" >&2
      exit 1
    fi
    total=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    # mpi_check's phase lines: "mpi_check: PHASE: ok (T s)".
    t=($(sed -nE 's/^mpi_check: .*: ok \(([0-9.]+) s\)$/\1/p' "$tmp/out"))
    echo "round $r, loss $loss: ping-pong ${t[0]} s, allreduce ${t[1]} s, alltoall ${t[2]} s," \
      "barriers ${t[3]} s; the whole run ${total} s (namespaces, mpirun, 16 MPI_Init)"
    grep -E '^uroce0 at ' "$tmp/out" | sed 's/^/  /'
    for i in 0 1 2 3; do vals[$loss.${phases[i]}]+="${t[i]} "; done
    vals[$loss.total]+="$total "
  done
done
med() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo
echo "| phase (median of $R, s) |$(printf ' %s |' "${conditions[@]}")"
echo "| --- |$(printf ' --- |%.0s' "${conditions[@]}")"
for p in "${phases[@]}"; do
  row="| $p |"
  for loss in "${conditions[@]}"; do row+=" $(med <<<"${vals[$loss.$p]:-}") |"; done
  echo "$row"
done
