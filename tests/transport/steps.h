// Steps the Solo tests share: crafted request headers and posting a receive WQE.
#pragma once

#include <gtest/gtest.h>

#include "harness.h"
#include "wire/aeth.h"
#include "wire/opcode.h"
#include "wire/psn.h"

namespace uroce::test {

// Request headers with AckReq set: the BTH of `op` at `psn`.
inline wire::TransportHeaders request_headers(wire::Opcode op, std::uint32_t psn) {
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(op);
  h.bth.psn = psn & wire::kPsnMask;
  h.bth.ack_req = true;
  return h;
}

// The same with a RETH (an RDMA WRITE's first packet, a READ request).
inline wire::TransportHeaders reth_headers(wire::Opcode op, std::uint32_t psn, std::uint64_t va,
                                           std::uint32_t rkey, std::uint32_t len) {
  wire::TransportHeaders h = request_headers(op, psn);
  h.reth = wire::Reth{va, rkey, len};
  return h;
}

// A receive WQE of `len` bytes at offset `off` of the endpoint's buffer.
inline void post_recv(Solo& s, std::uint64_t id, std::size_t off, std::uint32_t len) {
  const Sge sge{s.va(off), len, s.e.key};
  ASSERT_EQ(s.e.qp->post_recv(id, std::span(&sge, 1)), Errc::kOk);
}

// An Acknowledge from the fictitious peer to the Solo QP's requester: an ACK or a NAK
// (`syndrome`) at `psn`.
inline void peer_response(Solo& s, std::uint32_t psn,
                          std::uint8_t syndrome = wire::make_ack_syndrome()) {
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcAcknowledge);
  h.bth.psn = psn & wire::kPsnMask;
  h.aeth.syndrome = syndrome;
  h.aeth.msn = 1;
  s.feed(h);
}

}  // namespace uroce::test
