// Writes a capture holding one packet for every opcode, over IPv4 and IPv6, with empty, padded
// and full payloads where the opcode allows them. With --corrupt, frame 3's payload is flipped.
// Usage: gen_opcodes_pcap OUT.pcap [--corrupt]
#include <cstdio>
#include <cstring>
#include <vector>

#include "capture/pcap_file.h"
#include "wire/builder.h"

using namespace uroce;
using namespace uroce::wire;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT.pcap [--corrupt]\n", argv[0]);
    return 2;
  }
  const bool corrupt = argc > 2 && std::strcmp(argv[2], "--corrupt") == 0;
  auto w = capture::PcapWriter::open(argv[1]);
  if (!w.ok()) {
    std::fprintf(stderr, "%s\n", w.error().c_str());
    return 2;
  }
  std::uint32_t psn = 0;
  int count = 0;
  for (bool v6 : {false, true}) {
    OuterHeaders o;
    o.src.v6 = o.dst.v6 = v6;
    if (v6) {
      o.src.bytes = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
      o.dst.bytes = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    } else {
      o.src = IpAddress::v4(0x0a630001);
      o.dst = IpAddress::v4(0x0a630002);
    }
    for (Opcode op : kAllOpcodes) {
      const OpcodeInfo& info = opcode_info(op);
      std::vector<std::size_t> sizes = {0};
      if (info.is(kFlagPayload)) {
        sizes = info.is(kFlagFirst) && info.is(kFlagLast) ? std::vector<std::size_t>{0, 3, 1024}
                : info.is(kFlagLast)                      ? std::vector<std::size_t>{1, 1023}
                                                          : std::vector<std::size_t>{1024};
      }
      if (info.is(kFlagAtomicWrite)) sizes = {8};  // its one operand
      for (std::size_t len : sizes) {
        TransportHeaders h;
        h.bth.opcode = info.value;
        h.bth.dest_qpn = 0x11;
        h.bth.psn = psn++;
        h.bth.ack_req = info.is(kFlagLast);
        h.reth = Reth{0x7f0000001000, 0x1234, static_cast<std::uint32_t>(len)};
        h.feth = Feth{kFlushGlobal, kFlushRange};
        h.aeth = Aeth{0x1f, psn};
        h.atomic_eth = AtomicEth{0x7f0000002000, 0x1234, 1, 0};
        h.atomic_ack_orig = 42;
        h.deth = Deth{0x11111111, 0x12};
        h.imm_data = 0xdeadbeef;
        h.ieth_rkey = 0x1234;
        std::vector<std::byte> payload(len);
        for (std::size_t i = 0; i < len; ++i) payload[i] = static_cast<std::byte>(i);
        std::vector<std::byte> frame(8192);
        frame.resize(build_frame(frame, o, h, payload));
        ++count;
        if (corrupt && count == 3) frame[frame.size() - 6] ^= std::byte{0x10};
        w->write(frame, std::int64_t{count} * 1000);
        std::printf("%u\n", unsigned{info.value});
      }
    }
  }
  return 0;
}
