// RoCE packets through datapath/udp on loopback: a sender process pushes RDMA WRITE messages
// (First, Middle..., Last packets, headers built by uroce's wire code, payload straight from a
// buffer as from registered memory) through a UdpDatapath, a receiver process takes them from
// another UdpDatapath (parse, ICRC check) and counts the payload. No transport, no engine: the
// cost of the datapath alone, with and without batching and GSO/GRO, to set beside
// udp_baseline's raw UDP numbers (scripts/bench-udp.sh runs both).
//
//   datapath_bench [--mode single|mmsg|gso] [--seconds S] [--mtu 4096] [--message 65536]
//                  [--flush 64]
//     single: one packet per system call each way (tx_batch 1, rx_batch 1, no GSO/GRO), as
//             the datapath was before batching.
//     mmsg:   sendmmsg of up to 64 packets, recvmmsg of up to 16 datagrams; no GSO/GRO.
//     gso:    as mmsg, with UDP GSO for runs of equal-size packets and UDP_GRO on receive.
//   The sender flushes every --flush packets (the engine flushes at the end of each flush_tx).
// Prints one JSON object. Payload rate counts RDMA payload bytes; wire rate counts UDP payload
// (BTH through ICRC).
//
//   datapath_bench --pingpong N [--mode gso]
//     What an RC ping-pong of 8-byte RDMA WRITEs (`uroce perf write_lat -s 8`) asks of the
//     datapath and the wire code, with no transport, engine or verbs: each hop is an RDMA WRITE
//     Only of 8 bytes and the ACK of the peer's last one (held for it, as uroce's responder
//     holds it), built with uroce's wire code, sent through UdpDatapath::send() and one
//     flush(), received by the peer's UdpDatapath::receive() (parse, ICRC check), the payload
//     copied to a buffer standing in for the memory region; the peer answers once it has both.
//     N timed round trips after 1000 of warm-up; prints the one-way latency (half the round
//     trip: median, mean, 99th percentile). Between udp_baseline's ping-pong with uroce's
//     system calls (the kernel's share) and uroce perf write_lat (everything), this is the
//     share of the datapath and the wire code.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "datapath/udp.h"
#include "two_process.h"
#include "wire/builder.h"

