// The CM in a device's coordinator (devd/cm_server.h), from the wire and from its protocol: a
// raw RoCEv2 endpoint on a second address sends it CM MADs, good and bad, and reads what it
// answers; an rdma_cm event channel's connection (SharedPort::connect_cm) drives it with CmMsg.
// Bad input is counted (uroce stats' "cm" line) and never stops it serving.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "datapath/udp.h"
#include "devd/cm_server.h"
#include "device/device_config.h"
#include "device/shared_port.h"
#include "proto/devd_cm_protocol.h"
#include "seal/key_exchange.h"
#include "support/test_net.h"
#include "verbs/address.h"
#include "wire/builder.h"
#include "wire/cm_mad.h"

namespace uroce::engine {
namespace {

// Each test on its own pair of addresses (support/test_net.h): ctest runs them in parallel.
std::string g_device;
std::string g_peer;

wire::IpAddress ip(const char* s) { return parse_ip(s).value(); }

cm::Gid gid(const char* s) {
  const uroce::Gid g = verbs::gid_from_ip(ip(s));
  cm::Gid out{};
  std::memcpy(out.data(), g.raw.data(), 16);
  return out;
}

std::map<std::string, std::uint64_t> cm_counters() {
  auto info = SharedPort::query(ip(g_device.c_str()), wire::kRoceV2Port);
  EXPECT_TRUE(info.ok());
  std::map<std::string, std::uint64_t> out;
  if (!info.ok()) return out;
  std::istringstream in(info->cm_counters);
  std::string name;
  std::uint64_t v = 0;
  while (in >> name >> v) out[name] = v;
  return out;
}

class CmServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The coordinator is told it when it starts (connect_cm below starts it): 10 minutes, so
    // that the listen comes in time however slow the machine; 1 ms, so that the REJ comes.
    static const std::map<std::string, long long> graces = {
        {"ARequestBeforeTheListenWaitsForIt", 600000},
        {"ARequestForAPortNobodyListensOnIsRejectedAfterTheGrace", 1},
    };
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    g_device = ::uroce::test::unique_ip();
    g_peer = ::uroce::test::unique_ip();
    // The coordinator is told these on its command line by the process that starts it (the
    // edge reads them from its UROCE_CM_LISTEN_GRACE_MS and UROCE_FAULTS).
    devd::DevdOptions devd;
    const auto g = graces.find(name);
    if (g != graces.end()) devd.cm_listen_grace_ms = g->second;
    if (name == "FaultsReachTheCmsOwnPackets") devd.faults = "dir=tx,class=cm,loss=100%,seed=3";
    // An event channel's connection starts the coordinator (and keeps it).
    auto c = SharedPort::connect_cm(ip(g_device.c_str()), wire::kRoceV2Port, "uroce0", devd);
    ASSERT_TRUE(c.ok()) << c.error();
    chan_ = c.value();
    datapath::UdpOptions o(ip(g_peer.c_str()));
    o.gso = false;
    o.gro = false;
    auto dp = datapath::UdpDatapath::open(o);
    ASSERT_TRUE(dp.ok()) << dp.error();
    dp_ = std::move(dp.value());
  }
  void TearDown() override {
    if (chan_ >= 0) ::close(chan_);
  }

