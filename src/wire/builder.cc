#include "wire/builder.h"

#include <algorithm>
#include <cstring>

#include "wire/icrc.h"

namespace uroce::wire {

TransportHeaders decode_headers(const RocePacket& pkt) {
  TransportHeaders h;
  h.bth = pkt.bth().decode();
  const OpcodeInfo& op = *pkt.op;
  if (op.has(ExtHeader::kFeth)) h.feth = pkt.feth().decode();
  if (op.has(ExtHeader::kReth)) h.reth = pkt.reth().decode();
  if (op.has(ExtHeader::kAeth)) h.aeth = pkt.aeth().decode();
  if (op.has(ExtHeader::kAtomicEth)) h.atomic_eth = pkt.atomic_eth().decode();
  if (op.has(ExtHeader::kAtomicAckEth)) h.atomic_ack_orig = pkt.atomic_ack_eth().orig();
  if (op.has(ExtHeader::kDeth)) h.deth = pkt.deth().decode();
  if (op.has(ExtHeader::kImmDt)) h.imm_data = pkt.immdt().value();
  if (op.has(ExtHeader::kIeth)) h.ieth_rkey = pkt.ieth().value();
  if (op.has(ExtHeader::kXrcEth)) h.xrc_srqn = pkt.xrceth().srqn();
  return h;
}

std::size_t write_headers(MutBytes out, const TransportHeaders& h, std::size_t payload_bytes) {
  const OpcodeInfo* op = opcode_info(h.bth.opcode);
  UROCE_CHECK(op != nullptr);
  UROCE_CHECK(out.size() >= op->header_bytes);
  Bth bth = h.bth;
  bth.pad_count = pad_for(payload_bytes);
  BthMut(out).encode(bth);
  auto at = [&](ExtHeader e) { return out.subspan(op->offset_of(e)); };
  if (op->has(ExtHeader::kDeth)) DethMut(at(ExtHeader::kDeth)).encode(h.deth);
  if (op->has(ExtHeader::kXrcEth)) XrcEthMut(at(ExtHeader::kXrcEth)).set_srqn(h.xrc_srqn);
  if (op->has(ExtHeader::kFeth)) FethMut(at(ExtHeader::kFeth)).encode(h.feth);
  if (op->has(ExtHeader::kReth)) RethMut(at(ExtHeader::kReth)).encode(h.reth);
  if (op->has(ExtHeader::kAtomicEth)) AtomicEthMut(at(ExtHeader::kAtomicEth)).encode(h.atomic_eth);
  if (op->has(ExtHeader::kAeth)) AethMut(at(ExtHeader::kAeth)).encode(h.aeth);
  if (op->has(ExtHeader::kAtomicAckEth)) {
    AtomicAckEthMut(at(ExtHeader::kAtomicAckEth)).set_orig(h.atomic_ack_orig);
  }
  if (op->has(ExtHeader::kImmDt)) ImmDtMut(at(ExtHeader::kImmDt)).set_value(h.imm_data);
  if (op->has(ExtHeader::kIeth)) IethMut(at(ExtHeader::kIeth)).set_value(h.ieth_rkey);
  if (op->has(ExtHeader::kCnpReserved)) {
    const MutBytes rsvd =
        at(ExtHeader::kCnpReserved)
            .first(kExtHeaderBytes[static_cast<unsigned>(ExtHeader::kCnpReserved)]);
    std::fill(rsvd.begin(), rsvd.end(), std::byte{0});
  }
  return op->header_bytes;
}

std::size_t write_bth_headers(MutBytes out, const OpcodeInfo& op, const Bth& bth,
                              std::uint32_t xrc_srqn, std::size_t payload_bytes) {
  UROCE_CHECK(op.valid);
  UROCE_CHECK(out.size() >= op.header_bytes);
  Bth b = bth;
  b.pad_count = pad_for(payload_bytes);
  BthMut(out).encode(b);
  std::memset(out.data() + kBthBytes, 0, op.header_bytes - kBthBytes);
  if (op.has(ExtHeader::kXrcEth)) {
    XrcEthMut(out.subspan(op.offset_of(ExtHeader::kXrcEth))).set_srqn(xrc_srqn);
  }
  return op.header_bytes;
}

std::size_t write_roce(MutBytes out, const TransportHeaders& h, ConstBytes payload) {
  const OpcodeInfo* op = opcode_info(h.bth.opcode);
  UROCE_CHECK(op != nullptr);
  const std::size_t total = roce_size(*op, payload.size());
  UROCE_CHECK(out.size() >= total);
  const std::size_t hdr = write_headers(out, h, payload.size());
  std::copy(payload.begin(), payload.end(), out.begin() + static_cast<std::ptrdiff_t>(hdr));
  const MutBytes pad = out.subspan(hdr + payload.size(), pad_for(payload.size()));
  std::fill(pad.begin(), pad.end(), std::byte{0});
  return total;
}

void write_icrc(ConstBytes ip_udp, MutBytes roce_with_icrc) {
  UROCE_CHECK(roce_with_icrc.size() >= kBthBytes + kIcrcBytes);
  const std::size_t n = roce_with_icrc.size() - kIcrcBytes;
  store_le32(roce_with_icrc, n, icrc_compute(ip_udp, roce_with_icrc.first(n)));
}

std::size_t write_outer(MutBytes out, const OuterHeaders& o, std::size_t roce_bytes) {
  UROCE_CHECK(o.src.v6 == o.dst.v6);
  const std::size_t total = outer_size(o);
  UROCE_CHECK(out.size() >= total);
  std::size_t off = 0;
  if (o.ethernet) {
    encode_ethernet(out,
                    Ethernet{o.dst_mac, o.src_mac, o.dst.v6 ? kEtherTypeIpv6 : kEtherTypeIpv4});
    off = kEthernetBytes;
  }
  const std::size_t udp_len = kUdpBytes + roce_bytes;
  UROCE_CHECK(udp_len <= 0xffff - kIpv4Bytes);
  if (o.dst.v6) {
    Ipv6 ip;
    ip.traffic_class = o.traffic_class;
    ip.flow_label = o.flow_label;
    ip.payload_length = static_cast<std::uint16_t>(udp_len);
    ip.hop_limit = o.ttl;
    ip.src = o.src;
    ip.dst = o.dst;
    encode_ipv6(out.subspan(off), ip);
    off += kIpv6Bytes;
  } else {
    Ipv4 ip;
    ip.tos = o.traffic_class;
    ip.total_length = static_cast<std::uint16_t>(kIpv4Bytes + udp_len);
    ip.identification = o.ipv4_id;
    ip.dont_fragment = o.ipv4_df;
    ip.ttl = o.ttl;
    ip.src = o.src;
    ip.dst = o.dst;
    encode_ipv4(out.subspan(off), ip);
    off += kIpv4Bytes;
  }
  encode_udp(out.subspan(off), Udp{o.src_port, o.dst_port, static_cast<std::uint16_t>(udp_len), 0});
  return total;
}

std::size_t build_frame_gather(MutBytes out, const OuterHeaders& o, ConstBytes transport_headers,
                               std::span<const ConstBytes> payload) {
  std::size_t payload_bytes = 0;
  for (ConstBytes piece : payload) payload_bytes += piece.size();
  const std::size_t pad = pad_for(payload_bytes);
  const std::size_t roce = transport_headers.size() + payload_bytes + pad + kIcrcBytes;
  const std::size_t outer = outer_size(o);
  UROCE_CHECK(out.size() >= outer + roce);
  UROCE_CHECK(transport_headers.size() >= kBthBytes);
  UROCE_CHECK(BthView(transport_headers).pad_count() == pad);
  auto it = std::copy(transport_headers.begin(), transport_headers.end(),
                      out.begin() + static_cast<std::ptrdiff_t>(outer));
  for (ConstBytes piece : payload) it = std::copy(piece.begin(), piece.end(), it);
  std::fill(it, it + static_cast<std::ptrdiff_t>(pad), std::byte{0});
  write_outer(out, o, roce);
  const std::size_t ip_udp_len = (o.dst.v6 ? kIpv6Bytes : kIpv4Bytes) + kUdpBytes;
  write_icrc(out.subspan(outer - ip_udp_len, ip_udp_len), out.subspan(outer, roce));
  return outer + roce;
}

std::size_t build_frame(MutBytes out, const OuterHeaders& o, const TransportHeaders& h,
                        ConstBytes payload) {
  const std::size_t outer = outer_size(o);
  UROCE_CHECK(out.size() >= outer);
  const std::size_t roce = write_roce(out.subspan(outer), h, payload);
  write_outer(out, o, roce);
  const std::size_t ip_udp_len = (o.dst.v6 ? kIpv6Bytes : kIpv4Bytes) + kUdpBytes;
  write_icrc(out.subspan(outer - ip_udp_len, ip_udp_len), out.subspan(outer, roce));
  return outer + roce;
}

}  // namespace uroce::wire
