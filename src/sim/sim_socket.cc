#include "sim/sim_socket.h"

#include <optional>

#include "wire/icrc.h"
#include "wire/packet.h"

namespace uroce::sim {

void send_frame(Network& net, HostId from, Instant now, const wire::OuterHeaders& o0,
                ConstBytes transport_headers, std::span<const ConstBytes> payload,
                std::vector<std::byte>& frame) {
  wire::OuterHeaders o = o0;
  o.src_mac = net.host_mac(from);
  if (auto to = net.find_host(o.dst)) o.dst_mac = net.host_mac(*to);
  frame.resize(16384);
  frame.resize(wire::build_frame_gather(frame, o, transport_headers, payload));
  net.send(now, from, frame);
}

std::size_t receive_frames(std::deque<std::vector<std::byte>>& inbox, std::size_t max,
                           const datapath::Datapath::RxHandler& handler,
                           const std::function<void()>& invalid) {
  std::size_t n = 0;
  while (n < max && !inbox.empty()) {
    const std::vector<std::byte> f = std::move(inbox.front());
    inbox.pop_front();
    ++n;
    auto parsed =
        wire::parse_frame(wire::LinkType::kEthernet, f, wire::FrameOptions{.verify_icrc = false});
    const bool deferred = parsed.ok() && wire::icrc_deferrable(*parsed->roce.op);
    if (!parsed.ok() || (!deferred && !wire::icrc_verify(parsed->ip_udp, parsed->roce.bytes))) {
      invalid();
      continue;
    }
    std::optional<wire::PendingIcrc> pending;
    datapath::RxMeta meta;
    meta.src = parsed->ipv4.src;
    meta.src_port = parsed->udp.src_port;
    meta.tos = parsed->ipv4.tos;
    meta.icrc_verified = !deferred;
    meta.ip_header = parsed->ip_udp.first(parsed->ip_udp.size() - wire::kUdpBytes);
    if (deferred) {
      meta.pending =
          &pending.emplace(parsed->ip_udp, parsed->roce.bytes, parsed->roce.payload, nullptr);
    }
    handler(parsed->roce, meta);
    if (pending && !pending->verified()) invalid();
  }
  return n;
}

}  // namespace uroce::sim
