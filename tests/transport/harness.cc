#include "harness.h"

#include <algorithm>

#include "wire/packet.h"
#include "wire/psn.h"

namespace uroce::test {

using transport::AccessError;

std::uint32_t TestMemory::add(std::uint32_t pd, void* addr, std::uint64_t length,
                              std::uint32_t access, bool invalidatable) {
  const std::uint32_t key = next_key_++;
  regions_[key] =
      Region{pd, reinterpret_cast<std::uint64_t>(addr), length, access, true, invalidatable};
  return key;
}

Result<const TestMemory::Region*, AccessError> TestMemory::checked(std::uint32_t pd,
                                                                   std::uint32_t key,
                                                                   std::uint32_t need) {
  ++resolves;
  auto it = regions_.find(key);
  if (it == regions_.end() || !it->second.valid) return Err{AccessError::kInvalidKey};
  const Region& r = it->second;
  if (r.pd != pd) return Err{AccessError::kWrongPd};
  if ((r.access & need) != need) return Err{AccessError::kNoPermission};
  return &r;
}

Result<MutBytes, AccessError> TestMemory::resolve(std::uint32_t pd, std::uint32_t /*qpn*/,
                                                  std::uint32_t key, bool remote,
                                                  std::uint64_t addr, std::uint64_t length,
                                                  std::uint32_t access) {
  std::uint32_t need = access;
  if (!remote) need &= ~static_cast<std::uint32_t>(kAccessRemoteRead);
  auto found = checked(pd, key, need);
  if (!found.ok()) return Err{found.error()};
  const Region& r = *found.value();
  if (addr < r.addr || length > r.length || addr - r.addr > r.length - length) {
    return Err{AccessError::kOutOfBounds};
  }
  return as_mut_bytes(reinterpret_cast<void*>(addr), length);
}

Result<MutBytes, AccessError> TestMemory::resolve_region(std::uint32_t pd, std::uint32_t /*qpn*/,
                                                         std::uint32_t key, std::uint32_t access) {
  auto found = checked(pd, key, access);
  if (!found.ok()) return Err{found.error()};
  return as_mut_bytes(reinterpret_cast<void*>(found.value()->addr), found.value()->length);
}

Result<bool, AccessError> TestMemory::invalidate(std::uint32_t pd, std::uint32_t /*qpn*/,
                                                 std::uint32_t key, bool /*remote*/) {
  auto it = regions_.find(key);
  if (it == regions_.end() || !it->second.valid) return Err{AccessError::kInvalidKey};
  if (it->second.pd != pd) return Err{AccessError::kWrongPd};
  if (!it->second.invalidatable) return Err{AccessError::kNotInvalidatable};
  it->second.valid = false;
  return true;
}

Endpoint::Endpoint(std::uint32_t qpn, QpType type, wire::IpAddress addr, const QpCap& cap,
                   const XrcSetup& xrc)
    : ip(addr), buf(1 << 20) {
  rq = std::make_unique<transport::RecvQueue>(cap.max_recv_wr, cap.max_recv_sge);
  transport::QpEnv env;
  env.memory = &memory;
  env.send_cq = &scq;
  env.recv_cq = &rcq;
  env.rq = rq.get();
  env.events = &events;
  env.cc = &cc;
  env.pd = 1;
  env.port_mtu_bytes = 4096;
  env.xrc = xrc.role;
  env.xrc_srqs = xrc.srqs;
  env.xrcd = xrc.xrcd;
  env.rq_is_srq = xrc.role == transport::XrcRole::kRecv;  // its RQ: the SRQ each request names
  qp = std::make_unique<transport::Qp>(qpn, type, cap, env);
  key =
      memory.add(1, buf.data(), buf.size(),
                 kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic);
}

Pair::Pair(QpType type, std::uint32_t mtu, std::uint32_t psn_a, std::uint32_t psn_b,
           const XrcSetup& xrc_a, const XrcSetup& xrc_b)
    : a(0x11, type, wire::IpAddress::v4(0x0a000001), Endpoint::default_cap(), xrc_a),
      b(0x12, type, wire::IpAddress::v4(0x0a000002), Endpoint::default_cap(), xrc_b) {
  const Mtu m = mtu_from_bytes(mtu);
  for (int i = 0; i < 2; ++i) {
    Endpoint& e = side(i);
    Endpoint& peer = side(1 - i);
    QpAttr attr;
    attr.path_mtu = m;
    attr.sq_psn = i == 0 ? psn_a : psn_b;
    attr.rq_psn = i == 0 ? psn_b : psn_a;
    attr.dest_qp_num = peer.qp->qpn();
    attr.qkey = 0x11111111;
    attr.qp_access_flags =
        kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
    transport::AddressVector av;
    av.dst = peer.ip;
    e.qp->modify(
        attr, kQpPathMtu | kQpSqPsn | kQpRqPsn | kQpDestQpn | kQpQkey | kQpAccessFlags | kQpAv, av);
  }
}

void Pair::connect(std::uint8_t timeout, std::uint8_t retry_cnt, std::uint8_t rnr_retry,
                   std::uint8_t min_rnr_timer, std::uint8_t max_rd_atomic) {
  for (int i = 0; i < 2; ++i) {
    Endpoint& e = side(i);
    QpAttr attr;
    attr.timeout = timeout;
    attr.retry_cnt = retry_cnt;
    attr.rnr_retry = rnr_retry;
    attr.min_rnr_timer = min_rnr_timer;
    attr.max_rd_atomic = max_rd_atomic;
    attr.max_dest_rd_atomic = max_rd_atomic;
    attr.qp_state = QpState::kInit;
    e.qp->modify(attr, kQpState, e.qp->path());
    attr.qp_state = QpState::kRtr;
    e.qp->modify(attr, kQpState | kQpMinRnrTimer | kQpMaxDestRdAtomic, e.qp->path());
    attr.qp_state = QpState::kRts;
    e.qp->modify(attr, kQpState | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic,
                 e.qp->path());
  }
}

std::vector<std::byte> craft(const wire::IpAddress& src, const wire::IpAddress& dst,
                             const wire::TransportHeaders& h, ConstBytes payload) {
  wire::OuterHeaders o;
  o.src = src;
  o.dst = dst;
  std::vector<std::byte> frame(payload.size() + 128);
  frame.resize(wire::build_frame(frame, o, h, payload));
  return frame;
}

void Pair::deliver(int to, const std::vector<std::byte>& frame) {
  auto f = wire::parse_frame(wire::LinkType::kEthernet, frame);
  UROCE_CHECK(f.ok());
  transport::PacketInfo info;
  info.src = f->ipv4.src;
  info.src_port = f->udp.src_port;
  info.ecn = static_cast<std::uint8_t>(f->ipv4.tos & 3u);
  info.ip_header = f->ip_udp.first(20);
  side(to).qp->handle_packet(now, f->roce, info);
}

void Pair::transmit(int from) {
  Endpoint& e = side(from);
  transport::TxPacket tx;
  // Bounded: a QP emits at most its window per call here.
  for (int n = 0; n < 100000 && e.qp->poll_transmit(now, tx); ++n) {
    std::vector<std::byte> payload;
    for (ConstBytes piece : tx.payload()) payload.insert(payload.end(), piece.begin(), piece.end());
    UROCE_CHECK(payload.size() == tx.payload_bytes);
    wire::OuterHeaders o;
    o.src = e.ip;
    o.dst = tx.av.dst;
    o.src_port = tx.av.udp_sport;
    const std::size_t outer = wire::outer_size(o);
    std::vector<std::byte> frame(outer + tx.header_bytes + payload.size() + 8);
    std::copy(tx.header_span().begin(), tx.header_span().end(), frame.begin() + outer);
    std::copy(payload.begin(), payload.end(), frame.begin() + outer + tx.header_bytes);
    const std::size_t pad = wire::pad_for(payload.size());
    const std::size_t roce = tx.header_bytes + payload.size() + pad + wire::kIcrcBytes;
    std::fill(frame.begin() + static_cast<std::ptrdiff_t>(outer + tx.header_bytes + payload.size()),
              frame.end(), std::byte{0});
    frame.resize(outer + roce);
    wire::write_outer(frame, o, roce);
    wire::write_icrc(ConstBytes(frame).subspan(14, 28), MutBytes(frame).subspan(outer, roce));
    ++frames_sent;
    if (rewrite) rewrite(from, frame);
    if (capture) captured.push_back(frame);
    if (drop && drop(from, frame)) continue;
    if (rng.chance(faults.loss, 1000)) continue;
    if (rng.chance(faults.duplicate, 1000)) enqueue(Frame{now + one_way * 2, 1 - from, frame});
    Duration delay = one_way;
    if (rng.chance(faults.reorder, 1000))
      delay = delay + Duration::us(static_cast<std::int64_t>(rng.range(1, 20)));
    enqueue(Frame{now + delay, 1 - from, std::move(frame)});
  }
}

void Pair::enqueue(Frame f) {
  auto it = std::upper_bound(wire_.begin(), wire_.end(), f.at,
                             [](Instant t, const Frame& x) { return t < x.at; });
  wire_.insert(it, std::move(f));
}

void Pair::run(Duration limit) {
  const Instant end = now + limit;
  for (int guard = 0; guard < 10'000'000; ++guard) {
    transmit(0);
    transmit(1);
    Instant next = end;
    if (!wire_.empty()) next = earliest(next, wire_.front().at);
    next = earliest(next, a.qp->poll_timeout());
    next = earliest(next, b.qp->poll_timeout());
    if (next >= end && wire_.empty()) return;
    if (next >= end) return;
    if (next > now) now = next;
    while (!wire_.empty() && wire_.front().at <= now) {
      Frame f = std::move(wire_.front());
      wire_.erase(wire_.begin());
      deliver(f.to, f.bytes);
    }
    a.qp->handle_timeout(now);
    b.qp->handle_timeout(now);
  }
  UROCE_CHECK(false && "Pair::run did not settle");
}

}  // namespace uroce::test

