// Heap memory per idle QP: creates N connected-ready QPs (each with its own send and receive
// CQ, as most applications do) on one device and reports the heap growth per QP, measured by
// glibc's mallinfo2() around the creation. Usage: qp_memory [N]
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "uroce/verbs.h"

namespace {

struct Shape {
  const char* name;
  uroce::QpCap cap;
  std::uint8_t max_dest_rd_atomic;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace uroce;
  const int n = argc > 1 ? std::atoi(argv[1]) : 10000;
  const Shape shapes[] = {
      {"minimal (1 WR each way, 1 SGE)", QpCap{1, 1, 1, 1, 0}, 0},
      {"sim default (16 WRs, 3 SGEs)", QpCap{16, 16, 3, 1, 0}, 16},
      {"ibv_rc_pingpong (1 send, 500 recv)", QpCap{1, 500, 1, 1, 0}, 1},
      {"perftest write_bw (128 WRs, inline 220)", QpCap{128, 1, 1, 1, 220}, 16},
  };
  std::printf("%-42s %8s %14s\n", "QP shape (max_send_wr, max_recv_wr ...)", "QPs", "bytes per QP");
  for (const Shape& shape : shapes) {
    DeviceConfig cfg;
    cfg.ip = wire::IpAddress::v4(0x7f000001);
    auto dev = Device::create(cfg);
    if (!dev.ok()) return 1;
    auto pd = dev.value()->alloc_pd();
    const std::size_t before = mallinfo2().uordblks;
    int made = 0;
    for (int i = 0; i < n; ++i) {
      auto scq = dev.value()->create_cq(CqInitAttr{shape.cap.max_send_wr, 0, 0});
      auto rcq = dev.value()->create_cq(CqInitAttr{shape.cap.max_recv_wr, 0, 0});
      if (!scq.ok() || !rcq.ok()) break;
      QpInitAttr init;
      init.send_cq = scq->handle;
      init.recv_cq = rcq->handle;
      init.cap = shape.cap;
      auto qp = dev.value()->create_qp(pd.value(), init);
      if (!qp.ok()) break;
      QpAttr a;
      a.qp_state = QpState::kInit;
      a.port_num = 1;
      dev.value()->modify_qp(qp->handle, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags);
      a.qp_state = QpState::kRtr;
      a.max_dest_rd_atomic = shape.max_dest_rd_atomic;
      a.ah_attr.dgid.raw[10] = a.ah_attr.dgid.raw[11] = 0xff;
      a.ah_attr.dgid.raw[12] = 127;
      a.ah_attr.dgid.raw[15] = 2;
      a.dest_qp_num = 0x100;
      a.min_rnr_timer = 12;
      dev.value()->modify_qp(qp->handle, a,
                             kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                 kQpMaxDestRdAtomic | kQpMinRnrTimer);
      ++made;
    }
    const std::size_t after = mallinfo2().uordblks;
    std::printf("%-42s %8d %14.0f\n", shape.name, made,
                made == 0 ? 0.0 : static_cast<double>(after - before) / made);
  }
  return 0;
}