  // Sends a UD SEND Only packet with `payload` to the device's QP `qpn`.
  // `bytes` as a UDP datagram from the peer's address to the device's port 4791.
  void send_raw(const std::vector<std::byte>& bytes) {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    std::memcpy(&from.sin_addr, ip(g_peer.c_str()).bytes.data(), 4);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(wire::kRoceV2Port);
    std::memcpy(&to.sin_addr, ip(g_device.c_str()).bytes.data(), 4);
    ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&from), sizeof from), 0);
    EXPECT_EQ(::sendto(fd, bytes.data(), bytes.size(), 0, reinterpret_cast<const sockaddr*>(&to),
                       sizeof to),
              static_cast<ssize_t>(bytes.size()));
    ::close(fd);
  }

  void send(ConstBytes payload, std::uint32_t qpn = 1, std::uint32_t qkey = wire::kGsiQkey) {
    wire::TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kUdSendOnly);
    h.bth.dest_qpn = qpn;
    h.bth.psn = psn_++;
    h.deth.qkey = qkey;
    h.deth.src_qpn = 1;
    std::array<std::byte, 32> hdr{};
    const std::size_t n = wire::write_headers(MutBytes(hdr), h, payload.size());
    wire::OuterHeaders o;
    o.src = ip(g_peer.c_str());
    o.dst = ip(g_device.c_str());
    o.ethernet = false;
    const ConstBytes pieces[1] = {payload};
    ASSERT_TRUE(dp_->send(Instant{}, o, ConstBytes(hdr).first(n), pieces));
    dp_->flush(Instant{});
  }

  // The next CM MAD the device sends us (bounded wait), MRAs passed over (the coordinator sends
  // one on every REQ it takes).
  std::optional<wire::CmMad> receive() {
    std::optional<wire::CmMad> got;
    for (int i = 0; i < 100 && !got; ++i) {
      pollfd p{dp_->fd(), POLLIN, 0};
      if (::poll(&p, 1, 100) != 1) continue;
      dp_->receive(16, [&](const wire::RocePacket& pkt, const datapath::RxMeta& meta) {
        EXPECT_TRUE(meta.icrc_verified);
        EXPECT_EQ(pkt.bth().dest_qpn(), wire::kGsiQpn);
        EXPECT_EQ(pkt.deth().qkey(), wire::kGsiQkey);
        EXPECT_EQ(pkt.deth().src_qpn(), wire::kGsiQpn);
        auto m = wire::parse_cm_mad(pkt.payload);
        if (m.ok() && !std::holds_alternative<wire::CmMra>(m->message)) got = *m;
      });
    }
    return got;
  }

  devd::CmMsg call(const devd::CmMsg& req) {
    EXPECT_EQ(::send(chan_, &req, sizeof req, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof req));
    for (;;) {
      devd::CmMsg m;
      pollfd p{chan_, POLLIN, 0};
      EXPECT_EQ(::poll(&p, 1, 10'000), 1);
      EXPECT_EQ(::recv(chan_, &m, sizeof m, 0), static_cast<ssize_t>(sizeof m));
      if (m.type == devd::CmMsgType::kReply) return m;
      events_.push_back(m);
    }
  }

  std::optional<devd::CmMsg> next_event() {
    if (!events_.empty()) {
      devd::CmMsg m = events_.front();
      events_.erase(events_.begin());
      return m;
    }
    pollfd p{chan_, POLLIN, 0};
    if (::poll(&p, 1, 10'000) != 1) return std::nullopt;
    devd::CmMsg m;
    if (::recv(chan_, &m, sizeof m, 0) != static_cast<ssize_t>(sizeof m)) return std::nullopt;
    return m;
  }

  // The command of `type` for `id` that carries an address with `port`: kBind the device's (its
  // src), kResolveAddr the peer's (its dst).
  static devd::CmMsg addr_cmd(devd::CmMsgType type, std::uint32_t id, std::uint16_t port) {
    const bool bind = type == devd::CmMsgType::kBind;
    devd::CmMsg m;
    m.type = type;
    m.id = id;
    devd::CmAddr& a = bind ? m.src : m.dst;
    a.family = 4;
    std::memcpy(a.bytes, ip((bind ? g_device : g_peer).c_str()).bytes.data(), 4);
    a.port = port;
    return m;
  }

  // Binds `id` to the device's address and `port`.
  void bind(std::uint32_t id, std::uint16_t port) {
    ASSERT_EQ(call(addr_cmd(devd::CmMsgType::kBind, id, port)).status, 0);
  }

  // A new ID bound to the device's address and `port`, listening with `backlog`.
  void listen_on(std::uint16_t port, std::int32_t backlog) {
    const std::uint32_t id = create_id();
    bind(id, port);
    devd::CmMsg m;
    m.type = devd::CmMsgType::kListen;
    m.id = id;
    m.backlog = backlog;
    ASSERT_EQ(call(m).status, 0);
  }

  // A new RDMA_PS_TCP ID of an RC QP on this channel; its number.
  std::uint32_t create_id() {
    devd::CmMsg m;
    m.type = devd::CmMsgType::kCreateId;
    m.ps = 0x0106;
    m.qp_type = 2;
    const devd::CmMsg r = call(m);
    EXPECT_EQ(r.status, 0);
    return r.id;
  }

  wire::CmReq req_for(std::uint16_t port) {
    wire::CmReq r;
    r.local_comm_id = 0x11223344;
    r.service_id = wire::rdma_service_id(wire::RdmaPortSpace::kTcp, port);
    r.local_ca_guid = 0x0200000000000002ull;
    r.local_qpn = 0x000345;
    r.starting_psn = 0x123456;
    r.responder_resources = 1;
    r.initiator_depth = 1;
    r.remote_cm_response_timeout = 20;
    r.local_cm_response_timeout = 20;
    r.retry_count = 7;
    r.rnr_retry_count = 7;
    r.path_mtu = 3;
    r.max_cm_retries = 15;
    r.partition_key = 0xffff;
    r.primary_local_lid = 0xffff;
    r.primary_remote_lid = 0xffff;
    r.primary_local_gid = gid(g_peer.c_str());
    r.primary_remote_gid = gid(g_device.c_str());
    r.primary_hop_limit = 64;
    r.primary_packet_rate = 3;
    r.primary_local_ack_timeout = 18;
    r.primary_subnet_local = 1;
    wire::CmaHeader h;
    h.src_port = 40000;
    h.src_addr = gid(g_peer.c_str());
    h.dst_addr = gid(g_device.c_str());
    std::array<std::byte, 92> pd{};
    auto n = wire::encode_cma_private_data(h, {}, MutBytes(pd));
    EXPECT_TRUE(n.ok());
    std::memcpy(r.private_data.data(), pd.data(), 92);
    return r;
  }

  // Sends `count` REQs for `port` with distinct communication IDs and QPNs from `base`, in
  // batches each followed by a REP for no REQ, which the CM answers with a REJ at once: once
  // that has come, the batch has been read (one socket, in order), and the next may go without
  // overflowing the coordinator's socket or ours. How many REQs were rejected.
  std::size_t send_reqs(std::uint16_t port, std::uint32_t count, std::uint32_t base) {
    std::size_t rejects = 0;
    std::uint64_t marker = 0;
    bool seen = false;
    auto answer = [&](const wire::RocePacket& pkt, const datapath::RxMeta&) {
      auto m = wire::parse_cm_mad(pkt.payload);
      if (!m.ok()) return;
      if (m->transaction_id == marker) {
        seen = true;
      } else if (m->transaction_id < base + 0x100000 &&
                 std::holds_alternative<wire::CmRej>(m->message)) {
        ++rejects;
      }
    };
    for (std::uint32_t i = 0; i < count;) {
      for (std::uint32_t k = 0; k < 32 && i < count; ++k, ++i) {
        wire::CmReq r = req_for(port);
        r.local_comm_id = base + 1 + i;
        r.local_qpn = base + 1 + i;
        send(wire::build_cm_mad(wire::CmMad{base + 1 + i, r}));
      }
      wire::CmRep rep;
      rep.local_comm_id = 0x57;
      rep.remote_comm_id = 0x9b;
      rep.local_qpn = 0x402;
      marker = base + 0x100000 + i;
      seen = false;
      send(wire::build_cm_mad(wire::CmMad{marker, rep}));
      for (int w = 0; w < 1000 && !seen; ++w) {
        pollfd p{dp_->fd(), POLLIN, 0};
        if (::poll(&p, 1, 100) == 1) dp_->receive(64, answer);
      }
      EXPECT_TRUE(seen) << "no answer to the REP after " << i << " REQs";
      if (!seen) break;
    }
    return rejects;
  }

  int chan_ = -1;
  std::unique_ptr<datapath::UdpDatapath> dp_;
  std::uint32_t psn_ = 0;
  std::vector<devd::CmMsg> events_;
};

TEST_F(CmServerTest, AnswersTheWireAsTheKernelDoesAndCountsWhatIsBad) {
  // A REQ for a service nobody listens on: REJ Invalid Service ID.
  auto mad = wire::build_cm_mad(wire::CmMad{0x77, req_for(9)});
  send(mad);
  auto ans = receive();
  ASSERT_TRUE(ans.has_value());
  ASSERT_TRUE(std::holds_alternative<wire::CmRej>(ans->message));
  EXPECT_EQ(ans->transaction_id, 0x77u);
  EXPECT_EQ(std::get<wire::CmRej>(ans->message).reason,
            static_cast<std::uint16_t>(wire::CmRejReason::kInvalidServiceId));

  // A REP for no REQ: REJ Invalid Communication ID.
  wire::CmRep rep;
  rep.local_comm_id = 0x55;
  rep.remote_comm_id = 0x99;
  rep.local_qpn = 0x400;
  send(wire::build_cm_mad(wire::CmMad{0x78, rep}));
  ans = receive();
  ASSERT_TRUE(ans.has_value());
  ASSERT_TRUE(std::holds_alternative<wire::CmRej>(ans->message));
  EXPECT_EQ(std::get<wire::CmRej>(ans->message).reason,
            static_cast<std::uint16_t>(wire::CmRejReason::kInvalidCommId));

  auto before = cm_counters();
  auto info_before = SharedPort::query(ip(g_device.c_str()), wire::kRoceV2Port);
  ASSERT_TRUE(info_before.ok());
  // Malformed: an unknown CM attribute, a bad class version, a truncated MAD, a wrong Q_Key,
  // garbage to an unowned QPN.
  auto bad = mad;
  store_be16(bad, wire::kMadOffAttrId, 0x0042);
  send(bad);
  bad = mad;
  bad[wire::kMadOffClassVersion] = std::byte{1};
  send(bad);
  send(ConstBytes(mad).first(100));
  send(mad, 1, 0x1234);
  send(mad, 0x7fff00);
  // And no RoCE packet at all: datagrams too short for a BTH, and random bytes (a bad ICRC).
  send_raw(std::vector<std::byte>(3, std::byte{0x11}));
  send_raw(std::vector<std::byte>(0));
  std::vector<std::byte> junk(200);
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<std::byte>(i * 37 + 1);
  send_raw(junk);
  // None of them gets an answer; a good one after them still does.
  send(wire::build_cm_mad(wire::CmMad{0x79, req_for(9)}));
  ans = receive();
  ASSERT_TRUE(ans.has_value());
  EXPECT_EQ(ans->transaction_id, 0x79u);
  auto after = cm_counters();
  EXPECT_EQ(after["rx_malformed"] - before["rx_malformed"], 2u);
  EXPECT_EQ(after["qp1_not_cm"] - before["qp1_not_cm"], 1u);
  EXPECT_EQ(after["qp1_bad"] - before["qp1_bad"], 1u);
  auto info = SharedPort::query(ip(g_device.c_str()), wire::kRoceV2Port);
  ASSERT_TRUE(info.ok());
  // The unowned QPN's packet and the three that are no RoCE packet (issue 43: a flood's every
  // packet shows in `uroce stats`).
  EXPECT_EQ(info->unsteered - info_before->unsteered, 4u);
}

TEST_F(CmServerTest, AListenerGetsTheRequestAndItsRejectReachesTheWire) {
  const std::uint32_t id = create_id();
  devd::CmMsg m = addr_cmd(devd::CmMsgType::kBind, id, 7480);
  ASSERT_EQ(call(m).status, 0);
  // The port is taken now.
  m.id = create_id();
  EXPECT_EQ(call(m).status, EADDRINUSE);
  m = devd::CmMsg{};
  m.type = devd::CmMsgType::kListen;
  m.id = id;
  ASSERT_EQ(call(m).status, 0);

  send(wire::build_cm_mad(wire::CmMad{0x80, req_for(7480)}));
  auto ev = next_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->event, 4u);  // RDMA_CM_EVENT_CONNECT_REQUEST
  EXPECT_EQ(ev->listen_id, id);
  EXPECT_EQ(ev->conn.qp_num, 0x345u);
  EXPECT_EQ(ev->dst.port, 40000);
  EXPECT_EQ(ev->conn.private_data_len, 56);
  EXPECT_EQ(ev->qp.sq_psn, 0x123456u);  // the passive side sends from the REQ's PSN

  m = devd::CmMsg{};
  m.type = devd::CmMsgType::kReject;
  m.id = ev->id;
  m.conn.private_data[0] = 0xab;
  m.conn.private_data_len = 1;
  ASSERT_EQ(call(m).status, 0);
  auto ans = receive();
  ASSERT_TRUE(ans.has_value());
  ASSERT_TRUE(std::holds_alternative<wire::CmRej>(ans->message));
  const auto& rej = std::get<wire::CmRej>(ans->message);
  EXPECT_EQ(rej.reason, static_cast<std::uint16_t>(wire::CmRejReason::kConsumerDefined));
  EXPECT_EQ(rej.remote_comm_id, 0x11223344u);
  EXPECT_EQ(rej.private_data[0], 0xab);

  // Commands on an ID that is not this channel's fail; unknown commands too.
  m = devd::CmMsg{};
  m.type = devd::CmMsgType::kDisconnect;
  m.id = 0xdeadbeef;
  EXPECT_EQ(call(m).status, ENOENT);
}

// Every command gets exactly one reply, and the events it causes come after it: address and
// route resolution answer, then report.
TEST_F(CmServerTest, OneReplyPerCommandAndEventsAfterIt) {
  const std::uint32_t id = create_id();
  devd::CmMsg m = addr_cmd(devd::CmMsgType::kResolveAddr, id, 7999);
  auto r = call(m);
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.src.port, 0);  // an ephemeral port
  m.type = devd::CmMsgType::kResolveRoute;
  EXPECT_EQ(call(m).status, 0);
  // The next command's reply is its own (an unknown ID), not a leftover.
  m = devd::CmMsg{};
  m.type = devd::CmMsgType::kDestroyId;
  m.id = 0xfffffff0;
  EXPECT_EQ(call(m).status, ENOENT);
  auto e1 = next_event();
  auto e2 = next_event();
  ASSERT_TRUE(e1 && e2);
  EXPECT_EQ(e1->type, devd::CmMsgType::kEvent);
  EXPECT_EQ(e1->event, 0u);  // ADDR_RESOLVED
  EXPECT_EQ(e2->event, 2u);  // ROUTE_RESOLVED
  EXPECT_EQ(e1->id, id);
  pollfd p{chan_, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "a message more than the replies and events";
}

// A channel that closes with events still queued for it (it stopped reading, its socket is full)
// is dropped with its IDs, and a channel that connects afterwards (the coordinator may give it the
// same fd number) is served as any other.
TEST_F(CmServerTest, AChannelThatClosesWithEventsQueuedIsDroppedAndItsSuccessorServed) {
  const std::uint32_t id = create_id();
  devd::CmMsg m;
  m.type = devd::CmMsgType::kBind;
  m.id = id;
  m.src.port = 7490;
  ASSERT_EQ(call(m).status, 0);
  m.type = devd::CmMsgType::kListen;
  ASSERT_EQ(call(m).status, 0);
  // REQs with distinct communication IDs: a CONNECT_REQUEST each, which this channel never
  // reads: more than its socket holds, so that the coordinator queues the rest.
  EXPECT_EQ(send_reqs(7490, 600, 0x1000), 0u);
  ::close(chan_);
  chan_ = -1;
  // A new channel: it works, several commands in a row.
  for (int k = 0; k < 3; ++k) {
    auto c = SharedPort::connect_cm(ip(g_device.c_str()), wire::kRoceV2Port, "uroce0");
    ASSERT_TRUE(c.ok()) << c.error();
    chan_ = c.value();
    events_.clear();
    devd::CmMsg n;
    n.type = devd::CmMsgType::kBind;
    n.id = create_id();
    n.src.port = 7490;  // free again: the dropped channel's listener is gone
    ASSERT_EQ(call(n).status, 0);
    n.type = devd::CmMsgType::kDestroyId;
    ASSERT_EQ(call(n).status, 0);
    ::close(chan_);
    chan_ = -1;
  }
}

// Issue 43: `cmtime -c 1000`'s client sends its 1000 REQs in a burst; a server that had not yet
// read its CONNECT_REQUESTs when its channel's socket filled (a few hundred events) was dropped
// by the coordinator as one that had stopped reading: its IDs went, the REQs still coming were
// REJected (reason 28) and its rdma_accept calls failed with ENODEV. A channel that reads late
// must get every request its listen's backlog (1024 by default, as the kernel's max_backlog) holds.
TEST_F(CmServerTest, AChannelThatReadsLateGetsEveryRequestItsBacklogHolds) {
  listen_on(7495, 0);  // the default backlog
  constexpr std::uint32_t kReqs = 1000;
  // Only once every REQ has been read (the answer to a MAD sent after them has come) ...
  EXPECT_EQ(send_reqs(7495, kReqs, 0x2000), 0u) << "a REQ was rejected";
  // ... does the channel read: every request, each once, then the channel still serves.
  std::set<std::uint32_t> qpns;
  for (std::uint32_t i = 0; i < kReqs; ++i) {
    auto ev = next_event();
    ASSERT_TRUE(ev.has_value()) << "after " << i << " requests";
    ASSERT_EQ(ev->event, 4u);  // RDMA_CM_EVENT_CONNECT_REQUEST
    qpns.insert(ev->conn.qp_num);
  }
  EXPECT_EQ(qpns.size(), kReqs);
  EXPECT_NE(create_id(), 0u);
  EXPECT_EQ(cm_counters()["client_drops"], 0u);
}

// Past its backlog a listener's requests are dropped, not rejected (cm.c: "Do not reject to allow
// future retries", when ucma's backlog is full): the peer's CM retransmits its REQ, and the
// channel is kept however long it takes to read.
TEST_F(CmServerTest, RequestsPastTheBacklogAreDroppedForTheirRetryNotRejected) {
  listen_on(7496, 2);
  constexpr std::uint32_t kReqs = 600;  // more than the channel's socket holds
  EXPECT_EQ(send_reqs(7496, kReqs, 0x3000), 0u) << "a REQ was rejected";
  // (Past its share, the one source's: all of a backlog of 2 but one kept for other sources.)
  auto counters = cm_counters();
  const std::uint64_t dropped = counters["req_backlog_drops"] + counters["req_src_limited"];
  EXPECT_GT(dropped, 0u);
  // A command's reply comes after every event queued before it (the coordinator reads a
  // channel's commands only once its queue is in the socket): call() keeps them in events_.
  EXPECT_NE(create_id(), 0u);
  for (const devd::CmMsg& ev : events_) EXPECT_EQ(ev.event, 4u);
  EXPECT_EQ(events_.size() + dropped, kReqs);
  EXPECT_EQ(cm_counters()["client_drops"], 0u);
}

// A flood of REQs from one address to a listener whose channel reads late takes what the
// channel's socket holds and then its share of the listen's backlog (all but kReqReserve), no
// more: the rest are dropped and counted (req_src_limited), and a REQ from another address
// still gets into the backlog and reaches the listener. What the coordinator keeps is bounded
// by the backlog however long the flood.
TEST_F(CmServerTest, AFloodOfRequestsFromOneSourceLeavesOthersRoom) {
  listen_on(7497, 64);
  constexpr std::uint32_t kFlood = 800;  // more than the channel's socket holds
  EXPECT_EQ(send_reqs(7497, kFlood, 0x4000), 0u) << "a REQ was rejected";
  const std::uint64_t limited = cm_counters()["req_src_limited"];
  EXPECT_GT(limited, 0u);
  // Another address.
  g_peer = ::uroce::test::unique_ip();
  datapath::UdpOptions o(ip(g_peer.c_str()));
  o.gso = false;
  o.gro = false;
  auto other = datapath::UdpDatapath::open(o);
  ASSERT_TRUE(other.ok()) << other.error();
  std::swap(dp_, other.value());
  EXPECT_EQ(send_reqs(7497, 1, 0x9000), 0u);
  auto counters = cm_counters();
  EXPECT_EQ(counters["req_backlog_drops"], 0u);
  EXPECT_EQ(counters["req_src_limited"], limited);
  // The channel reads: every request queued, the other address's last.
  EXPECT_NE(create_id(), 0u);
  ASSERT_FALSE(events_.empty());
  for (const devd::CmMsg& ev : events_) EXPECT_EQ(ev.event, 4u);
  EXPECT_EQ(events_.size() + limited, kFlood + 1);
  EXPECT_EQ(events_.back().conn.qp_num, 0x9001u);
  EXPECT_EQ(counters["client_drops"], 0u);
}

// A REQ that comes before the listen (a program that lets its peer connect before it listens:
// Debian's qperf, perftest -R) is held and handed to the listener when it listens.
TEST_F(CmServerTest, ARequestBeforeTheListenWaitsForIt) {
  const std::uint32_t id = create_id();
  bind(id, 7490);
  auto before = cm_counters();
  send(wire::build_cm_mad(wire::CmMad{0x90, req_for(7490)}));
  // Held for a port nobody has bound yet too.
  send(wire::build_cm_mad(wire::CmMad{0x91, req_for(7491)}));
  // Both have been read when a MAD after them has its answer (a REP for no REQ: REJ at once).
  wire::CmRep rep;
  rep.local_comm_id = 0x56;
  rep.remote_comm_id = 0x9a;
  rep.local_qpn = 0x401;
  send(wire::build_cm_mad(wire::CmMad{0x92, rep}));
  auto ans = receive();
  ASSERT_TRUE(ans.has_value());
  EXPECT_EQ(ans->transaction_id, 0x92u);
  ASSERT_TRUE(std::holds_alternative<wire::CmRej>(ans->message));
  EXPECT_EQ(cm_counters()["req_held"] - before["req_held"], 2u);

  devd::CmMsg m;
  m.type = devd::CmMsgType::kListen;
  m.id = id;
  ASSERT_EQ(call(m).status, 0);
  auto ev = next_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->event, 4u);  // RDMA_CM_EVENT_CONNECT_REQUEST
  EXPECT_EQ(ev->listen_id, id);
  EXPECT_EQ(ev->conn.qp_num, 0x345u);
}

// Held no longer than the grace: then REJected with Invalid Service ID, as the kernel answers,
// for a bound port and for one nobody holds.
TEST_F(CmServerTest, ARequestForAPortNobodyListensOnIsRejectedAfterTheGrace) {
  const std::uint32_t id = create_id();
  bind(id, 7492);
  for (std::uint16_t port : {7492, 7494}) {
    send(wire::build_cm_mad(wire::CmMad{port, req_for(port)}));
    auto ans = receive();
    ASSERT_TRUE(ans.has_value());
    EXPECT_EQ(ans->transaction_id, port);
    ASSERT_TRUE(std::holds_alternative<wire::CmRej>(ans->message));
    EXPECT_EQ(std::get<wire::CmRej>(ans->message).reason,
              static_cast<std::uint16_t>(wire::CmRejReason::kInvalidServiceId));
  }
  EXPECT_EQ(cm_counters()["req_held"], 2u);
}

// class=cm faults reach the CM's MADs (the coordinator's own socket): the REJ for a REQ nobody
// listens for is lost on the way out, and the CM's counters say so.
TEST_F(CmServerTest, FaultsReachTheCmsOwnPackets) {
  send(wire::build_cm_mad(wire::CmMad{0xa0, req_for(7493)}));
  std::map<std::string, std::uint64_t> c;
  for (int i = 0; i < 1000 && c["fault_tx_loss"] == 0; ++i) {
    c = cm_counters();
    if (c["fault_tx_loss"] == 0) {
      pollfd p{dp_->fd(), POLLIN, 0};
      ::poll(&p, 1, 10);  // a bounded wait between queries
    }
  }
  EXPECT_EQ(c["fault_tx_loss"], 1u);
  EXPECT_EQ(c["fault_tx_packets"], 1u);
  EXPECT_EQ(c["tx_mads"], 1u);  // the CM sent it; the stage lost it
  // Nothing came, nor can come: it never left.
  std::size_t got = 0;
  dp_->receive(16, [&](const wire::RocePacket&, const datapath::RxMeta&) { ++got; });
  EXPECT_EQ(got, 0u);
}

// Per-connection keys (devd/cm_keys.h, docs/SECURITY.md): the raw endpoint plays the active
// side. A REQ as rxe sends it (no uroce mark in its Local CA GUID) gets a plain 256-byte REP and
// no key under `encrypt`, and a REJ under `require`; a REQ from a uroce peer gets the device's
// X25519 public value after the REP, and the RTU's brings the same key to both ends.
class CmKeysTest : public CmServerTest {
 protected:
  // A listener on `port` of a device whose aead= is `mode`.
  std::uint32_t listen_sealed(std::uint16_t port, seal::Mode mode) {
    const std::uint32_t id = create_id();
    bind(id, port);
    devd::CmMsg m;
    m.type = devd::CmMsgType::kListen;
    m.id = id;
    m.seal_mode = static_cast<std::uint8_t>(mode);
    EXPECT_EQ(call(m).status, 0);
    return id;
  }
  // The next QP 1 payload the device sends (bounded wait): a MAD, and what follows it. MRAs
  // (the coordinator sends one on every REQ it takes) are passed over.
  std::vector<std::byte> receive_raw() {
    std::vector<std::byte> got;
    for (int i = 0; i < 100 && got.empty(); ++i) {
      pollfd p{dp_->fd(), POLLIN, 0};
      if (::poll(&p, 1, 100) != 1) continue;
      dp_->receive(1, [&](const wire::RocePacket& pkt, const datapath::RxMeta&) {
        got.assign(pkt.payload.begin(), pkt.payload.end());
      });
      if (got.size() < wire::kMadBytes) continue;
      auto m = wire::parse_cm_mad(ConstBytes(got).first(wire::kMadBytes));
      if (m.ok() && std::holds_alternative<wire::CmMra>(m->message)) got.clear();
    }
    return got;
  }
  // Accepts the request of event `ev` with QP `qpn`, as the drop-in librdmacm does.
  void accept(const devd::CmMsg& ev, std::uint32_t qpn, seal::Mode mode) {
    devd::CmMsg m;
    m.type = devd::CmMsgType::kAccept;
    m.id = ev.id;
    m.conn.qp_num = qpn;
    m.conn.responder_resources = 1;
    m.conn.initiator_depth = 1;
    m.conn.rnr_retry_count = 7;
    m.seal_mode = static_cast<std::uint8_t>(mode);
    ASSERT_EQ(call(m).status, 0);
  }
  // A new ID with its address and route resolved towards the peer's `port`, for a connect.
  // The connection's details both sides' keys cover: the test is the active side (g_peer), the
  // device the passive one.
  static seal::ConnectionIdentity identity_of(const wire::CmReq& req, const wire::CmRep& rep) {
    seal::ConnectionIdentity id;
    id.active_gid = gid(g_peer.c_str());
    id.passive_gid = gid(g_device.c_str());
    id.active_qpn = req.local_qpn;
    id.passive_qpn = rep.local_qpn;
    id.active_comm_id = req.local_comm_id;
    id.passive_comm_id = rep.local_comm_id;
    return id;
  }
  std::uint32_t resolved_id(std::uint16_t port) {
    const std::uint32_t id = create_id();
    devd::CmMsg m = addr_cmd(devd::CmMsgType::kResolveAddr, id, port);
    EXPECT_EQ(call(m).status, 0);
    m.type = devd::CmMsgType::kResolveRoute;
    EXPECT_EQ(call(m).status, 0);
    EXPECT_TRUE(next_event() && next_event());  // ADDR_RESOLVED, ROUTE_RESOLVED
    return id;
  }
  void send_rtu(std::uint32_t device_comm_id, ConstBytes extension) {
    wire::CmRtu rtu;
    rtu.local_comm_id = 0x11223344;
    rtu.remote_comm_id = device_comm_id;
    const auto mad = wire::build_cm_mad(wire::CmMad{0x81, rtu});
    std::vector<std::byte> p(mad.begin(), mad.end());
    p.insert(p.end(), extension.begin(), extension.end());
    send(p);
  }
};

// The peer's device has gone (its coordinator exited: nothing is bound at its port 4791). Its
// host answers the next MAD with an ICMP port unreachable, which comes back to the MAD socket's
// error queue, and the CM ends what it retransmits there at once
// (cm::CmEndpoint::handle_peer_unreachable): before, a DREQ was retried for a minute and a REQ
// for a minute and a half. The raw endpoint plays the peer, then closes its socket.
class CmPeerGoneTest : public CmKeysTest {
 protected:
  // The raw endpoint (active) connected to a listener of the device on `port`; the device's ID.
  std::uint32_t connected(std::uint16_t port) {
    listen_on(port, 16);
    send(wire::build_cm_mad(wire::CmMad{0x90, req_for(port)}));
    const auto ev = next_event();
    EXPECT_TRUE(ev.has_value() && ev->event == 4u);  // CONNECT_REQUEST
    if (!ev) return 0;
    accept(*ev, 0x778, seal::Mode::kOff);
    const auto rep = receive_raw();
    EXPECT_EQ(rep.size(), wire::kMadBytes);
    if (rep.size() < wire::kMadBytes) return 0;
    const auto m = wire::parse_cm_mad(ConstBytes(rep).first(wire::kMadBytes));
    EXPECT_TRUE(m.ok() && std::holds_alternative<wire::CmRep>(m->message));
    if (!m.ok() || !std::holds_alternative<wire::CmRep>(m->message)) return 0;
    send_rtu(std::get<wire::CmRep>(m->message).local_comm_id, {});
    const auto est = next_event();
    EXPECT_TRUE(est.has_value() && est->event == 9u);  // ESTABLISHED
    return ev->id;
  }
};

TEST_F(CmPeerGoneTest, ADisconnectToAPeerWhoseDeviceHasGoneEndsAtOnce) {
  const std::uint32_t id = connected(7495);
  ASSERT_NE(id, 0u);
  dp_.reset();  // the peer's device goes
  devd::CmMsg m;
  m.type = devd::CmMsgType::kDisconnect;
  m.id = id;
  ASSERT_EQ(call(m).status, 0);
  // next_event() waits 10 s at most; the DREQ's 15 retries would take a minute.
  const auto ev = next_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->event, 10u);  // DISCONNECTED
  const auto c = cm_counters();
  EXPECT_EQ(c.at("peer_unreachable"), 1u);
  EXPECT_EQ(c.at("unreachable_ended"), 1u);
  EXPECT_EQ(c.at("retransmits"), 0u);
  EXPECT_EQ(c.at("dreq_timeouts"), 0u);
}