namespace {

using namespace uroce;
using namespace uroce::bench;

wire::IpAddress v4(const char* s) {
  wire::IpAddress a;
  ::inet_pton(AF_INET, s, a.bytes.data());
  return a;
}

// A free UDP port on `ip` (the datapath needs its real port: the ICRC covers it).
std::uint16_t free_port(const char* ip) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

datapath::UdpOptions options(const std::string& mode, const char* ip, std::uint16_t port) {
  datapath::UdpOptions o(v4(ip), port);
  o.gso = mode == "gso";
  o.gro = mode == "gso";
  o.tx_batch = mode == "single" ? 1 : 64;
  o.rx_batch = mode == "single" ? 1 : 16;
  return o;
}

constexpr std::uint64_t kWindowBytes = 2u << 20;  // payload in flight (see CreditWindow)

// One side of the ping-pong of --pingpong: the hop it sends and the hop it waits for.
class PingPongSide {
 public:
  PingPongSide(datapath::UdpDatapath& d, const char* peer, std::uint16_t peer_port) : d_(d) {
    // As the engine configures its datapath (device/udp_device.cc): the IP header is written
    // for UD packets only, continuations' ICRCs are checked where their payload is placed.
    d_.set_ip_header_for_ud_only(true);
    d_.set_deferred_icrc(true);
    out_.dst = v4(peer);
    out_.dst_port = peer_port;
    write_.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcRdmaWriteOnly);
    write_.bth.dest_qpn = 0x11;
    write_.reth = wire::Reth{0x10000, 0x1234, 8};
    ack_.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcAcknowledge);
    ack_.bth.dest_qpn = 0x11;
  }
  // The WRITE of `seq` (its 8 bytes) and, with `ack`, the ACK of the peer's WRITE `acked`, in
  // one flush.
  void send(std::uint64_t seq, bool ack, std::uint64_t acked) {
    write_.bth.psn = static_cast<std::uint32_t>(seq) & 0xffffff;
    std::memcpy(src_.data(), &seq, sizeof seq);
    std::size_t n = wire::write_headers(hdr_, write_, src_.size());
    const std::array<ConstBytes, 1> piece = {ConstBytes(src_)};
    d_.send(Instant{}, out_, ConstBytes(hdr_).first(n), piece);
    if (ack) {
      ack_.bth.psn = static_cast<std::uint32_t>(acked) & 0xffffff;
      ack_.aeth.msn = static_cast<std::uint32_t>(acked + 1) & 0xffffff;
      n = wire::write_headers(hdr_, ack_, 0);
      d_.send(Instant{}, out_, ConstBytes(hdr_).first(n), {});
    }
    d_.flush(Instant{});
  }
  // Polls until the peer's WRITE of `seq` and, with `ack`, its ACK of ours arrived; false when
  // the run is over or a packet is not what the hop carries.
  bool wait(std::uint64_t seq, bool ack, Shared& sh) {
    const std::size_t want = ack ? 2 : 1;
    seq_ = seq;
    got_ = 0;
    bad_ = false;
    while (got_ < want) {
      d_.receive(16, handler_);
      if (sh.phase.load(std::memory_order_relaxed) == kWindowClosed) return false;
    }
    if (bad_ || got_ != want) fail(sh, "a hop's packets are not the WRITE and ACK it sent");
    return !bad_ && got_ == want;
  }

 private:
  void take(const wire::RocePacket& p) {
    ++got_;
    if (p.op->opcode() == wire::Opcode::kRcRdmaWriteOnly && p.payload.size() == dst_.size()) {
      std::memcpy(dst_.data(), p.payload.data(), dst_.size());  // the placement
      std::uint64_t v = 0;
      std::memcpy(&v, dst_.data(), sizeof v);
      bad_ |= v != seq_;
    } else {
      bad_ |= p.op->opcode() != wire::Opcode::kRcAcknowledge;
    }
  }

  datapath::UdpDatapath& d_;
  // Made once: a std::function made per call would allocate (its captures exceed its buffer).
  const datapath::UdpDatapath::RxHandler handler_ = [this](const wire::RocePacket& p,
                                                           const datapath::RxMeta&) { take(p); };
  std::uint64_t seq_ = 0;
  std::size_t got_ = 0;
  bool bad_ = false;
  wire::OuterHeaders out_;
  wire::TransportHeaders write_, ack_;
  std::array<std::byte, 64> hdr_{};
  std::array<std::byte, 8> src_{}, dst_{};
};

int pingpong(const std::string& mode, std::size_t iters) {
  constexpr std::size_t kWarmup = 1000;
  const std::uint16_t echo_port = free_port("127.0.0.2");
  const std::uint16_t client_port = free_port("127.0.0.1");
  Shared* s = run_pair(
      [&](Shared& sh) {
        auto dp = datapath::UdpDatapath::open(options(mode, "127.0.0.2", echo_port));
        if (!dp.ok()) return fail(sh, "echo: " + dp.error().text);
        PingPongSide side(*dp.value(), "127.0.0.1", client_port);
        sh.phase.store(kReceiverReady);
        const double cpu0 = cpu_seconds();
        for (std::uint64_t i = 0; i < kWarmup + iters; ++i) {
          // The client's first WRITE carries no ACK; every answer ACKs the WRITE it answers.
          if (!side.wait(i, i > 0, sh)) return;
          side.send(i, true, i);
        }
        sh.rx_cpu_s = cpu_seconds() - cpu0;
      },
      [&](Shared& sh) {
        auto dp = datapath::UdpDatapath::open(options(mode, "127.0.0.1", client_port));
        if (!dp.ok()) return fail(sh, "client: " + dp.error().text);
        PingPongSide side(*dp.value(), "127.0.0.2", echo_port);
        std::vector<double> rtt;
        rtt.reserve(iters);
        const double cpu0 = cpu_seconds();
        for (std::uint64_t i = 0; i < kWarmup + iters; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          side.send(i, i > 0, i - 1);
          if (!side.wait(i, true, sh)) return;
          const std::chrono::duration<double, std::micro> us =
              std::chrono::steady_clock::now() - t0;
          if (i >= kWarmup) rtt.push_back(us.count());
        }
        sh.tx_cpu_s = cpu_seconds() - cpu0;
        double sum = 0;
        for (double x : rtt) sum += x;
        std::sort(rtt.begin(), rtt.end());
        sh.extra[0] = rtt[rtt.size() / 2] / 2;
        sh.extra[1] = sum / static_cast<double>(rtt.size()) / 2;
        sh.extra[2] = rtt[rtt.size() * 99 / 100] / 2;
        sh.extra[3] = rtt.front() / 2;
        sh.phase.store(kWindowClosed);
      },
      60 + static_cast<double>(iters) / 10000);
  if (s == nullptr) return 1;
  std::printf(
      "{\"mode\":\"%s\",\"pingpong\":%zu,\"one_way_us\":%.3f,\"one_way_us_mean\":%.3f,"
      "\"one_way_us_p99\":%.3f,\"one_way_us_min\":%.3f,\"client_cpu_s\":%.3f,"
      "\"echo_cpu_s\":%.3f}\n",
      mode.c_str(), iters, s->extra[0], s->extra[1], s->extra[2], s->extra[3], s->tx_cpu_s,
      s->rx_cpu_s);
  return 0;
}

