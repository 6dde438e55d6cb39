#!/usr/bin/env bash
# Soak (issue 43): mixed traffic on one shared uroce device for DURATION seconds under a fault
# plan, sampled every few seconds; fails on growth that does not level off, a retry-exceeded
# the faults do not explain, a hang or a data error.
#
#   bench/soak.sh DURATION [FAULT_SPEC]       # FAULT_SPEC: UROCE_FAULTS' grammar, default loss=1%
#   UROCE_BUILD=build bench/soak.sh 60        # the tree to take the programs from
#
# Every process opens the same device, SOAK_ADDR (default 127.77.240.1, named `soak`), shared
# through its coordinator (uroce-devd). Faulted processes get UROCE_FAULTS=FAULT_SPEC (the first
# one started also starts the coordinator, whose CM MADs then get the faults too).
# - Long-lived pairs, for the whole DURATION (their RSS and fds are the ones sampled):
#   `uroce perf send_bw` (RC SEND, data checked), ib_read_bw (RC READ), ib_write_bw -c UC and
#   ib_send_bw -c UD (perftest's duration mode), all under the faults.
# - Loops, a new pair of processes per iteration until DURATION is over:
#   uroce_verbs_check (RC SEND, SEND with Immediate, WRITE, WRITE with Immediate, READ, CAS, FAA
#   and UD SEND, every byte checked; faults); rping -V (rdma_cm connect, checked data,
#   disconnect; faults); ucmatose (4 rdma_cm connections each; faults); `uroce ping --chk` (RC;
#   faults); ibv_uc_pingpong and ibv_ud_pingpong --chk (without faults: their protocols cannot
#   recover a lost message); and a kill loop: a `uroce perf` pair (atomic_bw, read_bw,
#   write_bw in turn, faults) whose server or client is SIGKILLed once its counters show
#   traffic: the survivor must fail by itself (not hang) and the device reclaim the victim.
# - A sample every SOAK_SAMPLE_S (5) seconds, a row of samples.csv: RSS and open fds of each
#   long-lived process and of the coordinator, each long-lived process's packets (sent +
#   received), the device's contexts, QPN blocks, QPs and rdma_cm IDs (`uroce stats`), the
#   retry-exceeded errors of the live processes, and each loop's iterations.
#
# It fails (exit 1, the reasons in summary.txt) on:
# - growth: for each RSS, fd, QP and QPN-block series, the maximum of the last third of the
#   samples above the maximum of the middle third by more than a margin (RSS: SOAK_RSS_PCT %
#   (5) + SOAK_RSS_ABS_KB (4096); fds: 2; QPs and QPN blocks: 8, the loops' own coming and
#   going). The first third is warm-up.
# - a retry-exceeded not explained: any retry_exceeded_err in the counters every process writes
#   at exit (UROCE_STATS_FILE) or in a sample, except from a survivor of the kill loop;
# - a hang: a long-lived process whose packet counters do not move for SOAK_HANG_S (90)
#   seconds, a loop that completes no iteration in SOAK_HANG_S, a process its guard had to stop;
# - data errors and every other failure: a process (killed ones and their survivors aside) that
#   exits non-zero or without its success line (the data checks are the programs' own);
# - leftovers: once everything has exited, the coordinator still lists contexts of the run.
#
# Output in SOAK_OUT (default a new /tmp/soak.XXXXXX): samples.csv, summary.txt, logs/ (each
# process's output), stats.txt (the counters at exit). Exit 0 PASS, 1 FAIL, 2 usage/setup.
set -u
# growth_of CSV: a line per series of samples.csv: its first value and the maxima of its middle
# and last thirds, " GROWS" when max(last third) > max(middle third) * (1 + pct/100) + abs.
growth_of() {
  awk -F, -v rp="${SOAK_RSS_PCT:-5}" -v ra="${SOAK_RSS_ABS_KB:-4096}" '
  NR == 1 { for (i = 2; i <= NF; i++) name[i] = $i; nf = NF; next }
  { for (i = 2; i <= nf; i++) if ($i != "") { n[i]++; v[i, n[i]] = $i } }
  END {
    for (i = 2; i <= nf; i++) {
      pct = 0; abs = -1
      if (name[i] ~ /_rss_kb$/) { pct = rp; abs = ra }
      else if (name[i] ~ /_fds$/) abs = 2
      else if (name[i] == "qps" || name[i] == "qpn_blocks") abs = 8
      if (abs < 0 || n[i] < 9) continue
      a = int(n[i] / 3); b = int(2 * n[i] / 3); m2 = 0; m3 = 0
      for (k = a + 1; k <= b; k++) if (v[i, k] + 0 > m2) m2 = v[i, k] + 0
      for (k = b + 1; k <= n[i]; k++) if (v[i, k] + 0 > m3) m3 = v[i, k] + 0
      printf "%s first %s middle_max %d last_max %d%s\n", name[i], v[i, 1], m2, m3,
        (m3 > m2 * (1 + pct / 100) + abs) ? " GROWS" : ""
    }
  }' "$1"
}
# `soak.sh --check-growth CSV`: that analysis alone (status 1 when a series grows).
if [[ ${1:-} == --check-growth ]]; then
  g=$(growth_of "$2") || exit 2
  echo "$g"
  grep -q GROWS <<<"$g" && exit 1
  exit 0
