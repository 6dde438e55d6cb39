// An RDMA WRITE with liburoce's native API, built with find_package(uroce) in a clean Debian root
// (tests/install/clean_root_test.sh): two RC QPs of the device on ADDR, connected to each other.
#include <cstdio>
#include <cstring>

#include "device/udp_device.h"
#include "verbs/connect.h"

int main(int argc, char** argv) {
  using namespace uroce;
  engine::DeviceSelection sel;
  sel.ip = argc > 1 ? argv[1] : "127.0.0.1";
  auto ud = engine::open_device(sel);
  if (!ud.ok()) return std::fprintf(stderr, "%s\n", ud.error().text.c_str()), 1;
  Device& d = (*ud)->device();
  char src[32] = "written by RDMA WRITE", dst[32] = {};
  const PdHandle pd = d.alloc_pd().value();
  const MrInfo s = d.reg_mr(pd, src, sizeof src, kAccessLocalWrite).value();
  const MrInfo t = d.reg_mr(pd, dst, sizeof dst, kAccessLocalWrite | kAccessRemoteWrite).value();
  const CqHandle cq = d.create_cq(CqInitAttr{16, 0, 0}).value().handle;
  const QpInitAttr init{QpType::kRc, cq, cq, {}, QpCap{4, 4, 1, 1, 0}, false};
  const QpInfo a = d.create_qp(pd, init).value(), b = d.create_qp(pd, init).value();
  verbs::RcConnection c{.peer_ip = d.local_ip(), .peer_qpn = b.qp_num};
  if (verbs::connect_rc_qp(d, a.handle, c) != Errc::kOk) return 1;
  c.peer_qpn = a.qp_num;
  if (verbs::connect_rc_qp(d, b.handle, c) != Errc::kOk) return 1;
  const Sge sge{reinterpret_cast<std::uint64_t>(src), sizeof src, s.lkey};
  SendWr wr{.wr_id = 7,
            .sg_list = std::span(&sge, 1),
            .opcode = WrOpcode::kRdmaWrite,
            .send_flags = kSendSignaled};
  wr.rdma = {reinterpret_cast<std::uint64_t>(dst), t.rkey};
  if (d.post_send(a.handle, std::span(&wr, 1), nullptr) != Errc::kOk) return 1;
  Wc wc[1];
  std::size_t n = 0;
  for (const Instant end = (*ud)->now() + Duration::s(10); n == 0 && (*ud)->now() < end;) {
    (*ud)->progress();
    n = d.poll_cq(cq, wc).value();
  }
  if (n == 0) return std::fprintf(stderr, "no completion in 10 s\n"), 1;
  std::printf("RDMA WRITE: status %d, \"%s\"\n", static_cast<int>(wc[0].status), dst);
  return wc[0].status == WcStatus::kSuccess && std::strcmp(src, dst) == 0 ? 0 : 1;
}