TEST_F(CmPeerGoneTest, AConnectToAnAddressWhereNothingListensIsUnreachableAtOnce) {
  const char* const nobody = ::uroce::test::unique_ip();  // this process's: nothing binds it
  const std::uint32_t id = create_id();
  devd::CmMsg m;
  m.type = devd::CmMsgType::kResolveAddr;
  m.id = id;
  m.dst.family = 4;
  std::memcpy(m.dst.bytes, ip(nobody).bytes.data(), 4);
  m.dst.port = 7496;
  ASSERT_EQ(call(m).status, 0);
  m.type = devd::CmMsgType::kResolveRoute;
  ASSERT_EQ(call(m).status, 0);
  ASSERT_TRUE(next_event() && next_event());  // ADDR_RESOLVED, ROUTE_RESOLVED
  devd::CmMsg c;
  c.type = devd::CmMsgType::kConnect;
  c.id = id;
  c.conn.qp_num = 0x779;
  ASSERT_EQ(call(c).status, 0);
  // next_event() waits 10 s at most; the REQ's 15 retries would take a minute and a half.
  const auto ev = next_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->event, 7u);  // UNREACHABLE, as when the REQ's retries run out
  EXPECT_EQ(ev->status, -ETIMEDOUT);
  const auto n = cm_counters();
  EXPECT_EQ(n.at("peer_unreachable"), 1u);
  EXPECT_EQ(n.at("unreachable_ended"), 1u);
  EXPECT_EQ(n.at("retransmits"), 0u);
}

