// XRC through the libibverbs ABI (issue 41): the verbs_context operations that libibverbs'
// inline ibv_open_xrcd, ibv_close_xrcd, ibv_create_srq_ex, ibv_get_srq_num and ibv_open_qp call,
// over the Device's XRC domains, SRQs and target QPs. ibv_create_qp_ex takes XRC's QP types
// and ibv_wr_set_xrc_srqn (extended.cc), ibv_post_send qp_type.xrc.remote_srqn (ibverbs.cc).
//
// A domain is the context's own: ibv_xrcd_init_attr's file (which lets processes share a domain
// through the kernel) is accepted and not used, since a uroce device belongs to one process.
#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include "compat/ibverbs/compat.h"

namespace uroce::compat {

namespace {

struct Xrcd {
  ibv_xrcd ibv;  // first: an ibv_xrcd* names the Xrcd
  XrcdHandle h;
};
inline Xrcd* xrcd_of(ibv_xrcd* x) { return reinterpret_cast<Xrcd*>(x); }

}  // namespace

ibv_xrcd* vop_open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr) {
  return guarded<ibv_xrcd*>(nullptr, [&]() -> ibv_xrcd* {
    constexpr std::uint32_t kKnown = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    if (attr == nullptr || (attr->comp_mask & ~kKnown) != 0) {
      errno = EINVAL;
      return nullptr;
    }
    // ibv_open_xrcd(3): O_CREAT (and O_EXCL) are the only flags; without O_CREAT the domain
    // must exist already, which one process's file cannot say: accept it as a fresh one.
    if ((attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) != 0 &&
        (attr->oflags & ~(O_CREAT | O_EXCL)) != 0) {
      errno = EINVAL;
      return nullptr;
    }
    engine::UdpDevice* u = net(ctx_of(context));
    if (u == nullptr) return nullptr;
    auto r = u->lock()->open_xrcd();
    if (!r.ok()) {
      errno = err(r.error());
      return nullptr;
    }
    auto* x = new Xrcd();
    std::memset(&x->ibv, 0, sizeof x->ibv);
    x->ibv.context = context;
    x->h = r.value();
    return &x->ibv;
  });
}

int vop_close_xrcd(ibv_xrcd* xrcd) {
  Xrcd* x = xrcd_of(xrcd);
  const Errc e = ctx_of(xrcd->context)->s->udp.load()->lock()->close_xrcd(x->h);
  if (e != Errc::kOk) return err(e);
  delete x;
  return 0;
}

ibv_srq* vop_create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr) {
  return guarded<ibv_srq*>(nullptr, [&]() -> ibv_srq* {
    constexpr std::uint32_t kKnown = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                     IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    constexpr std::uint32_t kXrcNeeds = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                        IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    if (attr == nullptr || (attr->comp_mask & ~kKnown) != 0) {
      errno = EOPNOTSUPP;  // tag matching SRQs
      return nullptr;
    }
    const bool xrc =
        (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) != 0 && attr->srq_type == IBV_SRQT_XRC;
    if (!xrc) {
      // A basic SRQ (libibverbs' inline sends only those with extra fields here).
      if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) == 0 || attr->pd == nullptr ||
          ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) != 0 && attr->srq_type != IBV_SRQT_BASIC)) {
        errno = attr->srq_type == IBV_SRQT_TM ? EOPNOTSUPP : EINVAL;
        return nullptr;
      }
      ibv_srq_init_attr base{attr->srq_context, attr->attr};
      ibv_srq* s = ibv_create_srq(attr->pd, &base);
      if (s != nullptr) attr->attr = base.attr;
      return s;
    }
    if ((attr->comp_mask & kXrcNeeds) != kXrcNeeds || attr->pd == nullptr ||
        attr->xrcd == nullptr || attr->cq == nullptr) {
      errno = EINVAL;
      return nullptr;
    }
    Context* ctx = ctx_of(context);
    engine::UdpDevice* u = net(ctx);
    if (u == nullptr) return nullptr;
    const SrqAttr a{attr->attr.max_wr, attr->attr.max_sge, attr->attr.srq_limit};
    auto r = u->lock()->create_xrc_srq(pd_of(attr->pd)->h, xrcd_of(attr->xrcd)->h,
                                       cq_of(attr->cq)->h, a);
    if (!r.ok()) {
      errno = err(r.error());
      return nullptr;
    }
    attr->attr.max_wr = r.value().attr.max_wr;
    attr->attr.max_sge = r.value().attr.max_sge;
    return new_srq(ctx, attr->pd, attr->srq_context, r.value());
  });
}

int vop_get_srq_num(ibv_srq* srq, std::uint32_t* srq_num) {
  const Srq* s = srq_of(srq);
  if (s->srq_num == 0) return EINVAL;  // a basic SRQ has no number
  *srq_num = s->srq_num;
  return 0;
}

// rdma-core's ibv_cmd_open_qp() checks the mask (EOPNOTSUPP for bits it does not know, EINVAL
// without the number, domain and type); the kernel the rest (Device::open_qp). The handle is
// as rdma-core fills it: no PD, CQs or SRQ, state IBV_QPS_UNKNOWN.
ibv_qp* vop_open_qp(ibv_context* context, ibv_qp_open_attr* attr) {
  return guarded<ibv_qp*>(nullptr, [&]() -> ibv_qp* {
    constexpr std::uint32_t kNeeds =
        IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    if (attr == nullptr || attr->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED) {
      errno = attr == nullptr ? EINVAL : EOPNOTSUPP;
      return nullptr;
    }
    if ((attr->comp_mask & kNeeds) != kNeeds || attr->xrcd == nullptr) {
      errno = EINVAL;
      return nullptr;
    }
    Context* ctx = ctx_of(context);
    engine::UdpDevice* u = net(ctx);
    if (u == nullptr) return nullptr;
    // Any type other than XRC_RECV is the kernel's EINVAL: passed on as one uroce has not.
    const QpType type = attr->qp_type == IBV_QPT_XRC_RECV ? QpType::kXrcRecv : QpType::kRc;
    auto r = u->lock()->open_qp(xrcd_of(attr->xrcd)->h, attr->qp_num, type);
    if (!r.ok()) {
      errno = err(r.error());
      return nullptr;
    }
    ibv_qp b{};
    b.context = context;
    b.qp_context = (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) != 0 ? attr->qp_context : nullptr;
    b.qp_num = attr->qp_num;
    b.state = IBV_QPS_UNKNOWN;
    b.qp_type = IBV_QPT_XRC_RECV;
    return &new_qp(ctx, b, r.value().handle, false, 0)->ibv.qp_base;
  });
}

XrcdHandle xrcd_handle(ibv_xrcd* xrcd) { return xrcd_of(xrcd)->h; }

}  // namespace uroce::compat
