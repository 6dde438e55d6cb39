#include "capture/pcap_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "support/golden.h"

namespace uroce::capture {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("uroce_capture_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(Pcap, WriteThenReadGivesBackFramesAndNanosecondTimestamps) {
  const std::string path = temp_path("rt.pcap");
  const auto golden = test::load_frames(test::data_dir() + "/golden/rc_send_multi.pcap");
  {
    auto w = PcapWriter::open(path);
    ASSERT_TRUE(w.ok()) << w.error();
    for (std::size_t i = 0; i < golden.size(); ++i) {
      w->write(golden[i].view(), 1'700'000'000'123'456'789 + static_cast<std::int64_t>(i));
    }
  }
  auto r = PcapReader::open(path);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->link_type(), 1);
  PcapRecord rec;
  for (std::size_t i = 0; i < golden.size(); ++i) {
    auto more = r->next(rec);
    ASSERT_TRUE(more.ok() && more.value());
    EXPECT_EQ(rec.index, i + 1);
    EXPECT_EQ(rec.ts_ns, 1'700'000'000'123'456'789 + static_cast<std::int64_t>(i));
    EXPECT_EQ(std::vector<std::byte>(rec.data.begin(), rec.data.end()), golden[i].bytes);
    EXPECT_EQ(rec.orig_len, golden[i].bytes.size());
  }
  auto end = r->next(rec);
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end.value());
  std::filesystem::remove(path);
}

TEST(Pcap, SnaplenCutKeepsTheOriginalLength) {
  const std::string path = temp_path("cut.pcap");
  const std::vector<std::byte> frame(60, std::byte{1});
  {
    auto w = PcapWriter::open(path, 101);
    ASSERT_TRUE(w.ok());
    w->write(frame, 0, 1500);
  }
  auto r = PcapReader::open(path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->link_type(), 101);
  PcapRecord rec;
  ASSERT_TRUE(r->next(rec).value());
  EXPECT_EQ(rec.data.size(), 60u);
  EXPECT_EQ(rec.orig_len, 1500u);
  std::filesystem::remove(path);
}

TEST(Pcap, ErrorsAreMessagesNotCrashes) {
  EXPECT_FALSE(PcapReader::open("/nonexistent/uroce.pcap").ok());
  const std::string junk = temp_path("junk.pcap");
  std::ofstream(junk) << "this is not a capture file";
  auto r = PcapReader::open(junk);
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(r.error().empty());
  std::filesystem::remove(junk);
  EXPECT_FALSE(PcapWriter::open("/nonexistent/dir/out.pcap").ok());
}

TEST(Pcap, TruncatedFileReportsAnError) {
  const std::string path = temp_path("trunc.pcap");
  const auto golden = test::load_frames(test::data_dir() + "/golden/rc_send_only.pcap");
  {
    auto w = PcapWriter::open(path);
    ASSERT_TRUE(w.ok());
    for (const auto& f : golden) w->write(f.view(), 0);
  }
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  auto r = PcapReader::open(path);
  ASSERT_TRUE(r.ok());
  PcapRecord rec;
  std::size_t n = 0;
  bool error = false;
  while (true) {
    auto more = r->next(rec);
    if (!more.ok()) {
      error = true;
      break;
    }
    if (!more.value()) break;
    ++n;
  }
  EXPECT_TRUE(error);
  EXPECT_EQ(n, golden.size() - 1);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace uroce::capture
