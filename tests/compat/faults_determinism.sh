#!/bin/bash
# Determinism of the fault stage over real processes: ibv_rc_pingpong runs twice with the same
# UROCE_FAULTS (seed included), each side capturing (UROCE_PCAP); the faults injected (the
# captures' companion logs: direction, packet number, kind, class of every injection) must be
# the same in both runs, side by side, and a third run with another seed must differ. The rule
# takes requests only: their sequence is the program's (ACKs may coalesce differently from run
# to run, requests do not), so the stage sees the same packets each time.
#
#   faults_determinism.sh LIBDIR TCP_PORT SERVER_ADDR CLIENT_ADDR
set -u
libdir=$1 port=$2 saddr=$3 caddr=$4
command -v ibv_rc_pingpong >/dev/null || { echo "SKIP: ibv_rc_pingpong is not installed"; exit 77; }
export LD_LIBRARY_PATH=$libdir
if readelf -d "$libdir/libibverbs.so.1" | grep -Eq 'libasan|libtsan'; then
  export LD_PRELOAD="${UROCE_TEST_PRELOAD:-}"
  export ASAN_OPTIONS=detect_leaks=0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() { # NAME SEED
  local d=$tmp/$1
  mkdir -p "$d"
  local spec="dir=tx,class=req,loss=3%,dup=3%,corrupt=1%,seed=$2"
  UROCE_FAULTS=$spec UROCE_DEVICES=$saddr UROCE_PCAP=$d/server.pcap timeout -k 5 120 \
    ibv_rc_pingpong -g 0 --chk -n 300 -p "$port" >"$d/server.log" 2>&1 &
  local spid=$!
  for _ in $(seq 1 200); do
    ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  UROCE_FAULTS=$spec UROCE_DEVICES=$caddr UROCE_PCAP=$d/client.pcap timeout -k 5 120 \
    ibv_rc_pingpong -g 0 --chk -n 300 -p "$port" 127.0.0.1 >"$d/client.log" 2>&1
  local crc=$?
  wait "$spid"
  local src=$?
  if ((src != 0 || crc != 0)); then
    echo "FAIL: run $1: server exit $src, client exit $crc"
    cat "$d/server.log" "$d/client.log"
    exit 1
  fi
  for side in server client; do
    # dir packet kind class (time, QPN and peer differ from run to run)
    grep -v '^#' "$d/$side.pcap.faults" | awk '{ print $2, $3, $4, $5 }' >"$d/$side.faults"
  done
}
run a 9
run b 9
run c 10
for side in server client; do
  n=$(wc -l <"$tmp/a/$side.faults")
  ((n > 0)) || { echo "FAIL: the $side injected nothing"; exit 1; }
  if ! cmp -s "$tmp/a/$side.faults" "$tmp/b/$side.faults"; then
    echo "FAIL: the $side's faults differ between two runs with seed 9"
    diff "$tmp/a/$side.faults" "$tmp/b/$side.faults" | head -20
    exit 1
  fi
  cmp -s "$tmp/a/$side.faults" "$tmp/c/$side.faults" &&
    { echo "FAIL: seeds 9 and 10 gave the $side the same faults"; exit 1; }
  echo "$side: the same $n faults in both runs of seed 9 (seed 10: others)"
done
echo "PASS"