TEST_F(CmKeysTest, AnRxeRequestGetsPlainRoceUnderEncryptAndARejectUnderRequire) {
  listen_sealed(7481, seal::Mode::kEncrypt);
  wire::CmReq req = req_for(7481);
  ASSERT_FALSE(wire::is_uroce_guid(req.local_ca_guid));  // rxe's kind of GUID
  send(wire::build_cm_mad(wire::CmMad{0x80, req}));
  auto ev = next_event();
  ASSERT_TRUE(ev.has_value());
  ASSERT_EQ(ev->event, 4u);  // CONNECT_REQUEST
  EXPECT_FALSE(ev->qp.peer_uroce);
  accept(*ev, 0x777, seal::Mode::kEncrypt);
  const auto rep = receive_raw();
  ASSERT_EQ(rep.size(), wire::kMadBytes);  // the REP alone: byte-exact plain RoCE
  auto m = wire::parse_cm_mad(rep);
  ASSERT_TRUE(m.ok());
  const auto& r = std::get<wire::CmRep>(m->message);
  send_rtu(r.local_comm_id, {});
  auto est = next_event();
  ASSERT_TRUE(est.has_value());
  EXPECT_EQ(est->event, 9u);  // ESTABLISHED
  EXPECT_EQ(est->qp.seal_key_bytes, 0u);

  // Under require the same REQ is refused on the wire, with the reason, and never offered.
  listen_sealed(7482, seal::Mode::kRequire);
  req = req_for(7482);
  req.local_comm_id = 0x55;
  req.local_qpn = 0x346;  // another QP (a REQ from the connected one is a stale connection)
  send(wire::build_cm_mad(wire::CmMad{0x90, req}));
  const auto rej = receive();
  ASSERT_TRUE(rej.has_value());
  ASSERT_TRUE(std::holds_alternative<wire::CmRej>(rej->message));
  const auto& j = std::get<wire::CmRej>(rej->message);
  EXPECT_EQ(j.reason, static_cast<std::uint16_t>(wire::CmRejReason::kConsumerDefined));
  EXPECT_EQ(j.remote_comm_id, 0x55u);
  const std::string text(reinterpret_cast<const char*>(j.private_data.data()),
                         kRequireRejectText.size());
  EXPECT_EQ(text, kRequireRejectText);
  pollfd p{chan_, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 200), 0) << "the refused request reached the listener";
  auto c = cm_counters();
  EXPECT_EQ(c["keys_plain"], 1u);
  EXPECT_EQ(c["keys_refused"], 1u);
  EXPECT_EQ(c["keys_agreed"], 0u);
}

