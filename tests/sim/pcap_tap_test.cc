#include "sim/pcap_tap.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "sim_frames.h"

namespace uroce::sim {
namespace {

using test::Bytes;
using test::must_add;
using test::roce_frame;
using test::v4;

Instant at_ns(std::int64_t ns) { return Instant::from_ns(ns); }

constexpr std::int64_t kEpochNs = 1'700'000'000'000'000'000;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("uroce_sim_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

struct Record {
  std::int64_t ts_ns;
  Bytes data;
  bool operator==(const Record&) const = default;
};

std::vector<Record> read_all(const std::string& path) {
  std::vector<Record> out;
  auto scan = capture::for_each_record(path, [&](const capture::PcapRecord& rec) {
    out.push_back({rec.ts_ns, Bytes(rec.data.begin(), rec.data.end())});
  });
  UROCE_CHECK(scan.ok());
  EXPECT_EQ(scan->link_type, 1);
  return out;
}

// Traffic with delay, serialization, jitter and corruption, so that arrival order differs from
// send order and frames change on the way.
void run(Network& net, std::vector<Record>& sends, std::vector<Record>& deliveries) {
  const HostId a = must_add(net, v4(1), 1);
  const HostId b = must_add(net, v4(2), 2);
  LinkConfig c;
  c.delay_ns = 7'000;
  c.jitter_ns = 4'000;
  c.bandwidth_bps = 25'000'000'000;
  c.corruption = {1, 10};
  c.loss = {1, 10};
  UROCE_CHECK(net.configure_default(at_ns(0), c).ok());
  Delivery d;
  for (std::uint32_t i = 0; i < 200; ++i) {
    const Instant now = at_ns(1'000'000'000 + i * 1'500);
    while (net.poll_delivery(now, d)) deliveries.push_back({d.time.ns(), d.frame});
    const Bytes f = roce_frame(net.host_ip(i % 2 ? a : b), net.host_ip(i % 2 ? b : a), 128, i, 2);
    sends.push_back({now.ns(), f});
    net.send(now, i % 2 ? a : b, f);
  }
  while (!net.next_event_time().is_never()) {
    while (net.poll_delivery(std::max(net.now(), net.next_event_time()), d)) {
      deliveries.push_back({d.time.ns(), d.frame});
    }
  }
}

TEST(PcapTap, DeliveriesReadBackWithTheirSimulatedTimestamps) {
  const std::string path = temp_path("deliveries.pcap");
  std::vector<Record> sends;
  std::vector<Record> deliveries;
  {
    auto tap = PcapTap::open(path);
    ASSERT_TRUE(tap.ok()) << tap.error();
    Network net(3);
    net.set_tap(tap->get());
    run(net, sends, deliveries);
    net.set_tap(nullptr);
    EXPECT_EQ((*tap)->frames_written(), deliveries.size());
    EXPECT_LT(deliveries.size(), sends.size());  // some were lost
  }
  EXPECT_EQ(read_all(path), deliveries);
  std::filesystem::remove(path);
}

TEST(PcapTap, SendsAndDeliveriesInterleaveInTimeOrder) {
  const std::string path = temp_path("both.pcap");
  std::vector<Record> sends;
  std::vector<Record> deliveries;
  {
    PcapTapOptions opts;
    opts.sends = true;
    opts.epoch_ns = kEpochNs;
    auto tap = PcapTap::open(path, opts);
    ASSERT_TRUE(tap.ok()) << tap.error();
    Network net(3);
    net.set_tap(tap->get());
    run(net, sends, deliveries);
    net.set_tap(nullptr);
  }
  const auto got = read_all(path);
  ASSERT_EQ(got.size(), sends.size() + deliveries.size());
  std::vector<Record> got_sends;
  std::vector<Record> got_deliveries;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (i > 0) {
      EXPECT_LE(got[i - 1].ts_ns, got[i].ts_ns);  // one timeline
    }
    Record r = got[i];
    r.ts_ns -= kEpochNs;
    // A frame is a send if it matches the next expected send exactly at that time.
    if (got_sends.size() < sends.size() && r == sends[got_sends.size()]) {
      got_sends.push_back(r);
    } else {
      got_deliveries.push_back(r);
    }
  }
  EXPECT_EQ(got_sends, sends);
  EXPECT_EQ(got_deliveries, deliveries);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace uroce::sim
