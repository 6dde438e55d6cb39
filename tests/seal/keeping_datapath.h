// A datapath for the seal tests: it keeps what is sent and hands back what a test queues.
#pragma once

#include <array>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "datapath/datapath.h"
#include "wire/builder.h"
#include "wire/icrc.h"
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
  // send_built() writes the body in place, as the UDP datapath does; false: it is not offered
  // (the sealing datapath's own slots and send()).
  bool in_place = true;
  std::size_t built = 0;  // packets sent through send_built()
  // A sealed packet comes with its ICRC unchecked (RxMeta::pending), as from the UDP datapath
  // with set_accept_sealed; its ICRC counts as right when it is icrc(packet).
  bool pending_icrc = false;
  // What became of the last such check.
  struct IcrcFate {
    bool skipped = false;
    bool verified = false;
  };
  std::optional<IcrcFate> last_icrc;

  // The ICRC of a packet as these tests make it: over fixed IPv4 and UDP headers.
  static std::uint32_t icrc(ConstBytes roce) {
    return wire::icrc_continue(outer_state(roce.size()),
                               roce.first(roce.size() - wire::kIcrcBytes));
  }
  static void set_icrc(std::vector<std::byte>& roce) {
    store_le32(roce, roce.size() - wire::kIcrcBytes, icrc(roce));
  }

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
      if (!pending_icrc || !pkt.value().sealed()) {
        handler(pkt.value(), meta);
        continue;
      }
      wire::PendingIcrc pending(outer_state(p.size()), p, pkt.value().payload, nullptr);
      datapath::RxMeta m = meta;
      m.icrc_verified = false;
      m.pending = &pending;
      handler(pkt.value(), m);
      UROCE_CHECK(pending.finished());  // as the UDP datapath requires
      last_icrc = IcrcFate{pending.skipped(), pending.verified()};
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
  std::optional<bool> send_built(Instant, const wire::OuterHeaders&, ConstBytes h,
                                 std::size_t body_bytes, datapath::BodyWriter& writer) override {
    if (!in_place) return std::nullopt;
    std::vector<std::byte> p(h.size() + body_bytes + wire::kIcrcBytes);
    std::copy(h.begin(), h.end(), p.begin());
    if (!writer.write(MutBytes(p).subspan(h.size(), body_bytes))) return true;
    sent.push_back(std::move(p));
    ++built;
    return true;
  }
  void flush(Instant) override { ++flushes; }

 private:
  static std::uint32_t outer_state(std::size_t roce_bytes) {
    wire::OuterHeaders o;
    o.ethernet = false;
    o.src = wire::IpAddress::v4(0x7f000002);
    o.dst = wire::IpAddress::v4(0x7f000001);
    std::array<std::byte, 64> ip_udp;
    const std::size_t n = wire::write_outer(ip_udp, o, roce_bytes);
    return wire::icrc_outer_state(ConstBytes(ip_udp).first(n));
  }
};

}  // namespace uroce::seal
