// Completion queues: a bounded ring of work completions with verbs' overflow rule and
// one-shot notification arming.
#include <bit>

#include "verbs/device_state.h"

namespace uroce {

using verbs::detail::from_raw;
using verbs::detail::to_raw;
namespace vd = verbs::detail;

namespace verbs::detail {

// Overflow (IBTA 11.4.2.1, CQ overrun): the CQ enters the error state, the completion is lost
// and the consumer learns it from an affiliated asynchronous event (IBV_EVENT_CQ_ERR). rxe
// raises the same event but keeps the CQ usable; uroce follows the verbs rule and fails later
// polls, so that a lost completion cannot go unnoticed.
void CqObj::push(const Wc& wc, bool solicited) {
  if (error) {
    ++dropped;
    return;
  }
  if (ring.full()) {
    error = true;
    ++dropped;
    AsyncEvent ev;
    ev.type = AsyncEventType::kCqErr;
    ev.cq = self;
    dev_.push_event(ev);
    return;
  }
  ring.push_back(Queued{wc, solicited});
  if (armed_for(wc, solicited)) fire();
}

// IBTA 11.4.2.2 and rxe raise the event for the next completion added after the arming only.
// A consumer that polls its CQ empty, then arms it, then sleeps until the event (UCX does, for
// every interface it stops polling: ucp_worker_iface_check_events_do) loses a completion added
// between its poll and its arming: nothing wakes it until another one comes, and when the peer
// waits for that consumer's answer first, none does (issue 43: the state a 16-rank Open MPI
// alltoall hung in, nothing outstanding and nobody sending). In the drop-in that window is wide:
// UCX's empty poll of the interface's send CQ runs a progress round, which may receive into the
// receive CQ it then arms. ConnectX arms a CQ at the consumer index it has polled up to (the arm
// doorbell carries it, mlx5_arm_cq) and raises the event for any completion past it, those written
// before the arming included; UCX is written for that. uroce does the same: an arming that finds
// a completion it asks for already queued fires at once. A consumer that re-polls after arming,
// as the IBTA pattern has it, only sees one more event with its CQ empty.
void CqObj::request_notify(bool solicited_only) {
  // Arming for the next completion widens a solicited-only arming, never the reverse (rxe).
  if (arm != Arm::kNextComp) arm = solicited_only ? Arm::kSolicited : Arm::kNextComp;
  if (error) return;  // the CQ_ERR event said it all
  for (std::size_t i = 0; i < ring.size(); ++i) {
    if (armed_for(ring[i].wc, ring[i].solicited)) {
      ++dev_.cq_events_at_arm;
      fire();
      return;
    }
  }
}

std::size_t CqObj::remove_qp(std::uint32_t qpn) {
  std::size_t removed = 0;
  for (std::size_t n = ring.size(); n > 0; --n) {
    const Queued q = ring.front();
    ring.pop_front();
    if (q.wc.qp_num == qpn) {
      ++removed;
    } else {
      ring.push_back(q);
    }
  }
  return removed;
}

void CqObj::fire() {
  arm = Arm::kNone;
  ++events;
  if (dev_.comp_handler != nullptr) dev_.comp_handler->cq_event(self, channel);
}

}  // namespace verbs::detail

namespace {

// rxe_queue_init() sizes the ring to a power of two with one slot kept free and reports the
// rest: cqe becomes 2^k - 1 >= cqe (max_cqe is itself of that form).
std::uint32_t cq_capacity(std::uint32_t cqe) {
  return static_cast<std::uint32_t>(std::bit_ceil(std::uint64_t{cqe} + 1) - 1);
}

}  // namespace

Result<CqInfo, Errc> Device::create_cq(const CqInitAttr& attr) {
  vd::DeviceState& s = *s_;
  // rxe_cq_chk_attr() and ib_uverbs' comp_vector check.
  if (attr.cqe == 0 || attr.cqe > s.attr.max_cqe) return Err{Errc::kInvalidArgument};
  if (attr.comp_vector >= s.config.num_comp_vectors) return Err{Errc::kInvalidArgument};
  if (s.cqs.full()) return Err{Errc::kNoMemory};
  const std::uint32_t cqe = cq_capacity(attr.cqe);
  auto cq = std::make_unique<vd::CqObj>(s, cqe, attr.channel);
  vd::CqObj* raw = cq.get();
  const RawHandle h = s.cqs.insert(std::move(cq));
  UROCE_CHECK(h.generation != 0);
  raw->self = from_raw<CqHandle>(h);
  return CqInfo{raw->self, cqe};
}

Result<std::uint32_t, Errc> Device::resize_cq(CqHandle cq, std::uint32_t cqe) {
  vd::DeviceState& s = *s_;
  vd::CqObj* c = s.cqs.get(to_raw(cq));
  if (c == nullptr) return Err{Errc::kInvalidArgument};
  // rxe_cq_chk_attr() with a CQ: the new size must hold what is queued now.
  if (cqe == 0 || cqe > s.attr.max_cqe || cqe < c->ring.size()) {
    return Err{Errc::kInvalidArgument};
  }
  // rxe_queue_resize(): a new ring of the rounded size, the queued completions copied over in
  // order. A verbs call, not the data path: it may allocate.
  const std::uint32_t rounded = cq_capacity(cqe);
  BoundedRing<vd::CqObj::Queued> ring(rounded);
  while (!c->ring.empty()) {
    ring.push_back(c->ring.front());
    c->ring.pop_front();
  }
  c->ring = std::move(ring);
  return rounded;
}

Errc Device::destroy_cq(CqHandle cq) {
  vd::CqObj* c = s_->cqs.get(to_raw(cq));
  if (c == nullptr) return Errc::kInvalidArgument;
  if (c->use_count != 0) return Errc::kBusy;
  s_->cqs.remove(to_raw(cq));
  return Errc::kOk;
}

Result<std::size_t, Errc> Device::poll_cq(CqHandle cq, std::span<Wc> out) {
  vd::CqObj* c = s_->cqs.get(to_raw(cq));
  if (c == nullptr) return Err{Errc::kInvalidArgument};
  if (c->error) return Err{Errc::kNoSpace};
  std::size_t n = 0;
  while (n < out.size() && !c->ring.empty()) {
    out[n++] = c->ring.front().wc;
    c->ring.pop_front();
  }
  return n;
}

std::vector<Device::CqState> Device::cq_states() const {
  std::vector<CqState> out;
  s_->cqs.for_each([&](RawHandle h, const vd::CqObj& c) {
    CqState st;
    st.cq = from_raw<CqHandle>(h);
    st.queued = static_cast<std::uint32_t>(c.ring.size());
    st.capacity = static_cast<std::uint32_t>(c.ring.capacity());
    st.arm = static_cast<std::uint8_t>(c.arm);
    st.error = c.error;
    st.events = c.events;
    st.channel = c.channel;
    out.push_back(st);
  });
  return out;
}

Errc Device::req_notify_cq(CqHandle cq, bool solicited_only) {
  vd::CqObj* c = s_->cqs.get(to_raw(cq));
  if (c == nullptr) return Errc::kInvalidArgument;
  c->request_notify(solicited_only);
  return Errc::kOk;
}

}  // namespace uroce
