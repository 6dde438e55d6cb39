// libFuzzer target for the CM: the MAD codec and a CmEndpoint with connections in several states
// fed arbitrary MADs and calls.
//
// Input: a sequence of records. Each record is one control byte, then (for a MAD) 256 bytes:
//   control % 4 == 0: parse the MAD; if it parses, building it and parsing that again must give
//                     the same message (the codec is a bijection on what it accepts, reserved
//                     bits aside), then hand it to the endpoint;
//   control % 4 == 1: the same with a valid CM header forced (class 0x07, version 2, Send, and
//                     attribute 0x10 + control / 4 % 9), so that the data reaches the state
//                     machine;
//   control % 4 == 2: advance time by (control / 4) * 250 ms and run the timers;
//   control % 4 == 3: a user call on a recent ID (accept, establish, disconnect, reject, destroy).
// Invariants: no sanitizer report, no UROCE_CHECK failure, and the endpoint drains to nothing
// once every ID is destroyed and its timers have run.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/assert.h"
#include "base/bytes.h"
#include "cm/cm.h"
#include "wire/cm_mad.h"

namespace {

using namespace uroce;
using namespace uroce::cm;

CmPeer peer(std::uint8_t n) {
  CmPeer p;
  p.gid = wire::ipv4_mapped_gid(0x0a000000u | n);
  return p;
}

void drain(CmEndpoint& e, std::vector<ConnId>& ids) {
  while (e.poll_transmit()) {
  }
  while (auto ev = e.poll_event()) {
    if (ids.size() < 64) ids.push_back(ev->id);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  CmConfig cfg;
  cfg.seed = 1;
  cfg.max_connections = 64;
  CmEndpoint e(cfg);
  UROCE_CHECK(e.listen(wire::rdma_service_id(wire::RdmaPortSpace::kTcp, 1)).ok());
  UROCE_CHECK(e.listen(wire::rdma_service_id(wire::RdmaPortSpace::kUdp, 1)).ok());
  Instant now = Instant::from_ns(0);
  std::vector<ConnId> ids;
  ConnectParams cp;
  cp.peer = peer(2);
  cp.service_id = wire::rdma_service_id(wire::RdmaPortSpace::kTcp, 1);
  UROCE_CHECK(e.connect(now, cp).ok());
  drain(e, ids);

  std::size_t at = 0;
  while (at < size) {
    const std::uint8_t control = data[at++];
    const unsigned arg = control / 4u;
    switch (control % 4) {
      case 0:
      case 1: {
        if (size - at < wire::kMadBytes) return 0;
        std::array<std::byte, wire::kMadBytes> mad{};
        for (std::size_t i = 0; i < mad.size(); ++i) mad[i] = std::byte{data[at + i]};
        at += wire::kMadBytes;
        if (control % 4 == 1) {
          mad[0] = std::byte{1};
          mad[1] = std::byte{0x07};
          mad[2] = std::byte{2};
          mad[3] = std::byte{0x03};
          mad[16] = std::byte{0};
          mad[17] = std::byte(0x10 + arg % 9);
        }
        if (auto parsed = wire::parse_cm_mad(mad); parsed.ok()) {
          const auto rebuilt = wire::build_cm_mad(*parsed);
          auto again = wire::parse_cm_mad(rebuilt);
          UROCE_CHECK(again.ok() && *again == *parsed);
        }
        (void)e.handle_mad(now, peer(static_cast<std::uint8_t>(2 + arg % 2)), mad);
        break;
      }
      case 2:
        now = now + Duration::ms(static_cast<std::int64_t>(arg) * 250);
        e.handle_timeout(now);
        break;
      default: {
        if (ids.empty()) break;
        const ConnId id = ids[arg % ids.size()];
        switch (arg % 5) {
          case 0:
            (void)e.accept(now, id, AcceptParams{});
            break;
          case 1:
            (void)e.establish(now, id);
            break;
          case 2:
            (void)e.disconnect(now, id, {});
            break;
          case 3:
            (void)e.reject(now, id, {});
            break;
          default:
            (void)e.destroy(now, id);
            break;
        }
        break;
      }
    }
    drain(e, ids);
  }
  // Every ID destroyed and every timer run: nothing may be left.
  for (const ConnId id : ids) (void)e.destroy(now, id);
  for (int i = 0; i < 1000 && !e.poll_timeout().is_never(); ++i) {
    now = e.poll_timeout();
    e.handle_timeout(now);
    drain(e, ids);
    for (const ConnId id : ids) (void)e.destroy(now, id);
  }
  UROCE_CHECK(e.poll_timeout().is_never());
  return 0;
}
