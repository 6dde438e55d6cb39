// Which modify_qp() state transitions are legal, and with which attribute masks: the rule of
// the Linux kernel's ib_modify_qp_is_ok() (drivers/infiniband/core/verbs.c, its qp_state_table
// of required and optional attributes per QP type for each current -> next state; unchanged
// for RC, UC and UD from v4.4 to v6.x), which itself follows IBTA vol. 1 section 11.2.5.2.
//
//   RESET -> RESET, INIT                INIT -> RESET, ERR, INIT, RTR
//   RTR   -> RESET, ERR, RTS            RTS  -> RESET, ERR, RTS, SQD
//   SQD   -> RESET, ERR, RTS, SQD       SQE  -> RESET, ERR, RTS
//   ERR   -> RESET, ERR
//
// A mask is legal for a transition when it holds every required attribute and nothing but
// required and optional attributes and kQpState. kQpCurState is accepted only from RTR, RTS,
// SQD and SQE. Without kQpState the transition is current -> current.
#pragma once

#include <cstdint>

#include "uroce/types.h"

namespace uroce::verbs {

struct QpTransitionRule {
  bool valid = false;
  std::uint32_t required = 0;  // QpAttrMask bits
  std::uint32_t optional = 0;
};

// The rule for cur -> next of a QP of `type` (RC, UC or UD).
QpTransitionRule qp_transition_rule(QpType type, QpState cur, QpState next);

// ib_modify_qp_is_ok(): whether modify_qp(mask) may move a QP of `type` from cur to next.
bool modify_qp_is_ok(QpState cur, QpState next, QpType type, std::uint32_t mask);

}  // namespace uroce::verbs