TEST_F(CmKeysTest, AUroceRequestAgreesAKeyThatBothEndsDerive) {
  listen_sealed(7483, seal::Mode::kEncrypt);
  wire::CmReq req = req_for(7483);
  req.local_ca_guid = verbs::node_guid_from_ip(ip(g_peer.c_str()));
  ASSERT_TRUE(wire::is_uroce_guid(req.local_ca_guid));
  send(wire::build_cm_mad(wire::CmMad{0x80, req}));
  auto ev = next_event();
  ASSERT_TRUE(ev.has_value());
  ASSERT_EQ(ev->event, 4u);
  EXPECT_TRUE(ev->qp.peer_uroce);
  // The application's private data is its own: all 56 bytes after the rdma_cm header.
  EXPECT_EQ(ev->conn.private_data_len, 56);
  accept(*ev, 0x778, seal::Mode::kEncrypt);
  const auto rep = receive_raw();
  ASSERT_EQ(rep.size(), wire::kMadBytes + kExtensionBytes);
  auto m = wire::parse_cm_mad(ConstBytes(rep).first(wire::kMadBytes));
  ASSERT_TRUE(m.ok());
  const auto& r = std::get<wire::CmRep>(m->message);
  EXPECT_EQ(std::memcmp(rep.data() + wire::kMadBytes, "urkx", 4), 0);
  seal::PublicShare device_share;
  std::memcpy(device_share.data(), rep.data() + wire::kMadBytes + 8, device_share.size());
  // The active side's half, as a uroce coordinator does it.
  auto own = seal::KeyShare::generate();
  ASSERT_TRUE(own.ok());
  seal::ConnectionIdentity id = identity_of(req, r);
  id.active_share = own->public_share();
  id.passive_share = device_share;
  const auto key = own->derive(device_share, id);
  ASSERT_TRUE(key.ok()) << key.error();
  std::array<std::byte, kExtensionBytes> ext{};
  std::memcpy(ext.data(), "urkx", 4);
  ext[4] = std::byte{1};
  std::memcpy(ext.data() + 8, own->public_share().data(), seal::kPublicShareBytes);
  send_rtu(r.local_comm_id, ext);
  auto est = next_event();
  ASSERT_TRUE(est.has_value());
  ASSERT_EQ(est->event, 9u);  // ESTABLISHED, with the connection's key
  ASSERT_EQ(est->qp.seal_key_bytes, 32u);
  EXPECT_EQ(std::memcmp(est->qp.seal_key.data(), key->bytes.data(), 32), 0);
  EXPECT_EQ(cm_counters()["keys_agreed"], 1u);
}

