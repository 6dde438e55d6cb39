#include "verbs/connect.h"

#include "verbs/address.h"

namespace uroce::verbs {

Errc connect_rc_qp(Device& dev, QpHandle qp, const RcConnection& c) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.port_num = 1;
  a.qp_access_flags = c.access;
  Errc e = dev.modify_qp(qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags);
  if (e != Errc::kOk) return e;
  a.qp_state = QpState::kRtr;
  a.ah_attr.dgid = gid_from_ip(c.peer_ip);
  a.ah_attr.is_global = true;
  a.ah_attr.traffic_class = c.traffic_class;
  a.path_mtu = c.path_mtu;
  a.dest_qp_num = c.peer_qpn;
  a.rq_psn = c.rq_psn;
  a.max_dest_rd_atomic = c.max_dest_rd_atomic;
  a.min_rnr_timer = c.min_rnr_timer;
  a.selective_repeat = c.selective_repeat;
  e = dev.modify_qp(qp, a,
                    kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                        kQpMinRnrTimer | (c.selective_repeat ? kQpSelectiveRepeat : 0u));
  if (e != Errc::kOk) return e;
  a.qp_state = QpState::kRts;
  a.sq_psn = c.sq_psn;
  a.timeout = c.timeout;
  a.retry_cnt = c.retry_cnt;
  a.rnr_retry = c.rnr_retry;
  a.max_rd_atomic = c.max_rd_atomic;
  return dev.modify_qp(
      qp, a, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic);
}

}  // namespace uroce::verbs
