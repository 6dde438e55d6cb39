#include "capture/pcap_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
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

// The frames of a capture, in order.
std::vector<std::vector<std::byte>> frames_of(const std::string& path) {
  std::vector<std::vector<std::byte>> out;
  auto scan = for_each_record(
      path, [&](const PcapRecord& rec) { out.emplace_back(rec.data.begin(), rec.data.end()); });
  EXPECT_TRUE(scan.ok()) << path << ": " << (scan.ok() ? "" : scan.error());
  return out;
}

// Writers given one name (UROCE_PCAP of a program that opens the device twice): the second takes
// NAME-2 before the extension while the first holds NAME; each file holds its own writer's
// frames only; a name no writer holds any more is taken again, truncated.
TEST(Pcap, UnsharedWritersGivenOneNameEachGetAFile) {
  const std::string path = temp_path("shared.pcap");
  const std::string second = temp_path("shared-2.pcap");
  const std::string third = temp_path("shared-3.pcap");
  const auto golden = test::load_frames(test::data_dir() + "/golden/rc_send_multi.pcap");
  ASSERT_GE(golden.size(), 3u);
  std::string chosen1, chosen2, chosen3;
  {
    auto a = PcapWriter::open_unshared(path, &chosen1);
    ASSERT_TRUE(a.ok()) << a.error();
    auto b = PcapWriter::open_unshared(path, &chosen2);
    ASSERT_TRUE(b.ok()) << b.error();
    auto c = PcapWriter::open_unshared(path, &chosen3);
    ASSERT_TRUE(c.ok()) << c.error();
    EXPECT_EQ(chosen1, path);
    EXPECT_EQ(chosen2, second);
    EXPECT_EQ(chosen3, third);
    a->write(golden[0].view(), 1);
    b->write(golden[1].view(), 2);
    c->write(golden[2].view(), 3);
    c->write(golden[0].view(), 4);
  }
  const auto fa = frames_of(path);
  const auto fb = frames_of(second);
  const auto fc = frames_of(third);
  ASSERT_EQ(fa.size(), 1u);
  ASSERT_EQ(fb.size(), 1u);
  ASSERT_EQ(fc.size(), 2u);
  EXPECT_TRUE(
      std::equal(fa[0].begin(), fa[0].end(), golden[0].view().begin(), golden[0].view().end()));
  EXPECT_TRUE(
      std::equal(fb[0].begin(), fb[0].end(), golden[1].view().begin(), golden[1].view().end()));
  // All closed: the first name is free again, and what it held is gone.
  {
    std::string again;
    auto d = PcapWriter::open_unshared(path, &again);
    ASSERT_TRUE(d.ok()) << d.error();
    EXPECT_EQ(again, path);
  }
  EXPECT_TRUE(frames_of(path).empty());
  // A name without an extension gets the number at its end.
  const std::string bare = temp_path("bare");
  {
    std::string n1, n2;
    auto x = PcapWriter::open_unshared(bare, &n1);
    auto y = PcapWriter::open_unshared(bare, &n2);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(n2, bare + "-2");
  }
  EXPECT_FALSE(PcapWriter::open_unshared("/nonexistent/dir/out.pcap", nullptr).ok());
  for (const std::string& f : {path, second, third, bare, bare + "-2"}) std::remove(f.c_str());
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

TEST(Pcap, ForEachRecordGivesEveryRecordInOrderAndCountsThem) {
  const std::string path = temp_path("each.pcap");
  const auto golden = test::load_frames(test::data_dir() + "/golden/rc_send_multi.pcap");
  ASSERT_GT(golden.size(), 1u);
  {
    auto w = PcapWriter::open(path, 101);
    ASSERT_TRUE(w.ok());
    for (std::size_t i = 0; i < golden.size(); ++i) {
      w->write(golden[i].view(), static_cast<std::int64_t>(i) * 1000);
    }
  }
  std::size_t i = 0;
  auto scan = for_each_record(path, [&](const PcapRecord& rec) {
    ASSERT_LT(i, golden.size());
    EXPECT_EQ(rec.index, i + 1);
    EXPECT_EQ(rec.ts_ns, static_cast<std::int64_t>(i) * 1000);
    EXPECT_EQ(std::vector<std::byte>(rec.data.begin(), rec.data.end()), golden[i].bytes);
    ++i;
  });
  ASSERT_TRUE(scan.ok()) << scan.error();
  EXPECT_EQ(scan->link_type, 101);
  EXPECT_EQ(scan->records, golden.size());
  EXPECT_EQ(i, golden.size());
  std::filesystem::remove(path);
}

TEST(Pcap, ForEachRecordReportsOpenAndReadErrorsAfterTheRecordsBeforeThem) {
  std::size_t calls = 0;
  const auto count = [&](const PcapRecord&) { ++calls; };
  auto missing = for_each_record("/nonexistent/uroce.pcap", count);
  ASSERT_FALSE(missing.ok());
  EXPECT_FALSE(missing.error().empty());
  EXPECT_EQ(calls, 0u);

  const std::string path = temp_path("each_trunc.pcap");
  const auto golden = test::load_frames(test::data_dir() + "/golden/rc_send_only.pcap");
  {
    auto w = PcapWriter::open(path);
    ASSERT_TRUE(w.ok());
    for (const auto& f : golden) w->write(f.view(), 0);
  }
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  auto cut = for_each_record(path, count);
  ASSERT_FALSE(cut.ok());
  EXPECT_FALSE(cut.error().empty());
  EXPECT_EQ(calls, golden.size() - 1);  // all but the cut one
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace uroce::capture
