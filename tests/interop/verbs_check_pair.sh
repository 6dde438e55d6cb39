#!/bin/bash
# Runs uroce_verbs_check as a server and a client, two processes on one host, each on its own
# uroce device, over the drop-in libibverbs.so.1 in LIBDIR.
#
#   verbs_check_pair.sh PROGRAM LIBDIR TCP_PORT SERVER_ADDR CLIENT_ADDR TIMEOUT_S \
#                       SERVER_RC CLIENT_RC REGEX -- ARGS... [--client CLIENT_ONLY_ARGS...]
#
# Both sides get ARGS (and --timeout, below TIMEOUT_S); the client also CLIENT_ONLY_ARGS and the
# server's address. Passes when the server exits SERVER_RC, the client CLIENT_RC (timeout(1)
# bounds each), REGEX (grep -E) matches either side's output and, when both are to pass, both
# outputs end in the PASS line. Prints both outputs when it fails.
# With VC_UROCE naming the uroce tool, the server's device captures every packet (UROCE_PCAP),
# `uroce pcap check` must accept the capture (ICRC and structure of every packet), and, when
# VC_PCAP_EXPECT is set, `uroce pcap dump` must match that regex (e.g. RNR NAKs were sent).
set -u
prog=$1 libdir=$2 port=$3 saddr=$4 caddr=$5 limit=$6 want_src=$7 want_crc=$8 regex=$9
shift 9
[ "${1:-}" = "--" ] && shift
common=() client_only=()
while [ $# -gt 0 ] && [ "$1" != "--client" ]; do common+=("$1"); shift; done
[ "${1:-}" = "--client" ] && shift && client_only=("$@")

export LD_LIBRARY_PATH=$libdir
if readelf -d "$libdir/libibverbs.so.1" | grep -Eq 'libasan|libtsan'; then
  export LD_PRELOAD="${UROCE_TEST_PRELOAD:-}"
  export ASAN_OPTIONS=detect_leaks=0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Each step's own bound stays below the run's, so a hang is reported by the program itself.
step=$((limit / 2))
capture=()
[ -n "${VC_UROCE:-}" ] && capture=(UROCE_PCAP="$tmp/server.pcap")
env "${capture[@]}" UROCE_DEVICES=$saddr timeout -k 5 "$limit" "$prog" -p "$port" --timeout "$step" \
  "${common[@]}" >"$tmp/server" 2>&1 &
spid=$!
# Wait (bounded) until the server listens (the client would also retry on its own).
for _ in $(seq 1 200); do
  ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.1
done
UROCE_DEVICES=$caddr timeout -k 5 "$limit" "$prog" -p "$port" --timeout "$step" \
  "${common[@]}" "${client_only[@]}" 127.0.0.1 >"$tmp/client" 2>&1
crc=$?
wait "$spid"
src=$?

ok=1
[ "$src" -eq "$want_src" ] && [ "$crc" -eq "$want_crc" ] || ok=0
cat "$tmp/server" "$tmp/client" | grep -Eq -- "$regex" || ok=0
if [ "$want_src" -eq 0 ] && [ "$want_crc" -eq 0 ]; then
  for side in server client; do
    tail -1 "$tmp/$side" | grep -Eq '^uroce_verbs_check: PASS [0-9]+ checks$' || ok=0
  done
fi
pcap_note=""
if [ -n "${VC_UROCE:-}" ] && [ "$want_src" -eq 0 ]; then
  if ! "$VC_UROCE" pcap check "$tmp/server.pcap" >"$tmp/check" 2>&1; then
    ok=0 pcap_note="uroce pcap check rejected the server's capture: $(tail -5 "$tmp/check")"
  elif [ -n "${VC_PCAP_EXPECT:-}" ] &&
    ! "$VC_UROCE" pcap dump "$tmp/server.pcap" 2>&1 | grep -Eq -- "$VC_PCAP_EXPECT"; then
    ok=0 pcap_note="the server's capture has no packet matching '$VC_PCAP_EXPECT'"
  else
    pcap_note="capture: $(grep -c . "$tmp/check") lines from uroce pcap check, no error"
  fi
fi
if [ "$ok" -ne 1 ]; then
  [ -n "$pcap_note" ] && echo "$pcap_note"
  echo "FAIL: uroce_verbs_check ${common[*]} (server exit $src, wanted $want_src; client" \
    "${client_only[*]} exit $crc, wanted $want_crc; 124 = timed out after ${limit}s)"
  echo "----- server (UROCE_DEVICES=$saddr) -----"
  cat "$tmp/server"
  echo "----- client (UROCE_DEVICES=$caddr) -----"
  cat "$tmp/client"
  exit 1
fi
echo "PASS: uroce_verbs_check ${common[*]} / client ${client_only[*]}"
[ -n "$pcap_note" ] && echo "$pcap_note"
echo "----- client -----"
cat "$tmp/client"
exit 0
