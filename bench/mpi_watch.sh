#!/usr/bin/env bash
# Watches one run of tests/compat/mpi_test.sh at scale (bench/mpi_scale.sh starts it with
# MPI_SCALE_WATCH) for a hang, and when it finds one, keeps the evidence and ends the run.
#
#   bench/mpi_watch.sh MPI_TEST_PID UROCE OUT [QUIET_SECONDS]   # default 60
#
# Every 5 s it reads, in each of the run's namespaces (uroce-mpi43-MPI_TEST_PID-K), every
# device's sent_pkts (`uroce stats`), and each rank's (mpi_check's) state and CPU time
# (utime + stime, /proc/PID/stat), and logs them to OUT/watch.log. A hang is QUIET_SECONDS in
# which no device sent a packet while the ranks were there and got CPU (their CPU time
# advanced): a rank that spins in MPI waiting for a message that never comes, not one that the
# machine's load starves (that is logged as "starved", and the clock of the quiet goes on). Then
# it writes OUT/hang with what it saw, `uroce stats --qp` of every namespace's devices
# (OUT/stats.K) and every rank's threads' stacks (OUT/bt.PID, gdb), sends SIGTERM to the run's
# `timeout` (the process mpi_test.sh started mpirun under: mpirun then ends its ranks) and exits
# 3. It exits 0 when MPI_TEST_PID has ended.
set -u
test_pid=${1:?mpi_test.sh pid} uroce=${2:?uroce} out=${3:?output directory} quiet=${4:-60}
mkdir -p "$out"
log=$out/watch.log

namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^uroce-mpi43-$test_pid-[0-9]+$"; }
# The ranks: mpi_check processes in one of the run's namespaces.
ranks() {
  local ns
  for ns in $(namespaces); do ip netns pids "$ns" 2>/dev/null; done |
    while read -r p; do [[ $(cat "/proc/$p/comm" 2>/dev/null) == mpi_check ]] && echo "$p"; done
}
# cpu PID: utime + stime in clock ticks, and the state (fields after the command's parenthesis).
cpu() { sed -E 's/^.*\) //' "/proc/$1/stat" 2>/dev/null | awk '{print $12 + $13, $1}'; }

declare -A sent
quiet_since=$(date +%s)
declare -A cpu_at_quiet
while kill -0 "$test_pid" 2>/dev/null; do
  now=$(date +%s)
  moved=0 devices=0 total=0
  for ns in $(namespaces); do
    while read -r pid pkts; do
      devices=$((devices + 1)) total=$((total + pkts))
      [[ ${sent[$ns.$pid]:-} == "$pkts" ]] || moved=1
      sent[$ns.$pid]=$pkts
    done < <(ip netns exec "$ns" "$uroce" stats 2>/dev/null | awk '$1 == "link" {
      p = ""; s = ""
      for (i = 2; i < NF; i++) { if ($i == "pid") p = $(i + 1); if ($i == "sent_pkts") s = $(i + 1) }
      if (p != "" && s != "") print p, s }')
  done
  mapfile -t rk < <(ranks)
  states='' cpu_now=0 cpu_moved=0
  declare -A cpu_of=()
  for p in "${rk[@]}"; do
    read -r t st < <(cpu "$p") || continue
    cpu_of[$p]=$t
    states+=$st
    cpu_now=$((cpu_now + t))
  done
  if ((moved || devices == 0 || ${#rk[@]} == 0)); then
    quiet_since=$now
    cpu_at_quiet=()
    for p in "${!cpu_of[@]}"; do cpu_at_quiet[$p]=${cpu_of[$p]}; done
  fi
  # The ranks' CPU time since the quiet began (ranks seen then only).
  for p in "${!cpu_of[@]}"; do
    [[ -n ${cpu_at_quiet[$p]:-} ]] && cpu_moved=$((cpu_moved + cpu_of[$p] - cpu_at_quiet[$p]))
  done
  echo "$(date -u +%T) devices $devices sent_pkts $total ranks ${#rk[@]} states ${states:-none}" \
    "rank_cpu_ticks $cpu_now quiet $((now - quiet_since)) s, rank cpu in it $cpu_moved ticks" >>"$log"
  if ((now - quiet_since >= quiet && devices > 0 && ${#rk[@]} > 0)); then
    if ((cpu_moved == 0)); then
      echo "$(date -u +%T) starved: no packet and no rank CPU for $((now - quiet_since)) s" >>"$log"
    else
      {
        echo "hang at $(date -u +%FT%TZ): no device of the run's namespaces sent a packet for" \
          "$((now - quiet_since)) s, while its ${#rk[@]} ranks used $cpu_moved ticks of CPU"
        for p in "${rk[@]}"; do echo "rank pid $p: $(cpu "$p") (cpu ticks, state)"; done
      } >"$out/hang"
      k=0
      for ns in $(namespaces); do
        ip netns exec "$ns" "$uroce" stats --qp >"$out/stats.$k" 2>&1
        k=$((k + 1))
      done
      for p in "${rk[@]}"; do
        timeout 120 gdb -batch -p "$p" -ex 'thread apply all bt' >"$out/bt.$p" 2>&1
      done
      for p in $(pgrep -P "$test_pid" -x timeout); do kill -TERM "$p"; done
      exit 3
    fi
  fi
  sleep 5
done
exit 0
