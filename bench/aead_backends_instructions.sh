#!/usr/bin/env bash
# Instructions per packet of each library's AES-GCM seal and open (bench/aead_bench.cc's
# libraries and packets), counted by callgrind, which a loaded machine does not distort: per
# library, operation and payload size, `aead_bench --loop` runs N1 and then N2 packets, and the
# difference of the two totals over N2 - N1 is one packet's cost, start-up excluded.
#
# Valgrind runs the code paths its own CPU model offers (no VAES or VPCLMULQDQ on 256-bit
# registers, no AVX-512), so a library that would use those natively is counted on its AES-NI
# path here: read these figures with the Google Benchmark rows, which run natively.
#
# Usage: bench/aead_backends_instructions.sh [BITS [N1 N2]]   (defaults 256, 20, 220)
# Environment: AEAD_BENCH: the aead_bench binary (default build-release/bench/aead_bench).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BITS=${1:-256}
N1=${2:-20}
N2=${3:-220}
B=${AEAD_BENCH:-build-release/bench/aead_bench}
command -v valgrind >/dev/null || {
  echo "aead_backends_instructions: valgrind (callgrind) is needed" >&2
  exit 2
}
[[ -x $B ]] || {
  echo "aead_backends_instructions: no $B (ninja -C build-release aead_bench)" >&2
  exit 2
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# total LIB OP SIZE N: the instructions callgrind counted in one run of N packets.
# Fails quietly when the library has no such key (aead_bench's status 2; libsodium: AES-256 only).
total() {
  local rc=0
  valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$B" --loop "$1" "$2" "$BITS" "$3" \
    "$4" >/dev/null 2>"$tmp/err" || rc=$?
  ((rc != 2)) || return 2
  if ((rc != 0)); then
    cat "$tmp/err" >&2
    return 1
  fi
  awk '/^(summary|totals):/ { print $2; exit }' "$tmp/out"
}

sizes=(8 256 1024 4096)
echo "AES-$BITS-GCM, instructions per packet (callgrind; $N2 - $N1 packets):"
echo "| library | $(for s in "${sizes[@]}"; do printf '%s B seal | %s B open | ' "$s" "$s"; done | sed 's/ | $//') |"
echo "| --- |$(for s in "${sizes[@]}"; do printf ' --- | --- |'; done)"
for lib in uroce evp gcrypt sodium nettle; do
  row="| $lib |"
  for size in "${sizes[@]}"; do
    for op in seal open; do
      if a=$(total "$lib" "$op" "$size" "$N1") && b=$(total "$lib" "$op" "$size" "$N2"); then
        row+=" $(((b - a) / (N2 - N1))) |"
      else
        row+=" - |"
      fi
    done
  done
  echo "$row"
done
