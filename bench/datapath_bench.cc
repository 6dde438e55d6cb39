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
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
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
  o.use_environment = false;
  o.gso = mode == "gso";
  o.gro = mode == "gso";
  o.tx_batch = mode == "single" ? 1 : 64;
  o.rx_batch = mode == "single" ? 1 : 16;
  return o;
}

constexpr std::uint64_t kWindowBytes = 2u << 20;  // payload in flight (see CreditWindow)

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
  CLI11_PARSE(app, argc, argv);

  const std::uint16_t rx_port = free_port("127.0.0.2");
  const std::uint16_t tx_port = free_port("127.0.0.1");
  Shared* s = run_pair(
      [&](Shared& sh) {
        auto dp = datapath::UdpDatapath::open(options(mode, "127.0.0.2", rx_port));
        if (!dp.ok()) return fail(sh, "receiver: " + dp.error());
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
        if (!dp.ok()) return fail(sh, "sender: " + dp.error());
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