// The device's side active: its REQ to a peer is the plain 256-byte REQ (it does not know what the
// peer is) with the application's private data as given. A REP from an rxe peer (no mark, no
// public value) under `require`: a REJ with the reason on the wire, REJECTED (28) for the client.
TEST_F(CmKeysTest, AnActiveSideUnderRequireRefusesAnRxeReply) {
  const std::uint32_t id = resolved_id(7484);
  devd::CmMsg m;
  m.type = devd::CmMsgType::kConnect;
  m.id = id;
  m.conn.qp_num = 0x779;
  m.conn.starting_psn = 0x4242;
  m.conn.responder_resources = 1;
  m.conn.initiator_depth = 1;
  m.conn.retry_count = 7;
  m.conn.rnr_retry_count = 7;
  m.conn.private_data_len = 56;
  std::memset(m.conn.private_data, 0x5a, 56);  // all the room the application has
  m.seal_mode = static_cast<std::uint8_t>(seal::Mode::kRequire);
  ASSERT_EQ(call(m).status, 0);
  const auto raw = receive_raw();
  ASSERT_EQ(raw.size(), wire::kMadBytes);
  auto got = wire::parse_cm_mad(raw);
  ASSERT_TRUE(got.ok());
  const auto& req = std::get<wire::CmReq>(got->message);
  EXPECT_TRUE(wire::is_uroce_guid(req.local_ca_guid));
  for (std::size_t i = wire::kCmaHeaderBytes; i < req.private_data.size(); ++i) {
    ASSERT_EQ(req.private_data[i], 0x5a) << i;
  }
  wire::CmRep rep;
  rep.local_comm_id = 0x66;
  rep.remote_comm_id = req.local_comm_id;
  rep.local_qpn = 0x888;
  rep.starting_psn = 0x1111;
  rep.responder_resources = 1;
  rep.initiator_depth = 1;
  rep.rnr_retry_count = 7;
  rep.local_ca_guid = 0x0200000000000002ull;  // rxe's kind
  send(wire::build_cm_mad(wire::CmMad{got->transaction_id, rep}));
  const auto rej = receive();
  ASSERT_TRUE(rej.has_value());
  ASSERT_TRUE(std::holds_alternative<wire::CmRej>(rej->message));
  const auto& j = std::get<wire::CmRej>(rej->message);
  EXPECT_EQ(j.remote_comm_id, 0x66u);
  EXPECT_EQ(j.reason, static_cast<std::uint16_t>(wire::CmRejReason::kConsumerDefined));
  const std::string text(reinterpret_cast<const char*>(j.private_data.data()),
                         kRequireRejectText.size());
  EXPECT_EQ(text, kRequireRejectText);
  auto ev = next_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->event, 8u);  // RDMA_CM_EVENT_REJECTED
  EXPECT_EQ(ev->status, 28);
  EXPECT_EQ(ev->qp.seal_key_bytes, 0u);
  EXPECT_EQ(cm_counters()["keys_refused"], 1u);
}

// A passive side under `require` knows from the REQ whether the active side will key: a uroce
// REQ whose Local CA GUID does not offer a key (its device at `off`) is refused before the REP,
// with the reason and counted, where before it came up and then lost every packet; the same REQ
// with the offer reaches the listener.
TEST_F(CmKeysTest, APassiveRequireRefusesAUroceRequestWithoutAKeyOffer) {
  listen_sealed(7485, seal::Mode::kRequire);
  wire::CmReq req = req_for(7485);
  req.local_ca_guid = verbs::node_guid_from_ip(ip(g_peer.c_str()));
  ASSERT_FALSE(wire::offers_key(req.local_ca_guid));
  send(wire::build_cm_mad(wire::CmMad{0x80, req}));
  const auto rej = receive();
  ASSERT_TRUE(rej.has_value());
  ASSERT_TRUE(std::holds_alternative<wire::CmRej>(rej->message));
  const auto& j = std::get<wire::CmRej>(rej->message);
  EXPECT_EQ(j.reason, static_cast<std::uint16_t>(wire::CmRejReason::kConsumerDefined));
  const std::string text(reinterpret_cast<const char*>(j.private_data.data()),
                         kRequireRejectText.size());
  EXPECT_EQ(text, kRequireRejectText);
  pollfd p{chan_, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 200), 0) << "the refused request reached the listener";
  EXPECT_EQ(cm_counters()["keys_refused"], 1u);

  req.local_comm_id = 0x56;
  req.local_qpn = 0x347;
  req.local_ca_guid |= wire::kUroceGuidKeyOffer;
  ASSERT_TRUE(wire::is_uroce_guid(req.local_ca_guid));
  send(wire::build_cm_mad(wire::CmMad{0x81, req}));
  auto ev = next_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->event, 4u);  // CONNECT_REQUEST
  EXPECT_TRUE(ev->qp.peer_offers_key);
  EXPECT_EQ(cm_counters()["keys_refused"], 1u);
}