namespace uroce::test {

Solo::Solo(QpType type, std::uint32_t mtu, std::uint32_t sq_psn, std::uint32_t rq_psn,
           const QpCap& cap, const XrcSetup& xrc)
    : e(0x11, type, wire::IpAddress::v4(0x0a000001), cap, xrc), mtu_(mtu) {
  bring_up(sq_psn, rq_psn);
}

void Solo::reconnect(std::uint32_t sq_psn, std::uint32_t rq_psn) {
  QpAttr attr;
  attr.qp_state = QpState::kReset;
  e.qp->modify(attr, kQpState, e.qp->path());
  UROCE_CHECK(e.qp->state() == QpState::kReset);
  bring_up(sq_psn, rq_psn);
}

void Solo::bring_up(std::uint32_t sq_psn, std::uint32_t rq_psn) {
  QpAttr attr;
  attr.path_mtu = mtu_from_bytes(mtu_);
  attr.sq_psn = sq_psn;
  attr.rq_psn = rq_psn;
  attr.dest_qp_num = kPeerQpn;
  attr.qkey = 0x11111111;
  attr.qp_access_flags =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  transport::AddressVector av;
  av.dst = peer;
  attr.qp_state = QpState::kInit;
  e.qp->modify(attr, kQpState | kQpQkey | kQpAccessFlags, av);
  attr.qp_state = QpState::kRtr;
  e.qp->modify(attr, kQpState | kQpPathMtu | kQpRqPsn | kQpDestQpn | kQpAv, av);
  attr.qp_state = QpState::kRts;
  e.qp->modify(attr, kQpState | kQpSqPsn, av);
  set(14, 7, 7, 12, 4);
}

void Solo::set(std::uint8_t timeout, std::uint8_t retry_cnt, std::uint8_t rnr_retry,
               std::uint8_t min_rnr_timer, std::uint8_t max_rd_atomic) {
  QpAttr attr;
  attr.timeout = timeout;
  attr.retry_cnt = retry_cnt;
  attr.rnr_retry = rnr_retry;
  attr.min_rnr_timer = min_rnr_timer;
  attr.max_rd_atomic = max_rd_atomic;
  attr.max_dest_rd_atomic = max_rd_atomic;
  e.qp->modify(attr,
               kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMinRnrTimer | kQpMaxQpRdAtomic |
                   kQpMaxDestRdAtomic,
               e.qp->path());
}

void Solo::feed(wire::TransportHeaders h, ConstBytes payload) { feed_from(peer, h, payload); }

void Solo::feed_from(const wire::IpAddress& src, wire::TransportHeaders h, ConstBytes payload,
                     std::uint8_t ecn) {
  h.bth.dest_qpn = e.qp->qpn();
  auto frame = craft(src, e.ip, h, payload);
  auto f = wire::parse_frame(wire::LinkType::kEthernet, frame);
  UROCE_CHECK(f.ok());
  if (next_sr_kept) {
    next_sr_kept = false;
    frame[static_cast<std::size_t>(f->roce.bytes.data() - frame.data()) + 8] |=
        transport::kBthSrKeptBit;
  }
  transport::PacketInfo info;
  info.src = src;
  info.src_port = src_port;
  info.ecn = ecn;
  info.ip_header = f->ip_udp.first(20);
  e.qp->handle_packet(now, f->roce, info);
}

void Solo::feed(wire::Opcode op, std::uint32_t psn, ConstBytes payload, bool ack_req) {
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(op);
  h.bth.psn = psn & wire::kPsnMask;
  h.bth.ack_req = ack_req;
  feed(h, payload);
}

std::vector<Solo::Sent> Solo::drain(std::size_t max) {
  std::vector<Sent> out;
  transport::TxPacket tx;
  while (out.size() < max && e.qp->poll_transmit(now, tx)) {
    std::vector<std::byte> roce(tx.header_span().begin(), tx.header_span().end());
    std::vector<std::byte> payload;
    for (ConstBytes piece : tx.payload()) payload.insert(payload.end(), piece.begin(), piece.end());
    roce.insert(roce.end(), payload.begin(), payload.end());
    roce.resize(roce.size() + wire::pad_for(payload.size()) + wire::kIcrcBytes);
    auto pkt = wire::parse_roce(roce);
    UROCE_CHECK(pkt.ok());
    Sent s;
    s.h = wire::decode_headers(pkt.value());
    s.op = pkt->op;
    s.payload = payload;
    s.av = tx.av;
    s.sr_kept = (roce[8] & transport::kBthSrKeptBit) != std::byte{0};
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace uroce::test
