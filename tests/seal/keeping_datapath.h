// A datapath for the seal tests: it keeps what is sent and hands back what a test queues.
#pragma once

#include <deque>
#include <span>
#include <vector>

#include "datapath/datapath.h"
#include "wire/builder.h"
#include "wire/packet.h"

namespace uroce::seal {

// A datapath that keeps each sent packet (BTH to ICRC, the ICRC left zero: the checks it stands
// for are the UDP datapath's) and hands queued packets to the handler as the UDP datapath does.
class KeepingDatapath final : public datapath::Datapath {
 public:
  std::vector<std::vector<std::byte>> sent;
  std::deque<std::vector<std::byte>> inbound;
  std::size_t flushes = 0;
  std::size_t parse_drops = 0;
  datapath::RxMeta meta;  // what every packet comes with

  std::size_t receive(Instant, std::size_t max, const RxHandler& handler) override {
    std::size_t n = 0;
    while (n < max && !inbound.empty()) {
      const std::vector<std::byte> p = std::move(inbound.front());
      inbound.pop_front();
      ++n;
      auto pkt = wire::parse_roce(p, true);
      if (!pkt.ok()) {
        ++parse_drops;
        continue;
      }
      handler(pkt.value(), meta);
    }
    return n;
  }
  bool send(Instant, const wire::OuterHeaders&, ConstBytes h,
            std::span<const ConstBytes> payload) override {
    std::vector<std::byte> p(h.begin(), h.end());
    for (ConstBytes b : payload) p.insert(p.end(), b.begin(), b.end());
    p.resize(p.size() + wire::pad_for(p.size() - h.size()) + wire::kIcrcBytes);
    sent.push_back(std::move(p));
    return true;
  }
  void flush(Instant) override { ++flushes; }
};

}  // namespace uroce::seal