// The device's REQ offers a key when its ID seals, and only then.
TEST_F(CmKeysTest, TheRequestOffersAKeyWhenTheIdSeals) {
  for (const seal::Mode mode : {seal::Mode::kOff, seal::Mode::kEncrypt}) {
    const std::uint32_t id = resolved_id(7486);
    devd::CmMsg m;
    m.type = devd::CmMsgType::kConnect;
    m.id = id;
    m.conn.qp_num = mode == seal::Mode::kOff ? 0x77a : 0x77b;
    m.seal_mode = static_cast<std::uint8_t>(mode);
    ASSERT_EQ(call(m).status, 0);
    const auto got = receive();
    ASSERT_TRUE(got.has_value());
    const auto& req = std::get<wire::CmReq>(got->message);
    EXPECT_TRUE(wire::is_uroce_guid(req.local_ca_guid));
    EXPECT_EQ(wire::offers_key(req.local_ca_guid), mode != seal::Mode::kOff);
    EXPECT_EQ(req.local_ca_guid & ~wire::kUroceGuidKeyOffer,
              verbs::node_guid_from_ip(ip(g_device.c_str())));
  }
}

// With a pre-shared key the device's REP carries a version 2 extension, its public value with
// an HMAC under the key; an RTU whose public value was swapped on the way (its MAC is over
// another) gets no key, counted, and the connection a DREQ.
TEST_F(CmKeysTest, WithAPskASwappedRtuValueIsRefusedWithADisconnect) {
  const seal::Key psk = seal::parse_key_hex(std::string(64, '7')).value();
  const std::uint32_t lid = create_id();
  bind(lid, 7487);
  devd::CmMsg l;
  l.type = devd::CmMsgType::kListen;
  l.id = lid;
  l.seal_mode = static_cast<std::uint8_t>(seal::Mode::kEncrypt);
  l.psk_bytes = 32;
  std::memcpy(l.psk, psk.bytes.data(), 32);
  ASSERT_EQ(call(l).status, 0);
  wire::CmReq req = req_for(7487);
  req.local_ca_guid = verbs::node_guid_from_ip(ip(g_peer.c_str())) | wire::kUroceGuidKeyOffer;
  send(wire::build_cm_mad(wire::CmMad{0x80, req}));
  auto ev = next_event();
  ASSERT_TRUE(ev.has_value());
  ASSERT_EQ(ev->event, 4u);
  devd::CmMsg a;
  a.type = devd::CmMsgType::kAccept;
  a.id = ev->id;
  a.conn.qp_num = 0x779;
  a.conn.responder_resources = 1;
  a.conn.initiator_depth = 1;
  a.seal_mode = l.seal_mode;
  a.psk_bytes = 32;
  std::memcpy(a.psk, psk.bytes.data(), 32);
  ASSERT_EQ(call(a).status, 0);
  const auto rep = receive_raw();
  ASSERT_EQ(rep.size(), wire::kMadBytes + kAuthExtensionBytes);
  EXPECT_EQ(static_cast<std::uint8_t>(rep[wire::kMadBytes + 4]), kAuthExtensionVersion);
  const auto parsed = wire::parse_cm_mad(ConstBytes(rep).first(wire::kMadBytes));
  ASSERT_TRUE(parsed.ok());
  const auto& r = std::get<wire::CmRep>(parsed->message);
  seal::ConnectionIdentity id = identity_of(req, r);
  std::memcpy(id.passive_share.data(), rep.data() + wire::kMadBytes + 8, seal::kPublicShareBytes);
  seal::TranscriptMac mac;
  std::memcpy(mac.data(), rep.data() + wire::kMadBytes + kExtensionBytes, mac.size());
  const seal::CmPsk cm_psk = seal::cm_psk_from(psk).value();
  EXPECT_TRUE(seal::transcript_mac_ok(cm_psk, seal::ShareRole::kPassive, id, mac));
  // The active side's RTU, authenticated, then its public value swapped by Mallory.
  auto own = seal::KeyShare::generate().value();
  auto mallory = seal::KeyShare::generate().value();
  id.active_share = own.public_share();
  std::array<std::byte, kAuthExtensionBytes> ext{};
  std::memcpy(ext.data(), "urkx", 4);
  ext[4] = static_cast<std::byte>(kAuthExtensionVersion);
  std::memcpy(ext.data() + 8, mallory.public_share().data(), seal::kPublicShareBytes);
  const auto rtu_mac = seal::transcript_mac(cm_psk, seal::ShareRole::kActive, id).value();
  std::memcpy(ext.data() + kExtensionBytes, rtu_mac.data(), rtu_mac.size());
  send_rtu(r.local_comm_id, ext);
  auto est = next_event();
  ASSERT_TRUE(est.has_value());
  ASSERT_EQ(est->event, 9u);  // ESTABLISHED (the RTU came), without a key
  EXPECT_EQ(est->qp.seal_key_bytes, 0u);
  const auto dreq = receive();
  ASSERT_TRUE(dreq.has_value());
  EXPECT_TRUE(std::holds_alternative<wire::CmDreq>(dreq->message));
  auto c = cm_counters();
  EXPECT_EQ(c["keys_auth_failed"], 1u);
  EXPECT_EQ(c["keys_agreed"], 0u);
}

