#include "verbs/qp_state_table.h"

#include <array>

namespace uroce::verbs {
namespace {

constexpr std::size_t kStates = 7;  // RESET .. ERR
using Row = std::array<QpTransitionRule, kStates>;
using Table = std::array<Row, kStates>;

constexpr std::size_t idx(QpState s) { return static_cast<std::size_t>(s); }

constexpr QpTransitionRule rule(std::uint32_t required, std::uint32_t optional) {
  return QpTransitionRule{true, required, optional};
}

// Transitions whose attributes are the same for every type: to RESET and ERR from anywhere but
// RESET (RESET -> ERR is not a legal transition), ERR -> ERR, RESET -> RESET, RTS -> SQD.
constexpr Table common_table() {
  Table t{};
  for (std::size_t cur = 0; cur < kStates; ++cur) {
    t[cur][idx(QpState::kReset)] = rule(0, 0);
    if (cur != idx(QpState::kReset)) t[cur][idx(QpState::kErr)] = rule(0, 0);
  }
  t[idx(QpState::kRts)][idx(QpState::kSqd)] = rule(0, kQpEnSqdAsyncNotify);
  return t;
}

constexpr Table rc_table() {
  Table t = common_table();
  t[idx(QpState::kReset)][idx(QpState::kInit)] = rule(kQpPkeyIndex | kQpPort | kQpAccessFlags, 0);
  t[idx(QpState::kInit)][idx(QpState::kInit)] = rule(0, kQpPkeyIndex | kQpPort | kQpAccessFlags);
  t[idx(QpState::kInit)][idx(QpState::kRtr)] =
      rule(kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer,
           kQpAltPath | kQpAccessFlags | kQpPkeyIndex);
  t[idx(QpState::kRtr)][idx(QpState::kRts)] =
      rule(kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpSqPsn | kQpMaxQpRdAtomic,
           kQpCurState | kQpAltPath | kQpAccessFlags | kQpMinRnrTimer | kQpPathMigState);
  t[idx(QpState::kRts)][idx(QpState::kRts)] =
      rule(0, kQpCurState | kQpAccessFlags | kQpAltPath | kQpPathMigState | kQpMinRnrTimer);
  t[idx(QpState::kSqd)][idx(QpState::kRts)] =
      rule(0, kQpCurState | kQpAltPath | kQpAccessFlags | kQpMinRnrTimer | kQpPathMigState);
  t[idx(QpState::kSqd)][idx(QpState::kSqd)] =
      rule(0, kQpPort | kQpAv | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic |
                  kQpMaxDestRdAtomic | kQpAltPath | kQpAccessFlags | kQpPkeyIndex | kQpMinRnrTimer |
                  kQpPathMigState);
  t[idx(QpState::kSqe)][idx(QpState::kRts)] = rule(0, 0);
  return t;
}

constexpr Table uc_table() {
  Table t = common_table();
  t[idx(QpState::kReset)][idx(QpState::kInit)] = rule(kQpPkeyIndex | kQpPort | kQpAccessFlags, 0);
  t[idx(QpState::kInit)][idx(QpState::kInit)] = rule(0, kQpPkeyIndex | kQpPort | kQpAccessFlags);
  t[idx(QpState::kInit)][idx(QpState::kRtr)] =
      rule(kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn, kQpAltPath | kQpAccessFlags | kQpPkeyIndex);
  t[idx(QpState::kRtr)][idx(QpState::kRts)] =
      rule(kQpSqPsn, kQpCurState | kQpAltPath | kQpAccessFlags | kQpPathMigState);
  t[idx(QpState::kRts)][idx(QpState::kRts)] =
      rule(0, kQpCurState | kQpAccessFlags | kQpAltPath | kQpPathMigState);
  t[idx(QpState::kSqd)][idx(QpState::kRts)] =
      rule(0, kQpCurState | kQpAltPath | kQpAccessFlags | kQpPathMigState);
  t[idx(QpState::kSqd)][idx(QpState::kSqd)] =
      rule(0, kQpAv | kQpAltPath | kQpAccessFlags | kQpPkeyIndex | kQpPathMigState);
  t[idx(QpState::kSqe)][idx(QpState::kRts)] = rule(0, kQpCurState | kQpAccessFlags);
  return t;
}

constexpr Table ud_table() {
  Table t = common_table();
  t[idx(QpState::kReset)][idx(QpState::kInit)] = rule(kQpPkeyIndex | kQpPort | kQpQkey, 0);
  t[idx(QpState::kInit)][idx(QpState::kInit)] = rule(0, kQpPkeyIndex | kQpPort | kQpQkey);
  t[idx(QpState::kInit)][idx(QpState::kRtr)] = rule(0, kQpPkeyIndex | kQpQkey);
  t[idx(QpState::kRtr)][idx(QpState::kRts)] = rule(kQpSqPsn, kQpCurState | kQpQkey);
  t[idx(QpState::kRts)][idx(QpState::kRts)] = rule(0, kQpCurState | kQpQkey);
  t[idx(QpState::kSqd)][idx(QpState::kRts)] = rule(0, kQpCurState | kQpQkey);
  t[idx(QpState::kSqd)][idx(QpState::kSqd)] = rule(0, kQpPkeyIndex | kQpQkey);
  t[idx(QpState::kSqe)][idx(QpState::kRts)] = rule(0, kQpCurState | kQpQkey);
  return t;
}

// XRC's two halves (the kernel's qp_state_table, IB_QPT_XRC_INI and IB_QPT_XRC_TGT): RC's rows,
// except that an initiator needs no responder attributes at RTR and a target no requester
// attributes at RTS but its ACK timeout and the PSN its responses start from.
constexpr Table xrc_send_table() {
  Table t = rc_table();
  t[idx(QpState::kInit)][idx(QpState::kRtr)] =
      rule(kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn, kQpAltPath | kQpAccessFlags | kQpPkeyIndex);
  return t;
}

constexpr Table xrc_recv_table() {
  Table t = rc_table();
  t[idx(QpState::kRtr)][idx(QpState::kRts)] =
      rule(kQpTimeout | kQpSqPsn,
           kQpCurState | kQpAltPath | kQpAccessFlags | kQpMinRnrTimer | kQpPathMigState);
  return t;
}

constexpr Table kRc = rc_table();
constexpr Table kXrcSend = xrc_send_table();
constexpr Table kXrcRecv = xrc_recv_table();
constexpr Table kUc = uc_table();
constexpr Table kUd = ud_table();

}  // namespace

QpTransitionRule qp_transition_rule(QpType type, QpState cur, QpState next) {
  if (idx(cur) >= kStates || idx(next) >= kStates) return QpTransitionRule{};
  switch (type) {
    case QpType::kRc:
      return kRc[idx(cur)][idx(next)];
    case QpType::kUc:
      return kUc[idx(cur)][idx(next)];
    case QpType::kUd:
      return kUd[idx(cur)][idx(next)];
    case QpType::kXrcSend:
      return kXrcSend[idx(cur)][idx(next)];
    case QpType::kXrcRecv:
      return kXrcRecv[idx(cur)][idx(next)];
  }
  return QpTransitionRule{};
}

bool modify_qp_is_ok(QpState cur, QpState next, QpType type, std::uint32_t mask) {
  if ((mask & kQpCurState) != 0 && cur != QpState::kRtr && cur != QpState::kRts &&
      cur != QpState::kSqd && cur != QpState::kSqe) {
    return false;
  }
  const QpTransitionRule r = qp_transition_rule(type, cur, next);
  if (!r.valid) return false;
  if ((mask & r.required) != r.required) return false;
  return (mask & ~(r.required | r.optional | kQpState)) == 0;
}

}  // namespace uroce::verbs
