#include "tools/pcap_cmd.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "capture/pcap_file.h"
#include "support/golden.h"
#include "wire/builder.h"

namespace uroce::tools {
namespace {

// Captures what a command prints to a FILE*.
class Output {
 public:
  Output() : f_(open_memstream(&buf_, &len_)) {}
  ~Output() {
    if (f_ != nullptr) std::fclose(f_);
    std::free(buf_);
  }
  std::FILE* file() { return f_; }
  std::string text() {
    std::fflush(f_);
    return std::string(buf_, len_);
  }

 private:
  char* buf_ = nullptr;
  std::size_t len_ = 0;
  std::FILE* f_;
};

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("uroce_tools_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

void write_pcap(const std::string& path, const std::vector<std::vector<std::byte>>& frames,
                int link_type = 1) {
  auto w = capture::PcapWriter::open(path, link_type);
  ASSERT_TRUE(w.ok());
  for (const auto& f : frames) w->write(f, 0);
}

TEST(PcapCheck, EveryGoldenCaptureIsValid) {
  Output out, err;
  EXPECT_EQ(pcap_check(test::golden_files(), out.file(), err.file()), kExitOk);
  const std::string text = out.text();
  EXPECT_NE(text.find("total: 6828 frames, 6828 valid RoCEv2, 0 invalid, 0 other traffic"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("0x14 RC Fetch & Add"), std::string::npos);
  EXPECT_NE(text.find("0x12 RC Atomic Acknowledge"), std::string::npos);
  EXPECT_EQ(err.text(), "");
}

TEST(PcapCheck, CorruptedPacketFailsWithItsFrameAndReason) {
  auto frames = test::load_frames(test::data_dir() + "/golden/rdma_write_bw.pcap");
  std::vector<std::vector<std::byte>> bytes;
  for (const auto& f : frames) bytes.push_back(f.bytes);
  bytes[4][100] ^= std::byte{0x01};      // payload bit of frame 5
  bytes[6].resize(bytes[6].size() - 3);  // frame 7 cut short, as if truncated in flight
  const std::string path = temp_path("corrupt.pcap");
  write_pcap(path, bytes);
  Output out, err;
  EXPECT_EQ(pcap_check({path}, out.file(), err.file()), kExitInvalidPackets);
  const std::string text = out.text();
  EXPECT_NE(text.find("frame 5: invalid: bad_icrc (ICRC mismatch)"), std::string::npos) << text;
  EXPECT_NE(text.find("frame 7: invalid: bad_ip_length"), std::string::npos) << text;
  EXPECT_NE(text.find("250 frames, 248 valid RoCEv2, 2 invalid"), std::string::npos) << text;
  std::filesystem::remove(path);
}

TEST(PcapCheck, OtherTrafficIsCountedNotFailed) {
  auto frames = test::load_frames(test::data_dir() + "/golden/rc_send_only.pcap");
  std::vector<std::byte> arp(60, std::byte{0});
  store_be16(arp, 12, 0x0806);
  std::vector<std::byte> dns = frames[0].bytes;
  store_be16(dns, 36, 53);  // UDP destination port
  const std::string path = temp_path("mixed.pcap");
  write_pcap(path, {frames[0].bytes, arp, dns});
  Output out, err;
  EXPECT_EQ(pcap_check({path}, out.file(), err.file()), kExitOk);
  EXPECT_NE(out.text().find("3 frames, 1 valid RoCEv2, 0 invalid, 2 other traffic"),
            std::string::npos)
      << out.text();
  std::filesystem::remove(path);
}

TEST(PcapCheck, SnaplenCutFramesAreUnverifiableAndFail) {
  auto frames = test::load_frames(test::data_dir() + "/golden/rc_send_multi.pcap");
  const std::string path = temp_path("cut.pcap");
  {
    auto w = capture::PcapWriter::open(path);
    ASSERT_TRUE(w.ok());
    const auto& f = frames[0].bytes;
    w->write(ConstBytes(f).first(64), 0, static_cast<std::uint32_t>(f.size()));
  }
  Output out, err;
  EXPECT_EQ(pcap_check({path}, out.file(), err.file()), kExitInvalidPackets);
  EXPECT_NE(out.text().find("cut by the capture"), std::string::npos) << out.text();
  std::filesystem::remove(path);
}

TEST(PcapCheck, FileErrors) {
  Output out, err;
  EXPECT_EQ(pcap_check({"/nonexistent.pcap"}, out.file(), err.file()), kExitFileError);
  EXPECT_NE(err.text().find("/nonexistent.pcap"), std::string::npos);
  const std::string path = temp_path("wifi.pcap");
  write_pcap(path, {std::vector<std::byte>(40)}, 105);  // IEEE 802.11
  Output out2, err2;
  EXPECT_EQ(pcap_check({path}, out2.file(), err2.file()), kExitFileError);
  EXPECT_NE(err2.text().find("unsupported link type 105"), std::string::npos) << err2.text();
  std::filesystem::remove(path);
}

TEST(PcapCheck, RawIpAndIpv6Captures) {
  wire::OuterHeaders o;
  o.ethernet = false;
  o.src.v6 = o.dst.v6 = true;
  o.src.bytes[15] = 1;
  o.dst.bytes[15] = 2;
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kCnp);
  h.bth.becn = true;
  std::vector<std::byte> frame(256);
  frame.resize(wire::build_frame(frame, o, h, {}));
  const std::string path = temp_path("raw6.pcap");
  write_pcap(path, {frame}, 101);
  Output out, err;
  EXPECT_EQ(pcap_check({path}, out.file(), err.file()), kExitOk);
  EXPECT_NE(out.text().find("0x81 CNP"), std::string::npos) << out.text();
  Output dump, derr;
  EXPECT_EQ(pcap_dump(path, dump.file(), derr.file()), kExitOk);
  EXPECT_NE(dump.text().find("[::1]:49152 -> [::2]:4791"), std::string::npos) << dump.text();
  EXPECT_NE(dump.text().find("CNP (congestion notification)"), std::string::npos);
  EXPECT_NE(dump.text().find("BECN 1"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(PcapDump, DecodesEveryHeaderAndSyndrome) {
  Output out, err;
  EXPECT_EQ(pcap_dump(test::data_dir() + "/golden/atomic_fadd.pcap", out.file(), err.file()),
            kExitOk);
  std::string text = out.text();
  EXPECT_NE(text.find("#1 "), std::string::npos);
  EXPECT_NE(text.find("10.99.0.12:50052 -> 10.99.0.11:4791"), std::string::npos) << text;
  EXPECT_NE(text.find("BTH  RC Fetch & Add (0x14) QPN 0x00001e"), std::string::npos);
  EXPECT_NE(text.find("AtomicETH VA 0x00005578fd017000 R_Key 0x00000c91 SwapAdd "
                      "0x0000000000000001"),
            std::string::npos);
  EXPECT_NE(text.find("AtomicAckETH OrigRemDt"), std::string::npos);
  EXPECT_NE(text.find("ICRC 0x0d0ddd31 ok"), std::string::npos);
  EXPECT_EQ(text.find("BAD"), std::string::npos);

  Output loss, lerr;
  EXPECT_EQ(pcap_dump(test::data_dir() + "/golden/loss_write_bw.pcap", loss.file(), lerr.file()),
            kExitOk);
  EXPECT_NE(loss.text().find("AETH syndrome 0x60 NAK PSN sequence error"), std::string::npos);
  EXPECT_NE(loss.text().find("RETH VA 0x"), std::string::npos);

  Output rnr, rerr;
  EXPECT_EQ(pcap_dump(test::data_dir() + "/golden/rnr_send.pcap", rnr.file(), rerr.file()),
            kExitOk);
  EXPECT_NE(rnr.text().find("AETH syndrome 0x2c RNR NAK timer=12 (0.64 ms)"), std::string::npos);

  Output ud, uerr;
  EXPECT_EQ(pcap_dump(test::data_dir() + "/golden/ud_send.pcap", ud.file(), uerr.file()), kExitOk);
  EXPECT_NE(ud.text().find("DETH Q_Key 0x11111111"), std::string::npos);
}

TEST(PcapDump, ShowsBadIcrcWithTheExpectedValue) {
  auto frames = test::load_frames(test::data_dir() + "/golden/rc_send_only.pcap");
  std::vector<std::byte> f = frames[0].bytes;
  f[60] ^= std::byte{0x80};
  std::vector<std::byte> runt(20, std::byte{0});
  store_be16(runt, 12, 0x0800);
  const std::string path = temp_path("bad.pcap");
  write_pcap(path, {f, runt});
  Output out, err;
  EXPECT_EQ(pcap_dump(path, out.file(), err.file()), kExitInvalidPackets);
  EXPECT_NE(out.text().find("BAD (expected 0x"), std::string::npos) << out.text();
  EXPECT_NE(out.text().find("#2 t=0.000000000 len 20 INVALID: truncated_ip"), std::string::npos)
      << out.text();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace uroce::tools