// Extras in Shared::extra.
enum Extra {
  kRxBadIcrc,
  kRxDrops,
  kRxGroDatagrams,
  kRxDatagrams,
  kTxGsoDatagrams,
  kTxDatagrams,
  kRxWireBytes,
  kTxBlocked,
  kExtraCount
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"datapath_bench: RoCE packets through datapath/udp on loopback"};
  std::string mode = "gso";
  double seconds = 3;
  std::size_t mtu = 4096, message = 65536, flush_every = 64;
  app.add_option("--mode", mode, "single, mmsg or gso")
      ->check(CLI::IsMember({"single", "mmsg", "gso"}));
  app.add_option("--seconds", seconds, "measurement window")->check(CLI::Range(0.1, 600.0));
  app.add_option("--mtu", mtu, "payload bytes per packet")
      ->check(CLI::IsMember({256, 512, 1024, 2048, 4096}));
  app.add_option("--message", message, "bytes per RDMA WRITE")->check(CLI::Range(1, 1 << 24));
  app.add_option("--flush", flush_every, "packets between flushes")->check(CLI::Range(1, 4096));
  std::size_t pingpong_iters = 0;
  app.add_option("--pingpong", pingpong_iters,
                 "latency instead: N round trips of an 8-byte RDMA WRITE and the ACK it holds")
      ->check(CLI::Range(1, 100000000));
  CLI11_PARSE(app, argc, argv);
  if (pingpong_iters > 0) return pingpong(mode, pingpong_iters);

  const std::uint16_t rx_port = free_port("127.0.0.2");
  const std::uint16_t tx_port = free_port("127.0.0.1");
  Shared* s = run_pair(
      [&](Shared& sh) {
        auto dp = datapath::UdpDatapath::open(options(mode, "127.0.0.2", rx_port));
        if (!dp.ok()) return fail(sh, "receiver: " + dp.error().text);
        datapath::UdpDatapath& d = *dp.value();
        const int big = 64 << 20;
        ::setsockopt(d.fd(), SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
        sh.phase.store(kReceiverReady);
        ReceiverWindow window(sh, seconds);
        std::uint64_t payload = 0, packets = 0;
        const auto handler = [&](const wire::RocePacket& p, const datapath::RxMeta&) {
          payload += p.payload.size();
          ++packets;
        };
        const auto c0 = d.counters();
        while (!window.done()) {
          if (sh.phase.load(std::memory_order_relaxed) == kWindowClosed) return;
          if (d.receive(256, handler) == 0) {
            pollfd p{d.fd(), POLLIN, 0};
            ::poll(&p, 1, 100);
            continue;
          }
          window.start();
          sh.rx_progress.store(payload, std::memory_order_release);
        }
        const auto& c = d.counters();
        sh.rx_bytes = payload;
        sh.rx_packets = packets;
        sh.rx_calls = c.rx_calls - c0.rx_calls;
        sh.extra[kRxBadIcrc] =
            static_cast<double>(c.rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)]);
        std::uint64_t drops = 0;
        for (auto x : c.rx_drops) drops += x;
        sh.extra[kRxDrops] = static_cast<double>(drops);
        sh.extra[kRxGroDatagrams] = static_cast<double>(c.rx_gro_datagrams);
        sh.extra[kRxDatagrams] = static_cast<double>(c.rx_datagrams);
        sh.extra[kRxWireBytes] = static_cast<double>(c.rx_bytes);
      },
      [&](Shared& sh) {
        auto dp = datapath::UdpDatapath::open(options(mode, "127.0.0.1", tx_port));
        if (!dp.ok()) return fail(sh, "sender: " + dp.error().text);
        datapath::UdpDatapath& d = *dp.value();
        std::vector<std::byte> data(message, std::byte{0x5a});
        const std::size_t npkts = (message + mtu - 1) / mtu;
        wire::TransportHeaders h;
        h.bth.dest_qpn = 0x11;
        h.reth = wire::Reth{0x10000, 0x1234, static_cast<std::uint32_t>(message)};
        wire::OuterHeaders o;
        o.dst = v4("127.0.0.2");
        o.dst_port = rx_port;
        std::array<std::byte, 64> hdr{};
        SenderWindow window(sh);
        CreditWindow credit(sh, kWindowBytes);
        std::uint64_t sent_payload = 0, since_flush = 0;
        std::uint32_t psn = 0;
        const auto c0 = d.counters();
        while (window.tick()) {
          if (credit.full(sent_payload)) {
            d.flush(Instant{});  // what is queued must go before waiting for the receiver
            since_flush = 0;
            credit.wait(sent_payload);
          }
          for (std::size_t i = 0; i < npkts; ++i) {
            const bool first = i == 0, last = i + 1 == npkts;
            h.bth.opcode = static_cast<std::uint8_t>(first && last ? wire::Opcode::kRcRdmaWriteOnly
                                                     : first       ? wire::Opcode::kRcRdmaWriteFirst
                                                     : last        ? wire::Opcode::kRcRdmaWriteLast
                                                            : wire::Opcode::kRcRdmaWriteMiddle);
            h.bth.psn = psn++ & 0xffffff;
            const std::size_t bytes = last ? message - i * mtu : mtu;
            h.bth.pad_count = wire::pad_for(bytes);
            const std::size_t n = wire::write_headers(hdr, h, bytes);
            const std::array<ConstBytes, 1> piece = {ConstBytes(data).subspan(i * mtu, bytes)};
            while (!d.send(Instant{}, o, ConstBytes(hdr).first(n), piece)) d.flush(Instant{});
            sent_payload += bytes;
            if (window.open()) {
              sh.tx_bytes += bytes;
              ++sh.tx_packets;
            }
            if (++since_flush == flush_every) {
              d.flush(Instant{});
              since_flush = 0;
            }
          }
        }
        d.flush(Instant{});
        const auto& c = d.counters();
        sh.tx_calls = c.tx_calls - c0.tx_calls;
        sh.extra[kTxGsoDatagrams] = static_cast<double>(c.tx_gso_datagrams);
        sh.extra[kTxDatagrams] = static_cast<double>(c.tx_datagrams);
        sh.extra[kTxBlocked] = static_cast<double>(c.tx_blocked);
      },
      seconds + 20);
  if (s == nullptr) return 1;
  // The receiver writes its totals when the window closes; the sender's counters after.
  const double secs = s->rx_seconds;
  std::printf(
      "{\"mode\":\"%s\",\"mtu\":%zu,\"message\":%zu,\"flush\":%zu,\"payload_bytes\":%llu,"
      "\"seconds\":%.3f,\"gbit_per_s\":%.3f,\"wire_gbit_per_s\":%.3f,\"packets\":%llu,"
      "\"pps\":%.0f,\"sender_cpu_s\":%.3f,\"receiver_cpu_s\":%.3f,\"rx_bad_icrc\":%.0f,"
      "\"rx_drops\":%.0f,\"rx_datagrams\":%.0f,\"rx_gro_datagrams\":%.0f,\"rx_calls\":%llu,"
      "\"tx_datagrams\":%.0f,\"tx_gso_datagrams\":%.0f,\"tx_calls\":%llu,\"tx_blocked\":%.0f,"
      "\"sender_stalls\":%llu}\n",
      mode.c_str(), mtu, message, flush_every, static_cast<unsigned long long>(s->rx_bytes), secs,
      static_cast<double>(s->rx_bytes) * 8 / secs / 1e9, s->extra[kRxWireBytes] * 8 / secs / 1e9,
      static_cast<unsigned long long>(s->rx_packets), static_cast<double>(s->rx_packets) / secs,
      s->tx_cpu_s, s->rx_cpu_s, s->extra[kRxBadIcrc], s->extra[kRxDrops], s->extra[kRxDatagrams],
      s->extra[kRxGroDatagrams], static_cast<unsigned long long>(s->rx_calls),
      s->extra[kTxDatagrams], s->extra[kTxGsoDatagrams],
      static_cast<unsigned long long>(s->tx_calls), s->extra[kTxBlocked],
      static_cast<unsigned long long>(s->tx_stalls));
  return 0;
}
