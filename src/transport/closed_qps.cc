#include "transport/closed_qps.h"

#include <algorithm>

#include "base/assert.h"
#include "wire/aeth.h"
#include "wire/builder.h"
#include "wire/psn.h"

namespace uroce::transport {

void ClosedQps::add(const ClosedQp& q) {
  // A QPN is not reused while its peer may still send to it (QPN blocks go round the whole
  // space), but a table given the same QP twice keeps the newer state.
  if (auto it = entries_.find(q.qpn); it != entries_.end()) {
    it->second = q;
    return;
  }
  while (entries_.size() >= kMaxEntries && !order_.empty()) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
  entries_.emplace(q.qpn, q);
  order_.push_back(q.qpn);
  UROCE_ASSERT(entries_.size() == order_.size() && entries_.size() <= kMaxEntries);
}

void ClosedQps::expire(Instant now) {
  std::erase_if(entries_, [&](const auto& e) { return e.second.until <= now; });
  std::erase_if(order_, [&](std::uint32_t qpn) { return entries_.count(qpn) == 0; });
  UROCE_ASSERT(entries_.size() == order_.size());
}

std::size_t ClosedQps::live(Instant now) {
  expire(now);
  return entries_.size();
}

Instant ClosedQps::last_until() const {
  Instant t = Instant::never();
  for (const auto& [qpn, e] : entries_) t = t.is_never() ? e.until : std::max(t, e.until);
  return t;
}

bool ClosedQps::answer(Instant now, const wire::RocePacket& pkt, const wire::IpAddress& src,
                       TxPacket& out) {
  if (entries_.empty()) return false;
  const wire::OpcodeInfo& op = *pkt.op;
  if (op.transport != wire::Transport::kRc || !op.is(wire::kFlagRequest) ||
      !(op.is(wire::kFlagSend) || op.is(wire::kFlagWrite))) {
    return false;
  }
  const wire::BthView bth = pkt.bth();
  auto found = entries_.find(bth.dest_qpn());
  if (found == entries_.end() || found->second.until <= now) return false;
  const ClosedQp* it = &found->second;
  // From the peer only (Qp::handle_packet's check), and only what was executed: a PSN before the
  // expected one, within the half of the PSN space behind it (a duplicate, C9-105).
  if (!wire::same_host(src, it->path.dst) || wire::psn_diff(bth.psn(), it->epsn) >= 0) {
    return false;
  }
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcAcknowledge);
  h.bth.pkey = 0xffff;
  h.bth.dest_qpn = it->remote_qpn;
  h.bth.psn = wire::psn_add(it->epsn, -1);
  h.aeth = wire::Aeth{wire::make_ack_syndrome(), it->msn};
  out.av = it->path;
  out.header_bytes = static_cast<std::uint32_t>(wire::write_headers(MutBytes(out.header), h, 0));
  out.num_pieces = 0;
  out.payload_bytes = 0;
  return true;
}

std::optional<ClosedQp> closed_state(const Qp& qp, Instant now) {
  const QpState s = qp.state();
  if (qp.type() != QpType::kRc ||
      !(s == QpState::kRtr || s == QpState::kRts || s == QpState::kSqd || s == QpState::kSqe)) {
    return std::nullopt;
  }
  Duration life = kMaxClosedLife;
  if (const Duration t = qp.ack_timeout(); !t.is_infinite()) {
    life = std::clamp(t * (std::int64_t{qp.attr().retry_cnt} + 1), kMinClosedLife, kMaxClosedLife);
  }
  ClosedQp c;
  c.qpn = qp.qpn();
  c.remote_qpn = qp.attr().dest_qp_num;
  c.path = qp.path();
  c.epsn = qp.responder_psn();
  c.msn = qp.responder_msn();
  c.until = now + life;
  return c;
}

}  // namespace uroce::transport
