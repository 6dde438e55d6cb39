// Every QP state transition, legal and illegal, for RC, UC and UD, with required and optional
// attribute masks.
//
// The expected rows below are transcribed from the Linux kernel's qp_state_table in
// drivers/infiniband/core/verbs.c (read at torvalds/linux, the version with
// `bool ib_modify_qp_is_ok(cur_state, next_state, type, mask)`; the RC/UC/UD entries are the
// same in v4.4's table). Anything not listed is an illegal transition.
#include "verbs/qp_state_table.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace uroce::verbs {
namespace {

using S = QpState;
using T = QpType;

struct Row {
  T type;
  S cur;
  S next;
  std::uint32_t req;
  std::uint32_t opt;
};

// Transitions whose masks do not depend on the type.
std::vector<Row> rows_for(T t) {
  std::vector<Row> r = {
      {t, S::kReset, S::kReset, 0, 0}, {t, S::kInit, S::kReset, 0, 0},
      {t, S::kInit, S::kErr, 0, 0},    {t, S::kRtr, S::kReset, 0, 0},
      {t, S::kRtr, S::kErr, 0, 0},     {t, S::kRts, S::kReset, 0, 0},
      {t, S::kRts, S::kErr, 0, 0},     {t, S::kSqd, S::kReset, 0, 0},
      {t, S::kSqd, S::kErr, 0, 0},     {t, S::kSqe, S::kReset, 0, 0},
      {t, S::kSqe, S::kErr, 0, 0},     {t, S::kErr, S::kReset, 0, 0},
      {t, S::kErr, S::kErr, 0, 0},     {t, S::kRts, S::kSqd, 0, kQpEnSqdAsyncNotify},
  };
  return r;
}

std::vector<Row> expected_rows() {
  std::vector<Row> all;
  for (T t : {T::kRc, T::kUc, T::kUd}) {
    for (const Row& r : rows_for(t)) all.push_back(r);
  }
  const std::uint32_t pkp_acc = kQpPkeyIndex | kQpPort | kQpAccessFlags;
  // RC
  all.push_back({T::kRc, S::kReset, S::kInit, pkp_acc, 0});
  all.push_back({T::kRc, S::kInit, S::kInit, 0, pkp_acc});
  all.push_back({T::kRc, S::kInit, S::kRtr,
                 kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer,
                 kQpAltPath | kQpAccessFlags | kQpPkeyIndex});
  all.push_back({T::kRc, S::kRtr, S::kRts,
                 kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpSqPsn | kQpMaxQpRdAtomic,
                 kQpCurState | kQpAltPath | kQpAccessFlags | kQpMinRnrTimer | kQpPathMigState});
  all.push_back({T::kRc, S::kRts, S::kRts, 0,
                 kQpCurState | kQpAccessFlags | kQpAltPath | kQpPathMigState | kQpMinRnrTimer});
  all.push_back({T::kRc, S::kSqd, S::kRts, 0,
                 kQpCurState | kQpAltPath | kQpAccessFlags | kQpMinRnrTimer | kQpPathMigState});
  all.push_back({T::kRc, S::kSqd, S::kSqd, 0,
                 kQpPort | kQpAv | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic |
                     kQpMaxDestRdAtomic | kQpAltPath | kQpAccessFlags | kQpPkeyIndex |
                     kQpMinRnrTimer | kQpPathMigState});
  all.push_back({T::kRc, S::kSqe, S::kRts, 0, 0});
  // UC
  all.push_back({T::kUc, S::kReset, S::kInit, pkp_acc, 0});
  all.push_back({T::kUc, S::kInit, S::kInit, 0, pkp_acc});
  all.push_back({T::kUc, S::kInit, S::kRtr, kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn,
                 kQpAltPath | kQpAccessFlags | kQpPkeyIndex});
  all.push_back({T::kUc, S::kRtr, S::kRts, kQpSqPsn,
                 kQpCurState | kQpAltPath | kQpAccessFlags | kQpPathMigState});
  all.push_back(
      {T::kUc, S::kRts, S::kRts, 0, kQpCurState | kQpAccessFlags | kQpAltPath | kQpPathMigState});
  all.push_back(
      {T::kUc, S::kSqd, S::kRts, 0, kQpCurState | kQpAltPath | kQpAccessFlags | kQpPathMigState});
  all.push_back({T::kUc, S::kSqd, S::kSqd, 0,
                 kQpAv | kQpAltPath | kQpAccessFlags | kQpPkeyIndex | kQpPathMigState});
  all.push_back({T::kUc, S::kSqe, S::kRts, 0, kQpCurState | kQpAccessFlags});
  // UD
  all.push_back({T::kUd, S::kReset, S::kInit, kQpPkeyIndex | kQpPort | kQpQkey, 0});
  all.push_back({T::kUd, S::kInit, S::kInit, 0, kQpPkeyIndex | kQpPort | kQpQkey});
  all.push_back({T::kUd, S::kInit, S::kRtr, 0, kQpPkeyIndex | kQpQkey});
  all.push_back({T::kUd, S::kRtr, S::kRts, kQpSqPsn, kQpCurState | kQpQkey});
  all.push_back({T::kUd, S::kRts, S::kRts, 0, kQpCurState | kQpQkey});
  all.push_back({T::kUd, S::kSqd, S::kRts, 0, kQpCurState | kQpQkey});
  all.push_back({T::kUd, S::kSqd, S::kSqd, 0, kQpPkeyIndex | kQpQkey});
  all.push_back({T::kUd, S::kSqe, S::kRts, 0, kQpCurState | kQpQkey});
  return all;
}

std::optional<Row> find_row(T t, S cur, S next) {
  for (const Row& r : expected_rows()) {
    if (r.type == t && r.cur == cur && r.next == next) return r;
  }
  return std::nullopt;
}

constexpr S kAllStates[] = {S::kReset, S::kInit, S::kRtr, S::kRts, S::kSqd, S::kSqe, S::kErr};
constexpr T kAllTypes[] = {T::kRc, T::kUc, T::kUd};
// Every attribute bit of QpAttrMask except kQpState, plus bits that name nothing.
constexpr std::uint32_t kAttrBits[] = {kQpCurState,
                                       kQpEnSqdAsyncNotify,
                                       kQpAccessFlags,
                                       kQpPkeyIndex,
                                       kQpPort,
                                       kQpQkey,
                                       kQpAv,
                                       kQpPathMtu,
                                       kQpTimeout,
                                       kQpRetryCnt,
                                       kQpRnrRetry,
                                       kQpRqPsn,
                                       kQpMaxQpRdAtomic,
                                       kQpAltPath,
                                       kQpMinRnrTimer,
                                       kQpSqPsn,
                                       kQpMaxDestRdAtomic,
                                       kQpPathMigState,
                                       kQpCap,
                                       kQpDestQpn,
                                       kQpRateLimit,
                                       1u << 21,
                                       1u << 24,
                                       1u << 31};

bool cur_state_allowed(S cur) {
  return cur == S::kRtr || cur == S::kRts || cur == S::kSqd || cur == S::kSqe;
}

std::string name(T t, S cur, S next) {
  return std::to_string(static_cast<int>(t)) + ":" + std::to_string(static_cast<int>(cur)) + "->" +
         std::to_string(static_cast<int>(next));
}

TEST(QpStateTable, RulesMatchTheKernelTable) {
  int legal = 0;
  for (T t : kAllTypes) {
    for (S cur : kAllStates) {
      for (S next : kAllStates) {
        const auto row = find_row(t, cur, next);
        const QpTransitionRule rule = qp_transition_rule(t, cur, next);
        EXPECT_EQ(rule.valid, row.has_value()) << name(t, cur, next);
        if (row) {
          ++legal;
          EXPECT_EQ(rule.required, row->req) << name(t, cur, next);
          EXPECT_EQ(rule.optional, row->opt) << name(t, cur, next);
        }
      }
    }
  }
  EXPECT_EQ(legal, 3 * 22);  // 22 legal transitions per type
}

TEST(QpStateTable, EveryLegalTransitionAcceptsExactlyItsMasks) {
  for (const Row& r : expected_rows()) {
    const std::string n = name(r.type, r.cur, r.next);
    const std::uint32_t base = kQpState | r.req;
    // The required attributes (with or without kQpState) ...
    EXPECT_TRUE(modify_qp_is_ok(r.cur, r.next, r.type, base)) << n;
    // ... plus any one or all of the optional ones.
    EXPECT_TRUE(modify_qp_is_ok(r.cur, r.next, r.type, base | r.opt)) << n;
    for (std::uint32_t bit : kAttrBits) {
      const bool in_req = (r.req & bit) != 0;
      const bool in_opt = (r.opt & bit) != 0;
      if (in_req) {
        // Missing one required attribute is an error.
        EXPECT_FALSE(modify_qp_is_ok(r.cur, r.next, r.type, base & ~bit)) << n << " bit " << bit;
      } else if (in_opt) {
        EXPECT_TRUE(modify_qp_is_ok(r.cur, r.next, r.type, base | bit)) << n << " bit " << bit;
      } else {
        // Anything else is an error.
        EXPECT_FALSE(modify_qp_is_ok(r.cur, r.next, r.type, base | bit)) << n << " bit " << bit;
      }
    }
  }
}

TEST(QpStateTable, IllegalTransitionsRejectEveryMask) {
  for (T t : kAllTypes) {
    for (S cur : kAllStates) {
      for (S next : kAllStates) {
        if (find_row(t, cur, next)) continue;
        const std::string n = name(t, cur, next);
        EXPECT_FALSE(modify_qp_is_ok(cur, next, t, kQpState)) << n;
        EXPECT_FALSE(modify_qp_is_ok(cur, next, t, 0)) << n;
        std::uint32_t everything = kQpState;
        for (std::uint32_t bit : kAttrBits) everything |= bit;
        EXPECT_FALSE(modify_qp_is_ok(cur, next, t, everything)) << n;
      }
    }
  }
}

TEST(QpStateTable, CurStateIsOnlyAcceptedFromRtrRtsSqdSqe) {
  for (T t : kAllTypes) {
    for (const Row& r : expected_rows()) {
      if (r.type != t || (r.opt & kQpCurState) == 0) continue;
      EXPECT_TRUE(cur_state_allowed(r.cur));
    }
    // Even where the table would allow everything else: RESET -> RESET, INIT -> ERR.
    EXPECT_FALSE(modify_qp_is_ok(S::kReset, S::kReset, t, kQpState | kQpCurState));
    EXPECT_FALSE(modify_qp_is_ok(S::kInit, S::kErr, t, kQpState | kQpCurState));
    EXPECT_FALSE(modify_qp_is_ok(S::kRtr, S::kErr, t, kQpState | kQpCurState));  // not optional
  }
}

TEST(QpStateTable, ATypicalRcConnectionSetupIsLegal) {
  // ibv_rc_pingpong's masks.
  EXPECT_TRUE(modify_qp_is_ok(S::kReset, S::kInit, T::kRc,
                              kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags));
  EXPECT_TRUE(modify_qp_is_ok(
      S::kInit, S::kRtr, T::kRc,
      kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer));
  EXPECT_TRUE(modify_qp_is_ok(
      S::kRtr, S::kRts, T::kRc,
      kQpState | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpSqPsn | kQpMaxQpRdAtomic));
  // UD (ibv_ud_pingpong).
  EXPECT_TRUE(
      modify_qp_is_ok(S::kReset, S::kInit, T::kUd, kQpState | kQpPkeyIndex | kQpPort | kQpQkey));
  EXPECT_TRUE(modify_qp_is_ok(S::kInit, S::kRtr, T::kUd, kQpState));
  EXPECT_TRUE(modify_qp_is_ok(S::kRtr, S::kRts, T::kUd, kQpState | kQpSqPsn));
}

TEST(QpStateTable, OutOfRangeStatesAreIllegal) {
  const auto bogus = static_cast<S>(7);
  EXPECT_FALSE(qp_transition_rule(T::kRc, bogus, S::kReset).valid);
  EXPECT_FALSE(qp_transition_rule(T::kRc, S::kReset, bogus).valid);
  EXPECT_FALSE(modify_qp_is_ok(bogus, S::kErr, T::kRc, kQpState));
}

}  // namespace
}  // namespace uroce::verbs
