// `uroce pcap` and a FLUSH with the kernel's Soft-RoCE's form of the ICRC (docs/INTEROP.md,
// "FLUSH and rxe"); the rest of `uroce pcap` is pcap_cmd_test.cc's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "capture/pcap_file.h"
#include "tools/pcap_cmd.h"
#include "wire/builder.h"
#include "wire/icrc.h"

namespace uroce::tools {
namespace {

// What a command printed to `f` (a tmpfile), read back from its start.
std::string read_back(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  for (int c = std::fgetc(f); c != EOF; c = std::fgetc(f)) text += static_cast<char>(c);
  std::fclose(f);
  return text;
}

// The frame `f` (Ethernet, IPv4) with rxe's form of the ICRC.
std::vector<std::byte> with_rxe_icrc(std::vector<std::byte> f) {
  const std::size_t ip = wire::kEthernetBytes;
  const MutBytes roce = MutBytes(f).subspan(ip + 28);
  const std::size_t n = roce.size() - wire::kIcrcBytes;
  store_le32(roce, n, wire::icrc_rxe_compute(ConstBytes(f).subspan(ip, 28), roce.first(n)));
  return f;
}

// `check` counts a FLUSH with rxe's ICRC as valid, apart, and `dump` names it; that form on an
// ATOMIC WRITE, and a corrupted FLUSH, are bad ICRCs.
TEST(PcapCheck, RxesFlushIcrcIsValidAndNamedButOnlyOnAFlush) {
  wire::OuterHeaders o;
  o.src = wire::IpAddress::v4(0x0a7b0002);
  o.dst = wire::IpAddress::v4(0x0a7b0001);
  o.ipv4_id = 0x4321;
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcFlush);
  h.bth.dest_qpn = 0x11;
  h.feth = wire::Feth{wire::kFlushGlobal, wire::kFlushRange};
  h.reth = wire::Reth{0x7f0000001000, 0x1234, 64};
  std::vector<std::byte> flush(256);
  flush.resize(wire::build_frame(flush, o, h, {}));
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcAtomicWrite);
  const std::vector<std::byte> value(8, std::byte{0x5a});
  std::vector<std::byte> aw(256);
  aw.resize(wire::build_frame(aw, o, h, value));
  std::vector<std::byte> corrupted = with_rxe_icrc(flush);
  corrupted[wire::kEthernetBytes + 28 + 20] ^= std::byte{0x01};  // the RETH's address
  const auto dir = std::filesystem::temp_directory_path();
  const std::string tag = std::to_string(::getpid());
  const std::string good = dir / ("uroce_rxe_flush_" + tag + ".pcap");
  const std::string bad = dir / ("uroce_rxe_bad_" + tag + ".pcap");
  for (const auto& [path, frames] : {std::pair{good, std::vector{with_rxe_icrc(flush), flush}},
                                     std::pair{bad, std::vector{with_rxe_icrc(aw), corrupted}}}) {
    auto w = capture::PcapWriter::open(path, 1);
    ASSERT_TRUE(w.ok());
    for (const auto& f : frames) w->write(f, 0);
  }

  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  ASSERT_TRUE(out != nullptr && err != nullptr);
  EXPECT_EQ(pcap_check({good}, out, err), kExitOk);
  const std::string checked = read_back(out);
  EXPECT_EQ(read_back(err), "");
  EXPECT_NE(checked.find("2 frames, 2 valid RoCEv2, 0 invalid, 0 other traffic, 1 with rxe's "
                         "FLUSH ICRC"),
            std::string::npos)
      << checked;

  out = std::tmpfile();
  err = std::tmpfile();
  EXPECT_EQ(pcap_dump(good, out, err), kExitOk);
  const std::string dumped = read_back(out);
  EXPECT_NE(dumped.find("ok: rxe FLUSH ICRC (the IBTA's would be 0x"), std::string::npos) << dumped;
  EXPECT_EQ(dumped.find("BAD"), std::string::npos) << dumped;
  std::fclose(err);

  out = std::tmpfile();
  err = std::tmpfile();
  EXPECT_EQ(pcap_check({bad}, out, err), kExitInvalidPackets);
  const std::string refused = read_back(out);
  EXPECT_NE(refused.find("frame 1: invalid: bad_icrc"), std::string::npos) << refused;
  EXPECT_NE(refused.find("frame 2: invalid: bad_icrc"), std::string::npos) << refused;
  std::fclose(err);
  std::filesystem::remove(good);
  std::filesystem::remove(bad);
}

}  // namespace
}  // namespace uroce::tools
