// `uroce pcap check` and `uroce pcap dump`: capture verification and decoding, as library
// functions so that tests run them in-process. Output goes to the given streams.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "seal/aead.h"

namespace uroce::tools {

// Exit codes of the pcap commands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitInvalidPackets = 1;
inline constexpr int kExitFileError = 2;

// Decodes every RoCEv2 packet of each file, verifies its ICRC and structure (and, for a packet to
// or from QP 1, that it is one well-formed MAD: see tools/pcap_cm.h), prints per-opcode and
// per-CM-attribute counts and each invalid packet with its reason. Returns kExitInvalidPackets if
// any packet is invalid, kExitFileError if a file cannot be read, else kExitOk.
// Given `key` (--psk, docs/SECURITY.md), every sealed packet's tag is verified too: one that does
// not verify (forged, tampered, or sealed under another key) is invalid.
int pcap_check(const std::vector<std::string>& files, std::FILE* out, std::FILE* err,
               const seal::Key* key = nullptr);

// Prints a per-packet decode of every frame: addresses, opcode, every header field, the AETH
// syndrome decoded, a QP 1 packet's MAD (a CM MAD's every field and private data, with its
// rdma_cm header) and the ICRC status. With FILE.faults beside it (the companion log a device
// with faults writes, device/udp_device.h), each injected fault is a `fault t=...` line among
// the packets, by time: a corrupted packet's BAD ICRC, a dropped one's absence, explained.
// Returns kExitInvalidPackets if any RoCEv2 packet was invalid, kExitFileError if the file
// cannot be read. Given `key`, a sealed packet's tag is verified (one that fails is invalid) and
// the first bytes of its payload in clear shown, decrypted when it was encrypted.
int pcap_dump(const std::string& file, std::FILE* out, std::FILE* err,
              const seal::Key* key = nullptr);

}  // namespace uroce::tools