fi
if [[ $# -lt 1 || ! $1 =~ ^[0-9]+$ || $1 -lt 30 ]]; then
  echo "usage: bench/soak.sh DURATION_S (>= 30) [FAULT_SPEC]" >&2
  exit 2
fi
dur=$1
spec=${2:-loss=1%,seed=1}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${UROCE_BUILD:-$root/build-release}
uroce=$build/src/tools/uroce
libdir=$build/compat
vcheck=$build/tests/interop/uroce_verbs_check
addr=${SOAK_ADDR:-127.77.240.1}
dev=soak
sample_s=${SOAK_SAMPLE_S:-5}
hang_s=${SOAK_HANG_S:-90}
port0=${SOAK_PORT:-19400}
out=${SOAK_OUT:-$(mktemp -d /tmp/soak.XXXXXX)}
# A fresh start in a reused SOAK_OUT.
rm -rf "$out/logs" "$out/stop" "$out/failures" "$out/survivors" "$out/kills" "$out/pids" \
  "$out/stats.txt" "$out"/loop.* "$out/samples.csv" "$out/summary.txt"
mkdir -p "$out/logs"
for f in "$uroce" "$build/src/tools/uroce-devd" "$libdir/libibverbs.so.1" "$libdir/librdmacm.so.1" \
  "$vcheck"; do
  [[ -e $f ]] || { echo "soak: $f missing (build it: ninja -C $build uroce uroce-devd" \
    "uroce_ibverbs uroce_rdmacm uroce_verbs_check)" >&2; exit 2; }
done
for p in ib_read_bw ib_write_bw ib_send_bw rping ucmatose ibv_uc_pingpong ibv_ud_pingpong; do
  command -v "$p" >/dev/null || { echo "SKIP: $p is not installed"; exit 77; }
done
# The fault spec is checked before anything starts (`uroce faults` refuses a malformed one
# with status 3 before it looks for the device).
env -u LD_PRELOAD "$uroce" faults -d soak-check-only set "$spec" >/dev/null 2>"$out/spec.err"
if (($? == 3)); then
  echo "soak: bad FAULT_SPEC: $(head -1 "$out/spec.err")" >&2
  exit 2
fi

export LD_LIBRARY_PATH=$libdir
export UROCE_DEVICES="$dev=$addr"
export UROCE_STATS_FILE=$out/stats.txt
# A sanitizer build of the drop-in needs its runtimes preloaded into the programs that load it.
preload=
if readelf -d "$libdir/libibverbs.so.1" | grep -q libtsan; then
  preload=${UROCE_TEST_PRELOAD:-$(gcc -print-file-name=libtsan.so)}
elif readelf -d "$libdir/libibverbs.so.1" | grep -q libasan; then
  preload=${UROCE_TEST_PRELOAD:-$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)}
  # A smaller quarantine than ASan's 256 MiB: its RSS levels off sooner.
  export ASAN_OPTIONS=detect_leaks=0:quarantine_size_mb=16
fi
unset UROCE_FAULTS
q() { env -u LD_PRELOAD "$uroce" "$@"; }
# run FAULTED(0/1) LOG CMD...: CMD in the background on the device ($! is its pid).
run() {
  local f=$1 log=$2
  shift 2
  if ((f)); then
    env LD_PRELOAD="$preload" UROCE_FAULTS="$spec" "$@" >"$log" 2>&1 &
  else
    env LD_PRELOAD="$preload" "$@" >"$log" 2>&1 &
  fi
  echo $! >>"$out/pids"
}
t0=$EPOCHSECONDS
now() { echo $((EPOCHSECONDS - t0)); }
fail() {
  echo "FAIL: $*" >>"$out/failures"
  echo "[$(now)s] FAIL: $*" >&2
}
note() { echo "[$(now)s] $*" >&2; }
# wait_tcp PORT PID: until something listens on TCP PORT, or PID has exited (bounded: 60 s).
# wait_cm PORT PID: the same, until the coordinator lists PID's rdma_cm ID listening on PORT.
tcp_listens() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
cm_listens() {
  q stats 2>/dev/null | grep -Eq "^cm_id $addr:4791 pid $2 ps tcp port $1 state listening"
}
wait_until() { # PID CONDITION ARGS...
  local pid=$1 end=$((EPOCHSECONDS + 60))
  shift
  until "$@"; do
    kill -0 "$pid" 2>/dev/null && ((EPOCHSECONDS < end)) || return 1
    sleep 0.1
  done
}
wait_tcp() { wait_until "$2" tcp_listens "$1"; }
wait_cm() { wait_until "$2" cm_listens "$1" "$2"; }
# wait_pid PID LIMIT_S: PID's exit status, or 124 after LIMIT_S (then it is SIGKILLed: a hang).
wait_pid() {
  local pid=$1 limit=$2 end=$(($(date +%s) + $2))
  while kill -0 "$pid" 2>/dev/null; do
    if (($(date +%s) >= end)); then
      kill -9 "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      return 124
    fi
    sleep 0.2
  done
  wait "$pid"
}

# On exit, every process the run started (their pids in $out/pids) and the loops.
cleanup() {
  touch "$out/stop"
  local j
  for j in $(jobs -p); do kill "$j" 2>/dev/null; done
  # Only a pid still running with this run's environment (not one reused since).
  [[ -f $out/pids ]] && for j in $(cat "$out/pids"); do
    grep -qz "^UROCE_STATS_FILE=$out/stats.txt\$" "/proc/$j/environ" 2>/dev/null && kill -9 "$j" 2>/dev/null
  done
}
trap cleanup EXIT

# ---- long-lived pairs ----
declare -A llpid
ll=()
ll_pair() { # NAME PORT READY(tcp) SERVER... -- CLIENT...
  local name=$1 port=$2
  shift 2
  local s=()
  while [[ $1 != -- ]]; do s+=("$1"); shift; done
  shift
  run 1 "$out/logs/$name.s" "${s[@]}"
  llpid[$name.s]=$!
  wait_tcp "$port" "${llpid[$name.s]}" || { fail "$name server did not start"; }
  run 1 "$out/logs/$name.c" "$@"
  llpid[$name.c]=$!
  ll+=("$name.s" "$name.c")
}
p=$port0
ll_pair rc_send $p "$uroce" perf send_bw -d $dev -D "$dur" -s 4096 -p $p --timeout 120 -u 18 -- \
  "$uroce" perf send_bw -d $dev -D "$dur" -s 4096 -p $p --timeout 120 -u 18 "$addr"
ll_pair rc_read $((p + 1)) ib_read_bw -D "$dur" -s 4096 -u 18 -p $((p + 1)) -- \
  ib_read_bw -D "$dur" -s 4096 -u 18 -p $((p + 1)) "$addr"
ll_pair uc_write $((p + 2)) ib_write_bw -c UC -D "$dur" -s 4096 -p $((p + 2)) -- \
  ib_write_bw -c UC -D "$dur" -s 4096 -p $((p + 2)) "$addr"
ll_pair ud_send $((p + 3)) ib_send_bw -c UD -D "$dur" -s 1024 -p $((p + 3)) -- \
  ib_send_bw -c UD -D "$dur" -s 1024 -p $((p + 3)) "$addr"
note "long-lived: $(for n in "${ll[@]}"; do printf '%s=%s ' "$n" "${llpid[$n]}"; done)"

# ---- loops ----
deadline=$((t0 + dur))
loops=(verbs_check rping ucmatose ping uc_ud kill)
# check_pair NAME I SPID CPID EXPECT LIMIT: both exit 0 within LIMIT and EXPECT is in the logs.
check_pair() {
  local name=$1 i=$2 sp=$3 cp=$4 expect=$5 limit=$6 src crc
  wait_pid "$cp" "$limit"
  crc=$?
  wait_pid "$sp" 30
  src=$?
  if ((src == 124 || crc == 124)); then
    fail "$name iteration $i hung (server $src, client $crc): logs/$name.$i.*"
    return 1
  fi
  if ((src != 0 || crc != 0)) || ! cat "$out/logs/$name.$i".* | grep -Eq -- "$expect"; then
    fail "$name iteration $i failed (server $src, client $crc): logs/$name.$i.*"
    return 1
  fi
  rm -f "$out/logs/$name.$i".*
}
loop() { # NAME
  local name=$1 i=0 port=$((port0 + 10 + $2)) sp cp
  echo 0 >"$out/loop.$name"
  while (($(date +%s) < deadline)) && [[ ! -e $out/stop ]]; do
    i=$((i + 1))
    local L=$out/logs/$name.$i
    case $name in
      verbs_check)
        run 1 "$L.s" "$vcheck" -p $port --timeout 60 -n 3
        sp=$!
        wait_tcp $port $sp
        run 1 "$L.c" "$vcheck" -p $port --timeout 60 -n 3 "$addr"
        cp=$!
        check_pair "$name" $i $sp $cp "^uroce_verbs_check: PASS" 180 ;;
      rping)
        run 1 "$L.s" rping -s -a "$addr" -p $port -C 10 -S 256 -V
        sp=$!
        wait_cm $port $sp
        run 1 "$L.c" rping -c -a "$addr" -p $port -C 10 -S 256 -V -v
        cp=$!
        check_pair "$name" $i $sp $cp "ping data: rdma-ping-9:" 120 ;;
      ucmatose)
        run 1 "$L.s" ucmatose -b "$addr" -p $port -c 4 -C 50
        sp=$!
        wait_cm $port $sp
        run 1 "$L.c" ucmatose -s "$addr" -p $port -c 4 -C 50
        cp=$!
        check_pair "$name" $i $sp $cp "test complete" 120 ;;
      ping)
        run 1 "$L.s" "$uroce" ping -d $dev -c -n 300 -p $port --timeout 60
        sp=$!
        wait_tcp $port $sp
        run 1 "$L.c" "$uroce" ping -d $dev -c -n 300 -p $port --timeout 60 "$addr"
        cp=$!
        check_pair "$name" $i $sp $cp "iters in" 120 ;;
      uc_ud)
        local pp=ibv_uc_pingpong extra=()
        ((i % 2 == 0)) && pp=ibv_ud_pingpong extra=(-s 1024)
        run 0 "$L.s" $pp -g 0 --chk -n 300 -p $port "${extra[@]}"
        sp=$!
        wait_tcp $port $sp
        run 0 "$L.c" $pp -g 0 --chk -n 300 -p $port "${extra[@]}" "$addr"
        cp=$!
        check_pair "$name" $i $sp $cp "iters in" 120 ;;
      kill)
        local tests=(atomic_bw read_bw write_bw) t victim survivor sent=0 rc
        t=${tests[$((i % 3))]}
        # ACK timeout 67 ms (-u 14) and 7 retries: a survivor learns of its peer's death from
        # the closed TCP connection or within ~0.5 s of timeouts. With 3 retries, four timeouts
        # in a row (270 ms) were enough: an atomic_bw client in CI hit retry-exceeded before
        # the kill (the likeliest cause: its peer descheduled that long among the run's twenty
        # ASan processes on two cores; it did not recur in a local run).
        run 1 "$L.s" "$uroce" perf $t -d $dev -D 3600 -p $port --timeout 20 -u 14 --retry_count 7
        sp=$!
        wait_tcp $port $sp
        run 1 "$L.c" "$uroce" perf $t -d $dev -D 3600 -p $port --timeout 20 -u 14 --retry_count 7 "$addr"
        cp=$!
        # Mid-transfer: once the client's counters show 2000 packets sent and received (a
        # read_bw client sends one READ request for many response packets).
        for _ in $(seq 1 600); do
          sent=$(q stats -d $dev 2>/dev/null | awk -v p="$cp" '$1 == "link" && $4 == p {
            for (k = 5; k < NF; k++) if ($k == "sent_pkts" || $k == "rcvd_pkts") n += $(k + 1)
            print n + 0 }')
          ((${sent:-0} >= 2000)) && break
          kill -0 "$cp" 2>/dev/null || break
          sleep 0.1
        done
        if ((${sent:-0} < 2000)) && ! kill -0 "$cp" 2>/dev/null; then
          fail "kill iteration $i: the $t client exited before the kill:" \
            "$(grep -v '^ *$' "$L.c" | tail -1) (logs/$name.$i.*)"
          kill -9 $sp 2>/dev/null
        elif ((${sent:-0} < 2000)); then
          fail "kill iteration $i: $t never started: logs/$name.$i.*"
          kill -9 $sp $cp 2>/dev/null
        else
          if ((i % 2)); then victim=$sp survivor=$cp; else victim=$cp survivor=$sp; fi
          echo "$survivor" >>"$out/survivors"
          kill -9 $victim
          wait $victim 2>/dev/null
          wait_pid $survivor 120
          rc=$?
          if ((rc == 124)); then
            fail "kill iteration $i: the survivor of a SIGKILLed $t peer hung: logs/$name.$i.*"
          elif ((rc == 0)); then
            fail "kill iteration $i: the survivor of a SIGKILLed $t peer exited 0: logs/$name.$i.*"
          else
            echo "$t: SIGKILLed the $( ((i % 2)) && echo server || echo client); the other exited $rc:" \
              "$(grep -v '^ *$' "$L.$( ((i % 2)) && echo c || echo s)" | tail -1)" >>"$out/kills"
            rm -f "$L".*
          fi
        fi ;;
    esac
    echo $i >"$out/loop.$name"
  done
}
k=0
for n in "${loops[@]}"; do
  loop "$n" $k &
  k=$((k + 1))
