#!/usr/bin/env bash
# What sealing costs in instructions (issue 44, docs/SECURITY.md "What sealing costs"), which,
# unlike wall-clock figures, do not depend on what else the machine runs: `uroce perf write_bw`
# between two devices on loopback, each process under callgrind, once with aead=off and once
# with aead=encrypt (one pre-shared key). Per setting, per payload byte: the sender's
# Engine::transmit (the datapath's send: copy or seal, ICRC; sendmmsg's kernel work is not
# counted) and the receiver's UdpDatapath::handle_packet (ICRC, open, placing into the MR), and
# per packet the same; then the functions that cost most on each side (self cost), so that
# AES-GCM, the CRC and the copies can be told apart. Release build.
#
# Usage: bench/aead_instructions.sh [SIZE [ITERS]]   (defaults 65536 and 300)
# Environment: SERVER_IP, CLIENT_IP (default 127.0.0.1, 127.0.0.2); UROCE_BIN: a uroce binary
# to measure instead of building build-release/ (another commit's, for a before/after);
# KEEP_DIR: a directory to keep the callgrind outputs in.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/rounds_lib.sh
SIZE=${1:-65536}
N=${2:-300}
SIP=${SERVER_IP:-127.0.0.1}
CIP=${CLIENT_IP:-127.0.0.2}
command -v valgrind >/dev/null || {
  echo "aead_instructions: valgrind (callgrind) is needed" >&2
  exit 2
}
if [[ -z ${UROCE_BIN:-} ]]; then
  release_build uroce uroce-devd
  U=build-release/src/tools/uroce
else
  U=$UROCE_BIN
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
key=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
printf 'srv %s aead=encrypt psk=%s\ncli %s aead=encrypt psk=%s\n' "$SIP" "$key" "$CIP" "$key" \
  >"$tmp/encrypt.conf"
printf 'srv %s\ncli %s\n' "$SIP" "$CIP" >"$tmp/off.conf"

# inclusive FILE FUNCTION: the inclusive instruction count of FUNCTION in a callgrind output.
inclusive() {
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    grep -F "$2" | head -1 | awk '{gsub(",", "", $1); print $1}'
}
bytes=$((SIZE * N))
printf '| setting | sender transmit, instr/byte | receiver handle_packet, instr/byte |\n'
printf '| --- | --- | --- |\n'
for setting in off encrypt; do
  cfg=(-u UROCE_DEVICES UROCE_CONFIG="$tmp/$setting.conf")
  env "${cfg[@]}" valgrind --tool=callgrind --callgrind-out-file="$tmp/rx.$setting" \
    "$U" perf write_bw -s "$SIZE" -n "$N" -u 22 --timeout 600 --ip "$SIP" -p 18517 --json \
    >"$tmp/rx.$setting.json" 2>"$tmp/rx.$setting.err" &
  srv=$!
  env "${cfg[@]}" valgrind --tool=callgrind --callgrind-out-file="$tmp/tx.$setting" \
    "$U" perf write_bw -s "$SIZE" -n "$N" -u 22 --timeout 600 --ip "$CIP" -p 18517 --json \
    --connect_timeout 60 "$SIP" >"$tmp/tx.$setting.json" 2>"$tmp/tx.$setting.err"
  wait $srv
  tx=$(inclusive "$tmp/tx.$setting" 'Engine::transmit(')
  rx=$(inclusive "$tmp/rx.$setting" 'UdpDatapath::handle_packet(')
  awk -v s="$setting" -v t="$tx" -v r="$rx" -v b="$bytes" \
    'BEGIN { printf "| %s | %.3f | %.3f |\n", s, t / b, r / b }'
  [[ -z ${KEEP_DIR:-} ]] || cp "$tmp/tx.$setting" "$tmp/rx.$setting" "$KEEP_DIR/"
done
echo
echo "write_bw -s $SIZE -n $N: $bytes payload bytes. Functions by self cost (top 12):"
for f in tx.off rx.off tx.encrypt rx.encrypt; do
  echo "== $f"
  callgrind_annotate --threshold=100 "$tmp/$f" 2>/dev/null | grep -E '^ *[0-9,]+ ' |
    sed -n 2,13p
done
