#!/usr/bin/env bash
# Builder output must pass `uroce pcap check` and be dissected by tshark as RoCEv2 with no
# malformed packet, every opcode where we put it. A corrupted copy must fail the check.
# Usage: tshark_test.sh GEN_OPCODES_PCAP UROCE WORKDIR
set -euo pipefail
gen=$1 uroce=$2 work=$3
mkdir -p "$work"
pcap=$work/opcodes.pcap
"$gen" "$pcap" > "$work/expected_opcodes.txt"
n=$(wc -l < "$work/expected_opcodes.txt")
[ "$n" -gt 100 ] || { echo "FAIL: only $n packets generated"; exit 1; }

"$uroce" pcap check "$pcap" > "$work/check.txt" || { cat "$work/check.txt"; echo "FAIL: pcap check"; exit 1; }
grep -q " 0 invalid" "$work/check.txt"

command -v tshark >/dev/null || { echo "FAIL: tshark is not installed (scripts/install-deps)"; exit 1; }
# Zero-length SENDs trip payload heuristics that guess at upper protocols (RPC-over-RDMA on RC,
# Mellanox EoIB on UD): they are not ours, so disable them. (tshark also flags the IPv6 UDP
# checksum 0 that RoCEv2 senders use as an expert error; that is not a malformed packet.)
ts=(tshark -n -r "$pcap" --disable-heuristic rpcrdma_infiniband --disable-heuristic mellanox_eoib)
malformed=$("${ts[@]}" -Y '_ws.malformed' 2>"$work/tshark.err") \
  || { cat "$work/tshark.err"; echo "FAIL: tshark failed"; exit 1; }
if [ -n "$malformed" ]; then
  echo "FAIL: tshark reports malformed packets:"; echo "$malformed"; exit 1
fi
"${ts[@]}" -T fields -e infiniband.bth.opcode -Y infiniband > "$work/tshark_opcodes.txt" 2>/dev/null
if ! diff -u "$work/expected_opcodes.txt" "$work/tshark_opcodes.txt"; then
  echo "FAIL: tshark's opcodes differ from what was built"; exit 1
fi
# Wireshark dissects UDP 4791 as RoCEv2 ("RRoCE"): check one field deep inside, the RETH length.
"${ts[@]}" -Y 'infiniband.bth.opcode == 10' -T fields -e infiniband.reth.dmalen 2>/dev/null | sort -u \
  > "$work/reth_len.txt"
grep -qx "1024\|1024 (0x00000400)\|0x00000400" "$work/reth_len.txt" || { cat "$work/reth_len.txt"; echo "FAIL: RETH DMA length"; exit 1; }

# The same capture with one flipped payload bit fails the check with an ICRC reason.
"$gen" "$work/corrupt.pcap" --corrupt > /dev/null
set +e
"$uroce" pcap check "$work/corrupt.pcap" > "$work/corrupt.txt"
rc=$?
set -e
[ "$rc" -eq 1 ] || { cat "$work/corrupt.txt"; echo "FAIL: exit $rc for a corrupted capture"; exit 1; }
grep -q "frame 3: invalid: bad_icrc" "$work/corrupt.txt"
echo "PASS: $n packets, tshark clean, opcodes match"