done

# ---- sampling ----
csv=$out/samples.csv
{
  printf 't_s'
  for n in "${ll[@]}"; do printf ',%s_rss_kb,%s_fds,%s_pkts' "$n" "$n" "$n"; done
  printf ',devd_rss_kb,devd_fds,contexts,qpn_blocks,qps,cm_ids,retry_exc_live,stats_ms'
  for n in "${loops[@]}"; do printf ',%s_iters' "$n"; done
  echo
} >"$csv"
declare -A last_val last_change progress_at cur
progress=0
for n in "${ll[@]}"; do last_change[$n]=$(now); done
for n in "${loops[@]}"; do last_change[loop.$n]=$(now); done
devd=
# mem PID: "RSS_KB,FDS" of PID in $mem, with builtins only (a sample forks little: on a loaded
# machine at SCHED_IDLE every fork is slow).
mem() {
  local k v _ r="" f=(/proc/"$1"/fd/*)
  while read -r k v _; do [[ $k == VmRSS: ]] && r=$v; done <"/proc/$1/status"
  [[ -e ${f[0]} ]] || f=()
  mem="$r,${#f[@]}"
} 2>/dev/null
end_limit=$((t0 + dur + 180))
next=$t0
while :; do
  t=$((EPOCHSECONDS - t0))
  alive=0
  for n in "${ll[@]}"; do kill -0 "${llpid[$n]}" 2>/dev/null && alive=1; done
  ((alive)) || break
  if ((EPOCHSECONDS > end_limit)); then
    fail "long-lived processes still running $((dur + 180)) s after the start"
    break
  fi
  [[ -n $devd ]] && kill -0 "$devd" 2>/dev/null || devd=$(pgrep -f "uroce-devd --ip $addr " | head -1)
  ms0=${EPOCHREALTIME/./}
  # From `uroce stats`, in one pass: each long-lived process's packets (sent + received), and the
  # device's contexts, QPN blocks, QPs, rdma_cm IDs and live retry-exceeded errors; only this
  # run's processes (the members of the device at $addr: another run may have a device of the
  # same name elsewhere).
  declare -A val=()
  while read -r k v; do val[$k]=$v; done < <(q stats -d $dev 2>/dev/null | awk -v a="$addr:4791" '
    function f(name,   k) { for (k = 5; k < NF; k++) if ($k == name) return $(k + 1); return 0 }
    $1 == "member" && $2 == a { m[$4] = 1; ctx++; for (k = 2; k < NF; k++) if ($k == "qpn_blocks") blocks += $(k + 1) }
    $1 == "cm_id" && $2 == a { cms++ }
    $1 == "link" { n++; pid[n] = $4; pk[n] = f("sent_pkts") + f("rcvd_pkts"); q[n] = f("qps"); rx[n] = f("retry_exceeded_err") }
    END {
      for (i = 1; i <= n; i++) if (pid[i] in m) { print "pk" pid[i], pk[i]; qps += q[i]; rex += rx[i] }
      printf "ctx %d\nblocks %d\nqps %d\ncms %d\nrex %d\n", ctx, blocks, qps, cms, rex
    }')
  stats_ms=$(((${EPOCHREALTIME/./} - ms0) / 1000))
  # Progress is judged at the time the counters were read (a stalled process delays the answer).
  t_obs=$((EPOCHSECONDS - t0))
  row=$t
  for n in "${ll[@]}"; do
    pid=${llpid[$n]}
    pk=${val[pk$pid]:-}
    if kill -0 "$pid" 2>/dev/null; then
      mem "$pid"
      row+=",$mem,$pk"
    else
      row+=",,,"
    fi
    [[ -n $pk ]] && cur[$n]=$pk
  done
  # Progress: every long-lived process's packet counters and every loop's iterations move
  # within SOAK_HANG_S. A stall counts only while others progress (in 3 samples at least): when
  # the machine starves everything (SCHED_IDLE under load), nothing is hung.
  for n in "${loops[@]}"; do read -r "cur[loop.$n]" <"$out/loop.$n"; done 2>/dev/null
  moved=0
  for k in "${!cur[@]}"; do [[ ${last_val[$k]:-} != "${cur[$k]}" ]] && moved=1; done
  progress=$((progress + moved))
  for k in "${!cur[@]}"; do
    if [[ ${last_val[$k]:-} != "${cur[$k]}" ]]; then
      last_val[$k]=${cur[$k]} last_change[$k]=$t_obs progress_at[$k]=$progress
    fi
  done
  for k in "${ll[@]}" "${loops[@]/#/loop.}"; do
    if [[ $k == loop.* ]]; then
      ((EPOCHSECONDS < deadline)) || continue
    else
      kill -0 "${llpid[$k]}" 2>/dev/null && ((t_obs < dur - 5)) || continue
    fi
    if ((t_obs - last_change[$k] > hang_s && progress - ${progress_at[$k]:-0} >= 3)); then
      fail "$k made no progress for $((t_obs - last_change[$k])) s while others did (at ${cur[$k]:-?})"
      last_change[$k]=$t_obs progress_at[$k]=$progress
    fi
  done
  if [[ -n $devd ]]; then mem "$devd"; row+=",$mem"; else row+=",,"; fi
  row+=",${val[ctx]:-},${val[blocks]:-},${val[qps]:-},${val[cms]:-},${val[rex]:-},$stats_ms"
  for n in "${loops[@]}"; do row+=",${cur[loop.$n]}"; done
  echo "$row" >>"$csv"
  # Every SOAK_SAMPLE_S from the start, whatever a sample took.
  next=$((next + sample_s))
  while ((EPOCHSECONDS >= next)); do next=$((next + sample_s)); done
  sleep $((next - EPOCHSECONDS))
done

# ---- the end ----
touch "$out/stop"
for n in "${ll[@]}"; do
  wait_pid "${llpid[$n]}" 60
  rc=$?
  if ((rc != 0)); then fail "long-lived $n exited $rc: logs/$n"; fi
done
grep -Eq '^ *4096 +[0-9]+ ' "$out/logs/rc_send.c" || fail "rc_send: no result line"
for n in rc_read uc_write ud_send; do
  grep -Eq '^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+' "$out/logs/$n.c" || fail "$n: no result line"
done
wait_loops_end=$(($(date +%s) + 300))
for j in $(jobs -p); do
  while kill -0 "$j" 2>/dev/null && (($(date +%s) < wait_loops_end)); do sleep 0.5; done
done
for j in $(jobs -p); do kill "$j" 2>/dev/null; done
# The device reclaims everything: no context of the run left once all have exited (the
# coordinator, lingering, may answer with none, or be gone).
left=
for _ in $(seq 1 100); do
  left=$(q stats 2>/dev/null | grep -E "^member $addr:4791 ")
  [[ -z $left ]] && break
  sleep 0.2
done
[[ -z $left ]] || fail "contexts left on the device after the run: $left"
# Retry-exceeded: only survivors of the kill loop may have any.
touch "$out/survivors" "$out/stats.txt"
unexplained=$(awk 'NR == FNR { s[$1] = 1; next }
  $1 == "link" && !($4 in s) { for (k = 5; k < NF; k++) if ($k == "retry_exceeded_err" && $(k + 1) > 0) print $4 }' \
  "$out/survivors" "$out/stats.txt" | sort -u | tr '\n' ' ')
[[ -z $unexplained || -n ${SOAK_RETRY_EXC_OK:-} ]] || fail "retry_exceeded_err of processes the kills do not explain: pids $unexplained"

growth=$(growth_of "$csv")

# ---- summary ----
sumc() { awk -v n="$1" -v k="$2" '$1 == k { for (i = 2; i < NF; i++) if ($i == n) s += $(i + 1) } END { print s + 0 }' "$out/stats.txt"; }
{
  echo "soak: $dur s on $dev ($addr), faults '$spec', build $build"
  echo "samples: $(($(wc -l <"$csv") - 1)) every ${sample_s} s ($csv)"
  echo "iterations: $(for n in "${loops[@]}"; do printf '%s %s  ' "$n" "$(cat "$out/loop.$n")"; done)"
  echo "kills: $(wc -l <"$out/survivors") (survivors failed by themselves)"
  echo "counters at exit (every process but the killed): sent_pkts $(sumc sent_pkts link)" \
    "rcvd_pkts $(sumc rcvd_pkts link) retransmitted_pkts $(sumc retransmitted_pkts link)" \
    "ack_timeouts $(sumc ack_timeouts link) retry_exceeded_err $(sumc retry_exceeded_err link)" \
    "unknown_qpn $(sumc unknown_qpn link) tx_loss $(sumc tx_loss faults) rx_loss $(sumc rx_loss faults)"
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[i] = $i; next } { for (i = 2; i <= NF; i++) if ($i != "") { if (!(i in f)) f[i] = $i; l[i] = $i; if ($i + 0 > mx[i]) mx[i] = $i + 0 } }
    END { for (i = 2; i <= NF; i++) if (h[i] ~ /rss|fds|contexts|qpn_blocks|qps|cm_ids/) printf "%s: first %s last %s max %s\n", h[i], f[i], l[i], mx[i] }' "$csv"
  (($(wc -l <"$csv") > 9)) ||
    echo "growth: NOT JUDGED, fewer than 9 samples (a starved machine: sampling slowed down)"
  echo "growth (max of the last third against the middle third's):"
  echo "$growth" | sed 's/^/  /'
} >"$out/summary.txt"
grep -q GROWS <<<"$growth" && fail "growth that does not level off: $(grep GROWS <<<"$growth" | tr '\n' ';')"
if [[ -s $out/failures ]]; then
  cat "$out/failures" >>"$out/summary.txt"
  echo "FAIL" >>"$out/summary.txt"
  cat "$out/summary.txt"
  exit 1
fi
echo "PASS" >>"$out/summary.txt"
cat "$out/summary.txt"
exit 0
