// The kernel's CM MADs from rping between two rxe hosts (tests/data/golden/rping.pcap): the first
// MAD of each CM attribute, as the tests of cm/ feed them.
#pragma once

#include <cstddef>
#include <map>
#include <vector>

#include "support/golden.h"
#include "wire/cm_mad.h"
#include "wire/packet.h"

namespace uroce::test {

// The first REQ, REP, ... of the capture, by attribute (the MAD's bytes).
inline std::map<wire::CmAttr, std::vector<std::byte>> kernel_rping_mads() {
  std::map<wire::CmAttr, std::vector<std::byte>> out;
  for (const auto& fr : load_frames(data_dir() + "/golden/rping.pcap")) {
    auto f = wire::parse_frame(wire::LinkType::kEthernet, fr.view());
    if (!f.ok() || f->roce.bth().decode().dest_qpn != wire::kGsiQpn) continue;
    const auto attr = static_cast<wire::CmAttr>(load_be16(f->roce.payload, wire::kMadOffAttrId));
    out.try_emplace(attr, f->roce.payload.begin(), f->roce.payload.end());
  }
  return out;
}

}  // namespace uroce::test