// CmKeys alone (no sockets): two coordinators' halves, the active and the passive side, with the
// MADs between them handed over by the test, which may change them on the way as an on-path
// attacker would (swap a public value, strip the MAC or the whole extension) or give the two
// sides different pre-shared keys.
namespace keys {

constexpr std::uint32_t kActiveId = 0xa1a1a1a1;
constexpr std::uint32_t kPassiveId = 0xb2b2b2b2;

cm::Gid gid_of(std::uint8_t last) {
  cm::Gid g{};
  g[10] = 0xff;
  g[11] = 0xff;
  g[12] = 10;
  g[15] = last;
  return g;
}

using Tamper = std::function<void(std::vector<std::byte>&)>;

struct Outcome {
  Refusal active = Refusal::kNone;  // what the active side made of the REP
  bool passive_ok = false;          // what the passive side made of the RTU
  cm::QpAttributes aq, pq;          // the two QPs' attributes (their keys)
  CmKeyCounters ac, pc;
};

std::optional<seal::CmPsk> psk(char digit) {
  return seal::cm_psk_from(seal::parse_key_hex(std::string(64, digit)).value()).value();
}

std::vector<std::byte> payload(const wire::CmMessage& msg, const std::optional<Extension>& ext) {
  const auto mad = wire::build_cm_mad(wire::CmMad{0x42, msg});
  std::vector<std::byte> p(mad.begin(), mad.end());
  if (!ext) return p;
  // Sized first and copied by index: GCC 12 at -O2 misreads insert() of a span over a fixed
  // array as reading past it (-Warray-bounds), which broke the Release build with tests.
  const ConstBytes tail = ext->view();
  const std::size_t at = p.size();
  p.resize(at + tail.size());
  for (std::size_t i = 0; i < tail.size(); ++i) p[at + i] = tail[i];
  return p;
}

Outcome agree(const std::optional<seal::CmPsk>& apsk, const std::optional<seal::CmPsk>& ppsk,
              const Tamper& on_rep = {}, const Tamper& on_rtu = {}) {
  Outcome run;
  CmKeys active(gid_of(1));
  CmKeys passive(gid_of(2));
  run.aq.local_qpn = 0x100;
  run.aq.remote_qpn = 0x200;
  run.aq.remote_gid = gid_of(2);
  run.aq.peer_uroce = true;
  run.pq.local_qpn = 0x200;
  run.pq.remote_qpn = 0x100;
  run.pq.remote_gid = gid_of(1);
  run.pq.peer_uroce = true;
  run.pq.peer_offers_key = true;
  const seal::Mode mode = seal::Mode::kEncrypt;
  EXPECT_EQ(passive.on_request(run.pq, mode, ppsk.has_value()), Refusal::kNone);
  passive.on_accept(cm::ConnId{kPassiveId}, run.pq, mode, ppsk);
  wire::CmRep rep;
  rep.local_comm_id = kPassiveId;
  rep.remote_comm_id = kActiveId;
  auto p = payload(rep, passive.extension_for(payload(rep, std::nullopt)));
  if (on_rep) on_rep(p);
  EXPECT_TRUE(active.on_receive(p).has_value());
  run.active = active.on_connect_response(cm::ConnId{kActiveId}, run.aq, mode, apsk);
  if (run.active == Refusal::kNone) {
    wire::CmRtu rtu;
    rtu.local_comm_id = kActiveId;
    rtu.remote_comm_id = kPassiveId;
    p = payload(rtu, active.extension_for(payload(rtu, std::nullopt)));
    if (on_rtu) on_rtu(p);
    EXPECT_TRUE(passive.on_receive(p).has_value());
    run.passive_ok = passive.on_established(cm::ConnId{kPassiveId}, run.pq);
  }
  run.ac = active.counters();
  run.pc = passive.counters();
  return run;
}

bool same_key(const Outcome& r) {
  return r.aq.seal_key_bytes == 32 && r.pq.seal_key_bytes == 32 && r.aq.seal_key == r.pq.seal_key;
}

// Mallory's public value in place of the sender's (the MAC, if any, left as it was).
Tamper swap_share() {
  return [](std::vector<std::byte>& p) {
    const auto m = seal::KeyShare::generate().value();
    std::memcpy(p.data() + wire::kMadBytes + 8, m.public_share().data(), seal::kPublicShareBytes);
  };
}
// The MAC stripped: a version 1 extension.
Tamper strip_mac() {
  return [](std::vector<std::byte>& p) {
    p.resize(wire::kMadBytes + kExtensionBytes);
    p[wire::kMadBytes + 4] = static_cast<std::byte>(kExtensionVersion);
  };
}
Tamper strip_extension() {
  return [](std::vector<std::byte>& p) { p.resize(wire::kMadBytes); };
}

TEST(CmKeys, WithAPskBothSidesAgreeAKeyThatNeedsThePsk) {
  const Outcome with = agree(psk('1'), psk('1'));
  EXPECT_EQ(with.active, Refusal::kNone);
  EXPECT_TRUE(with.passive_ok);
  EXPECT_TRUE(same_key(with));
  EXPECT_EQ(with.ac.agreed, 1u);
  EXPECT_EQ(with.pc.agreed, 1u);
  EXPECT_EQ(with.ac.auth_failed + with.pc.auth_failed, 0u);
  const Outcome without = agree(std::nullopt, std::nullopt);
  EXPECT_TRUE(same_key(without));
  EXPECT_NE(with.aq.seal_key, without.aq.seal_key);
}

TEST(CmKeys, WithoutAPskASwappedValueGoesUnnoticedAndTheKeysDiffer) {
  // What an active on-path attacker could do before: the exchange completes with Mallory's
  // value in it, each side holding a key Mallory shares (here: the two differ).
  const Outcome r = agree(std::nullopt, std::nullopt, swap_share());
  EXPECT_EQ(r.active, Refusal::kNone);
  EXPECT_TRUE(r.passive_ok);
  EXPECT_FALSE(same_key(r));
}

TEST(CmKeys, WithAPskAnActiveSideRefusesASwappedOrStrippedReply) {
  for (const Tamper& t : {swap_share(), strip_mac(), strip_extension()}) {
    const Outcome r = agree(psk('1'), psk('1'), t);
    EXPECT_EQ(r.active, Refusal::kAuth);
    EXPECT_EQ(r.aq.seal_key_bytes, 0u);
    EXPECT_EQ(r.ac.auth_failed, 1u);
    EXPECT_EQ(r.ac.agreed, 0u);
  }
}

TEST(CmKeys, WithAPskAPassiveSideRefusesASwappedOrStrippedRtu) {
  for (const Tamper& t : {swap_share(), strip_mac(), strip_extension()}) {
    const Outcome r = agree(psk('1'), psk('1'), {}, t);
    EXPECT_EQ(r.active, Refusal::kNone);
    EXPECT_FALSE(r.passive_ok);
    EXPECT_EQ(r.pq.seal_key_bytes, 0u);
    EXPECT_EQ(r.pc.auth_failed, 1u);
    EXPECT_EQ(r.pc.agreed, 0u);
  }
}

TEST(CmKeys, AWrongPskOrAPskOnOneSideOnlyIsRefused) {
  Outcome r = agree(psk('1'), psk('2'));  // another psk=
  EXPECT_EQ(r.active, Refusal::kAuth);
  EXPECT_EQ(r.ac.auth_failed, 1u);
  r = agree(std::nullopt, psk('2'));  // the passive side's MAC cannot be checked
  EXPECT_EQ(r.active, Refusal::kAuth);
  r = agree(psk('1'), std::nullopt);  // the passive side sends no MAC
  EXPECT_EQ(r.active, Refusal::kAuth);
}

TEST(CmKeys, APskOrRequireRefusesARequestWithoutAKeyOffer) {
  CmKeys passive(gid_of(2));
  cm::QpAttributes q;
  q.peer_uroce = true;
  q.peer_offers_key = false;  // a uroce peer at `off`, or the offer stripped
  EXPECT_EQ(passive.on_request(q, seal::Mode::kEncrypt, false), Refusal::kNone);
  EXPECT_EQ(passive.on_request(q, seal::Mode::kEncrypt, true), Refusal::kAuth);
  EXPECT_EQ(passive.on_request(q, seal::Mode::kRequire, false), Refusal::kPlain);
  EXPECT_EQ(passive.on_request(q, seal::Mode::kOff, true), Refusal::kNone);
  q.peer_offers_key = true;
  EXPECT_EQ(passive.on_request(q, seal::Mode::kRequire, true), Refusal::kNone);
  q.peer_uroce = false;  // rxe: refused under require only (a psk= alone keeps it as it was)
  EXPECT_EQ(passive.on_request(q, seal::Mode::kRequire, false), Refusal::kPlain);
  EXPECT_EQ(passive.on_request(q, seal::Mode::kEncrypt, true), Refusal::kNone);
  EXPECT_EQ(passive.counters().refused, 3u);
  EXPECT_EQ(passive.counters().auth_failed, 1u);
}

}  // namespace keys

// A closed QP's expiry is one of the deadlines the coordinator polls for; once served it moves
// on. It did not while a context was connected: only the coordinator's idle check (which it skips
// while there are contexts) forgot expired entries, so its poll returned at once, over and over,
// until the last context left: a busy core beside a benchmark that started within a few seconds of
// the previous one (bench/net_bench.sh's READ and SEND runs lost 15-20% of their bandwidth).
TEST(CmServerDeadline, AClosedQpsExpiryIsServedOnce) {
  const char* const dev_ip = ::uroce::test::unique_ip();
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(wire::kRoceV2Port);
  std::memcpy(&a.sin_addr, ip(dev_ip).bytes.data(), 4);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  auto s = CmServer::open(ip(dev_ip), wire::kRoceV2Port, fd, 1);
  ASSERT_TRUE(s.ok()) << s.error();
  CmServer& cm = *s.value();
  const Instant t0 = Instant::from_ns(1'000'000'000);
  EXPECT_TRUE(cm.next_deadline().is_never());
  transport::ClosedQp q;
  q.qpn = 0x123456;
  q.until = t0 + Duration::s(1);
  cm.keep_closed_qp(q);
  q.qpn = 0x123457;
  q.until = t0 + Duration::s(3);
  cm.keep_closed_qp(q);
  EXPECT_EQ(cm.next_deadline(), t0 + Duration::s(3));  // the coordinator may exit after it
  cm.on_timeout(t0 + Duration::s(1));
  EXPECT_EQ(cm.next_deadline(), t0 + Duration::s(3));
  cm.on_timeout(t0 + Duration::s(3));
  EXPECT_TRUE(cm.next_deadline().is_never());
  EXPECT_FALSE(cm.keeps_closed_qps(t0 + Duration::s(3)));
}

}  // namespace
}  // namespace uroce::engine
