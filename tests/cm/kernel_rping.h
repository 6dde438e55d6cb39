// The kernel's CM MADs from rping between two rxe hosts (tests/data/golden/rping.pcap): the first
// MAD of each CM attribute, as the tests of cm/ feed them.
#pragma once

#include <cstddef>
#include <map>
#include <vector>

#include "cm/cm.h"
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

// What makes uroce's CM send `req` (but for its communication ID): its connect parameters.
inline cm::ConnectParams connect_params_of(const wire::CmReq& req) {
  cm::ConnectParams p;
  p.peer.gid = req.primary_remote_gid;
  p.local_gid = req.primary_local_gid;
  p.service_id = req.service_id;
  p.local_qpn = req.local_qpn;
  p.starting_psn = req.starting_psn;
  p.responder_resources = req.responder_resources;
  p.initiator_depth = req.initiator_depth;
  p.retry_count = req.retry_count;
  p.rnr_retry_count = req.rnr_retry_count;
  p.path_mtu = req.path_mtu;
  p.flow_label = req.primary_flow_label;
  p.traffic_class = req.primary_traffic_class;
  p.hop_limit = req.primary_hop_limit;
  p.sl = req.primary_sl;
  p.private_data = as_bytes(req.private_data.data(), req.private_data.size());
  return p;
}

}  // namespace uroce::test
