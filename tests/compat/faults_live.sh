#!/bin/bash
# `uroce faults` on a running program: ib_write_bw between two processes over the drop-in, no
# faults at start; mid-run the client's device gets a partition (`uroce faults -d uroce0 -p PID
# set partition=0s+1h`), which `uroce stats` shows cutting packets off, then `clear` heals it
# and the transfer completes (its QPs' retry budget, 2^18 x 4.096 us x 8 = 8.6 s, outlasts the
# cut). A malformed spec is refused by the command, naming the bad item, and the device keeps
# what it had.
#
#   faults_live.sh LIBDIR UROCE TCP_PORT SERVER_ADDR CLIENT_ADDR
set -u
libdir=$1 uroce=$2 port=$3 saddr=$4 caddr=$5
command -v ib_write_bw >/dev/null || { echo "SKIP: ib_write_bw is not installed"; exit 77; }
export LD_LIBRARY_PATH=$libdir
preload=
if readelf -d "$libdir/libibverbs.so.1" | grep -Eq 'libasan|libtsan'; then
  preload="${UROCE_TEST_PRELOAD:-}"
  export ASAN_OPTIONS=detect_leaks=0
fi
tmp=$(mktemp -d)
spid= cpid=
cleanup() {
  [[ -n $spid ]] && kill "$spid" 2>/dev/null
  [[ -n $cpid ]] && kill "$cpid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in server client; do echo "----- $f"; cat "$tmp/$f" 2>/dev/null; done
  exit 1
}
u() { env -u LD_PRELOAD "$uroce" "$@"; }

UROCE_DEVICES=$saddr LD_PRELOAD=$preload timeout -k 5 120 ib_write_bw -p "$port" -D 10 -u 18 \
  >"$tmp/server" 2>&1 &
spid=$!
for _ in $(seq 1 200); do
  ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
  sleep 0.1
done
UROCE_DEVICES=$caddr LD_PRELOAD=$preload timeout -k 5 120 ib_write_bw -p "$port" -D 10 -u 18 \
  127.0.0.1 >"$tmp/client" 2>&1 &
cpid=$!
# The client's process (timeout's child) once its device serves `uroce stats`.
pid=
for _ in $(seq 1 300); do
  c=$(env -u LD_PRELOAD pgrep -P "$cpid" | head -1)
  if [[ -n $c ]] && u faults -d uroce0 -p "$c" show >"$tmp/show" 2>/dev/null; then
    pid=$c
    break
  fi
  kill -0 "$cpid" 2>/dev/null || break
  sleep 0.1
done
[[ -n $pid ]] || fail "the client's device never answered"
grep -q "pid $pid: (no faults)" "$tmp/show" || fail "faults before any were set: $(cat "$tmp/show")"

# Refused before it reaches the device, naming the item; nothing changes.
if u faults -d uroce0 -p "$pid" set 'loss=1%,partition=2s' 2>"$tmp/err"; then
  fail "a malformed spec was accepted"
fi
grep -q 'partition=2s' "$tmp/err" || fail "the refusal does not name the item: $(cat "$tmp/err")"
u faults -d uroce0 -p "$pid" show | grep -q "(no faults)" || fail "a refused spec changed the faults"

# Wait until the transfer runs (the client's counters move), then cut it off.
for _ in $(seq 1 300); do
  n=$(u stats -d uroce0 | awk -v p="$pid" '$1 == "link" && $4 == p { for (i = 5; i < NF; i++) if ($i == "sent_pkts") print $(i + 1) }')
  ((${n:-0} > 1000)) && break
  sleep 0.1
done
u faults -d uroce0 -p "$pid" set 'partition=0s+3600s,seed=3' >"$tmp/set" || fail "set failed"
grep -q "pid $pid: partition=0s+3600s,seed=3" "$tmp/set" || fail "set answered: $(cat "$tmp/set")"
cut=0
for _ in $(seq 1 300); do
  cut=$(u stats -d uroce0 | awk -v p="$pid" '$1 == "faults" && $4 == p { for (i = 5; i < NF; i++) if ($i == "tx_partition") print $(i + 1) }')
  ((${cut:-0} > 10)) && break
  sleep 0.05
done
((${cut:-0} > 10)) || fail "the partition cut nothing off (tx_partition ${cut:-none})"
u faults -d uroce0 -p "$pid" clear | grep -q "pid $pid: (no faults)" || fail "clear failed"
wait "$cpid"
crc=$?
cpid=
wait "$spid"
src=$?
spid=
((crc == 0 && src == 0)) || fail "the transfer did not complete after the heal (client $crc, server $src)"
grep -Eq '^ *65536 +[0-9]+ ' "$tmp/client" || fail "no result line"
echo "PASS: partitioned mid-run ($cut packets cut off), healed, completed"
