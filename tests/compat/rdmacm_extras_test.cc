// The drop-in librdmacm's extras.cc, on its own (the core calls it makes go to
// rdmacm_core_stub.cc): rdma_getaddrinfo, rdma_event_str and the port getters against Debian's
// librdmacm.so.1 loaded into the same process (it runs over the drop-in libibverbs that this
// test links, so that it finds a device and answers), and against written expectations;
// rdma_create_ep / rdma_destroy_ep's calls; SRQs on a uroce device; the device list; and the
// errors of multicast, ECE and the rsocket calls.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <endian.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/select.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "compat/rdmacm_core_stub.h"

#pragma GCC visibility push(default)
#include <infiniband/ib.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#pragma GCC visibility pop

namespace {

namespace stub = uroce::rdmacm::stub;

constexpr const char* kRealLibrdmacm = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";

// Debian's librdmacm, by path, beside this program's own rdma_* (extras.cc linked in). Its
// libibverbs.so.1 is the drop-in already loaded (same soname), and its own calls stay inside it
// (RTLD_LOCAL; this program exports no rdma_* symbols).
struct RealLibrdmacm {
  void* handle = nullptr;
  decltype(&rdma_getaddrinfo) getaddrinfo = nullptr;
  decltype(&rdma_freeaddrinfo) freeaddrinfo = nullptr;
  decltype(&rdma_event_str) event_str = nullptr;
  decltype(&rdma_get_src_port) get_src_port = nullptr;
  decltype(&rdma_get_dst_port) get_dst_port = nullptr;
  decltype(&rdma_join_multicast) join_multicast = nullptr;
  decltype(&rdma_join_multicast_ex) join_multicast_ex = nullptr;
  decltype(&rdma_leave_multicast) leave_multicast = nullptr;
  decltype(&rdma_set_local_ece) set_local_ece = nullptr;
  decltype(&rdma_get_remote_ece) get_remote_ece = nullptr;
  decltype(&rsocket) socket = nullptr;
  decltype(&rbind) bind = nullptr;
  decltype(&rclose) close = nullptr;
  decltype(&rgetsockname) getsockname = nullptr;
  decltype(&rsetsockopt) setsockopt = nullptr;
  decltype(&rfcntl) fcntl = nullptr;
  decltype(&rpoll) poll = nullptr;
  decltype(&rselect) select = nullptr;

  template <typename F>
  void sym(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(handle, name));
    if (f == nullptr) handle = nullptr;
  }
  RealLibrdmacm() {
    handle = dlopen(kRealLibrdmacm, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return;
    sym(getaddrinfo, "rdma_getaddrinfo");
    sym(freeaddrinfo, "rdma_freeaddrinfo");
    sym(event_str, "rdma_event_str");
    sym(get_src_port, "rdma_get_src_port");
    sym(get_dst_port, "rdma_get_dst_port");
    sym(join_multicast, "rdma_join_multicast");
    sym(join_multicast_ex, "rdma_join_multicast_ex");
    sym(leave_multicast, "rdma_leave_multicast");
    sym(set_local_ece, "rdma_set_local_ece");
    sym(get_remote_ece, "rdma_get_remote_ece");
    sym(socket, "rsocket");
    sym(bind, "rbind");
    sym(close, "rclose");
    sym(getsockname, "rgetsockname");
    sym(setsockopt, "rsetsockopt");
    sym(fcntl, "rfcntl");
    sym(poll, "rpoll");
    sym(select, "rselect");
  }
};

// The real library, or null (the test then skips its comparisons).
const RealLibrdmacm* real() {
  static const RealLibrdmacm r;
  return r.handle != nullptr ? &r : nullptr;
}

#define REQUIRE_REAL()                                                   \
  do {                                                                   \
    if (real() == nullptr) GTEST_SKIP() << kRealLibrdmacm << ": absent"; \
  } while (0)

class RdmacmExtras : public ::testing::Test {
 protected:
  void SetUp() override { stub::reset(); }
  void TearDown() override { EXPECT_EQ(stub::state().live_ids, 0) << "an ID was not destroyed"; }
};

// ===================================================================== rdma_getaddrinfo

sockaddr_in in4(const char* ip, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  EXPECT_EQ(inet_pton(AF_INET, ip, &a.sin_addr), 1);
  return a;
}

sockaddr_in6 in6(const char* ip, std::uint16_t port) {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(port);
  EXPECT_EQ(inet_pton(AF_INET6, ip, &a.sin6_addr), 1);
  return a;
}

std::string hex(const void* p, std::size_t n) {
  static const char* const kDigits = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    const auto b = static_cast<const unsigned char*>(p)[i];
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

// One rdma_getaddrinfo answer (or error), as text: every field, addresses byte for byte.
std::string describe(int ret, int err, const rdma_addrinfo* rai) {
  if (ret != 0)
    return "ret=" + std::to_string(ret) + (ret == -1 ? " errno=" + std::to_string(err) : "");
  std::string s;
  for (; rai != nullptr; rai = rai->ai_next) {
    s += "flags=" + std::to_string(rai->ai_flags) + " family=" + std::to_string(rai->ai_family) +
         " qp_type=" + std::to_string(rai->ai_qp_type) +
         " ps=" + std::to_string(rai->ai_port_space) +
         " src=" + (rai->ai_src_addr != nullptr ? hex(rai->ai_src_addr, rai->ai_src_len) : "null") +
         "/" + std::to_string(rai->ai_src_len) +
         " dst=" + (rai->ai_dst_addr != nullptr ? hex(rai->ai_dst_addr, rai->ai_dst_len) : "null") +
         "/" + std::to_string(rai->ai_dst_len) +
         " src_canon=" + (rai->ai_src_canonname != nullptr ? rai->ai_src_canonname : "null") +
         " dst_canon=" + (rai->ai_dst_canonname != nullptr ? rai->ai_dst_canonname : "null") +
         " route=" + std::to_string(rai->ai_route_len) +
         " connect=" + std::to_string(rai->ai_connect_len) + ";";
  }
  return s;
}

struct GaiCase {
  const char* node;
  const char* service;
  const rdma_addrinfo* hints;
};

std::string ours(const GaiCase& c) {
  rdma_addrinfo* res = nullptr;
  errno = 0;
  const int ret = rdma_getaddrinfo(c.node, c.service, c.hints, &res);
  const std::string s = describe(ret, errno, res);
  if (ret == 0) rdma_freeaddrinfo(res);
  return s;
}

std::string theirs(const GaiCase& c) {
  rdma_addrinfo* res = nullptr;
  errno = 0;
  const int ret = real()->getaddrinfo(c.node, c.service, c.hints, &res);
  const std::string s = describe(ret, errno, res);
  if (ret == 0) real()->freeaddrinfo(res);
  return s;
}

rdma_addrinfo hints(int flags, int family = 0, int qp_type = 0, int ps = 0) {
  rdma_addrinfo h{};
  h.ai_flags = flags;
  h.ai_family = family;
  h.ai_qp_type = qp_type;
  h.ai_port_space = ps;
  return h;
}

TEST_F(RdmacmExtras, GetaddrinfoActiveIpv4) {
  rdma_addrinfo h{};
  for (const rdma_addrinfo* hp :
       {static_cast<const rdma_addrinfo*>(nullptr), static_cast<const rdma_addrinfo*>(&h)}) {
    rdma_addrinfo* res = nullptr;
    ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", hp, &res), 0);
    EXPECT_EQ(res->ai_flags, 0);
    EXPECT_EQ(res->ai_family, AF_INET);
    EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
    EXPECT_EQ(res->ai_port_space, RDMA_PS_TCP);
    EXPECT_EQ(res->ai_src_addr, nullptr);
    EXPECT_EQ(res->ai_src_len, 0u);
    ASSERT_EQ(res->ai_dst_len, sizeof(sockaddr_in));
    const sockaddr_in want = in4("127.0.0.1", 7471);
    EXPECT_EQ(hex(res->ai_dst_addr, res->ai_dst_len), hex(&want, sizeof want));
    EXPECT_EQ(res->ai_dst_canonname, nullptr);
    EXPECT_EQ(res->ai_route_len, 0u);
    EXPECT_EQ(res->ai_connect_len, 0u);
    EXPECT_EQ(res->ai_next, nullptr);
    rdma_freeaddrinfo(res);
  }
}

TEST_F(RdmacmExtras, GetaddrinfoNumericIpv6) {
  const rdma_addrinfo h = hints(RAI_NUMERICHOST);
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("::1", "18515", &h, &res), 0);
  EXPECT_EQ(res->ai_family, AF_INET6);
  ASSERT_EQ(res->ai_dst_len, sizeof(sockaddr_in6));
  const sockaddr_in6 want = in6("::1", 18515);
  EXPECT_EQ(hex(res->ai_dst_addr, res->ai_dst_len), hex(&want, sizeof want));
  EXPECT_EQ(res->ai_flags, 0);  // only RAI_PASSIVE is ever reported
  rdma_freeaddrinfo(res);
  // A name is not a number.
  EXPECT_EQ(rdma_getaddrinfo("localhost", "18515", &h, &res), EAI_NONAME);
}

TEST_F(RdmacmExtras, GetaddrinfoPassive) {
  const rdma_addrinfo h = hints(RAI_PASSIVE, AF_INET);
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, "7471", &h, &res), 0);
  EXPECT_EQ(res->ai_flags, RAI_PASSIVE);
  EXPECT_EQ(res->ai_dst_addr, nullptr);
  ASSERT_EQ(res->ai_src_len, sizeof(sockaddr_in));
  const sockaddr_in want = in4("0.0.0.0", 7471);
  EXPECT_EQ(hex(res->ai_src_addr, res->ai_src_len), hex(&want, sizeof want));
  rdma_freeaddrinfo(res);
}

TEST_F(RdmacmExtras, GetaddrinfoPortSpacesAndQpTypes) {
  struct {
    int qp_type, ps, want_qp_type, want_ps;
  } const cases[] = {
      {0, RDMA_PS_UDP, IBV_QPT_UD, RDMA_PS_UDP},
      {IBV_QPT_UD, 0, IBV_QPT_UD, RDMA_PS_UDP},
      {IBV_QPT_RC, 0, IBV_QPT_RC, RDMA_PS_TCP},
      {0, RDMA_PS_TCP, IBV_QPT_RC, RDMA_PS_TCP},
      {IBV_QPT_UC, 0, IBV_QPT_UC, RDMA_PS_TCP},
      {IBV_QPT_RC, RDMA_PS_IB, IBV_QPT_RC, RDMA_PS_IB},
      {IBV_QPT_UD, RDMA_PS_IPOIB, IBV_QPT_UD, RDMA_PS_IPOIB},
  };
  for (const auto& c : cases) {
    const rdma_addrinfo h = hints(0, 0, c.qp_type, c.ps);
    rdma_addrinfo* res = nullptr;
    ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", &h, &res), 0) << c.qp_type << " " << c.ps;
    EXPECT_EQ(res->ai_qp_type, c.want_qp_type) << c.qp_type << " " << c.ps;
    EXPECT_EQ(res->ai_port_space, c.want_ps) << c.qp_type << " " << c.ps;
    rdma_freeaddrinfo(res);
  }
  // A datagram QP in the TCP port space: getaddrinfo(3) refuses SOCK_DGRAM with IPPROTO_TCP.
  const rdma_addrinfo bad = hints(0, 0, IBV_QPT_UD, RDMA_PS_TCP);
  rdma_addrinfo* res = nullptr;
  const int ret = rdma_getaddrinfo("127.0.0.1", "7471", &bad, &res);
  EXPECT_NE(ret, 0);
  EXPECT_NE(ret, -1);  // an EAI_* code, returned as it is
}

TEST_F(RdmacmExtras, GetaddrinfoFromHintsAlone) {
  const sockaddr_in src = in4("127.77.250.1", 0);
  const sockaddr_in6 dst = in6("fe80::1", 7471);
  rdma_addrinfo h = hints(RAI_NOROUTE, AF_INET6, IBV_QPT_UD, RDMA_PS_UDP);
  h.ai_src_addr = reinterpret_cast<sockaddr*>(const_cast<sockaddr_in*>(&src));
  h.ai_src_len = sizeof src;
  h.ai_dst_addr = reinterpret_cast<sockaddr*>(const_cast<sockaddr_in6*>(&dst));
  h.ai_dst_len = sizeof dst;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, nullptr, &h, &res), 0);
  EXPECT_EQ(res->ai_flags, RAI_NOROUTE);
  EXPECT_EQ(res->ai_family, AF_INET6);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_UD);
  EXPECT_EQ(res->ai_port_space, RDMA_PS_UDP);
  EXPECT_EQ(hex(res->ai_src_addr, res->ai_src_len), hex(&src, sizeof src));
  EXPECT_EQ(hex(res->ai_dst_addr, res->ai_dst_len), hex(&dst, sizeof dst));
  EXPECT_NE(res->ai_src_addr, h.ai_src_addr);  // copies
  EXPECT_NE(res->ai_dst_addr, h.ai_dst_addr);
  rdma_freeaddrinfo(res);

  // With a node: the hints' source when the answer has none (an active answer), never their
  // destination.
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", &h, &res), EAI_ADDRFAMILY);  // AF_INET6 asked
  h.ai_family = AF_INET;
  h.ai_qp_type = 0;
  h.ai_port_space = 0;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", &h, &res), 0);
  EXPECT_EQ(hex(res->ai_src_addr, res->ai_src_len), hex(&src, sizeof src));
  const sockaddr_in want = in4("127.0.0.1", 7471);
  EXPECT_EQ(hex(res->ai_dst_addr, res->ai_dst_len), hex(&want, sizeof want));
  rdma_freeaddrinfo(res);
}

TEST_F(RdmacmExtras, GetaddrinfoErrors) {
  rdma_addrinfo* res = nullptr;
  errno = 0;
  EXPECT_EQ(rdma_getaddrinfo(nullptr, nullptr, nullptr, &res), -1);
  EXPECT_EQ(errno, EINVAL);
  const rdma_addrinfo h = hints(RAI_NUMERICHOST);
  EXPECT_EQ(rdma_getaddrinfo("300.1.1.1", "7471", &h, &res), EAI_NONAME);
  rdma_freeaddrinfo(nullptr);
}

TEST_F(RdmacmExtras, GetaddrinfoAfIb) {
  const rdma_addrinfo h = hints(RAI_FAMILY | RAI_NUMERICHOST, AF_IB, 0, RDMA_PS_TCP);
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("fe80::2", "7471", &h, &res), 0);
  EXPECT_EQ(res->ai_family, AF_IB);
  ASSERT_EQ(res->ai_dst_len, sizeof(sockaddr_ib));
  sockaddr_ib sib;
  std::memcpy(&sib, res->ai_dst_addr, sizeof sib);
  EXPECT_EQ(sib.sib_family, AF_IB);
  EXPECT_EQ(sib.sib_pkey, htobe16(0xffff));
  EXPECT_EQ(be64toh(sib.sib_sid), 0x0000000001060000ull + 7471);
  EXPECT_EQ(be64toh(sib.sib_sid_mask), RDMA_IB_IP_PS_MASK | RDMA_IB_IP_PORT_MASK);
  const sockaddr_in6 want = in6("fe80::2", 0);
  EXPECT_EQ(hex(&sib.sib_addr, 16), hex(&want.sin6_addr, 16));
  rdma_freeaddrinfo(res);
}

// Every case, ours and Debian's, field for field.
TEST_F(RdmacmExtras, GetaddrinfoMatchesRdmaCore) {
  REQUIRE_REAL();
  const sockaddr_in src4 = in4("127.77.250.1", 0);
  const sockaddr_in dst4 = in4("127.77.250.2", 7471);
  auto with_addrs = [&](rdma_addrinfo h) {
    h.ai_src_addr = reinterpret_cast<sockaddr*>(const_cast<sockaddr_in*>(&src4));
    h.ai_src_len = sizeof src4;
    h.ai_dst_addr = reinterpret_cast<sockaddr*>(const_cast<sockaddr_in*>(&dst4));
    h.ai_dst_len = sizeof dst4;
    return h;
  };
  const std::vector<rdma_addrinfo> hint_sets = {
      hints(0),
      hints(RAI_PASSIVE),
      hints(RAI_NUMERICHOST),
      hints(RAI_PASSIVE | RAI_NUMERICHOST),
      hints(0, AF_INET),
      hints(0, AF_INET6),
      hints(RAI_FAMILY, AF_INET6),
      hints(RAI_FAMILY | RAI_NUMERICHOST, AF_IB),
      hints(RAI_FAMILY | RAI_NUMERICHOST | RAI_PASSIVE, AF_IB, 0, RDMA_PS_UDP),
      hints(RAI_NOROUTE),
      hints(0, 0, IBV_QPT_RC),
      hints(0, 0, IBV_QPT_UD),
      hints(0, 0, IBV_QPT_UC),
      hints(0, 0, IBV_QPT_XRC_SEND),
      hints(0, 0, 0, RDMA_PS_TCP),
      hints(0, 0, 0, RDMA_PS_UDP),
      hints(0, 0, 0, RDMA_PS_IB),
      hints(0, 0, 0, RDMA_PS_IPOIB),
      hints(0, 0, IBV_QPT_UD, RDMA_PS_IB),
      hints(0, 0, IBV_QPT_UD, RDMA_PS_TCP),
      hints(0, 0, IBV_QPT_RC, RDMA_PS_UDP),
      with_addrs(hints(0)),
      with_addrs(hints(RAI_PASSIVE)),
      with_addrs(hints(RAI_PASSIVE, AF_INET, IBV_QPT_UD, RDMA_PS_UDP)),
  };
  const char* const nodes[] = {nullptr,     "127.0.0.1", "::1", "fe80::2", "localhost",
                               "300.1.1.1", "0.0.0.0",   "::",  ""};
  const char* const services[] = {nullptr, "7471", "0", "65535", "notaport"};
  int compared = 0;
  for (const char* node : nodes) {
    for (const char* service : services) {
      const GaiCase no_hints{node, service, nullptr};
      if (node == nullptr || std::strcmp(node, "300.1.1.1") != 0) {
        EXPECT_EQ(ours(no_hints), theirs(no_hints))
            << (node ? node : "(null)") << " " << (service ? service : "(null)") << " no hints";
      }
      for (std::size_t i = 0; i < hint_sets.size(); ++i) {
        // AF_IB with an IPv4 answer: the stock library reads past the sockaddr_in (see to_rai).
        const rdma_addrinfo& h = hint_sets[i];
        if (h.ai_family == AF_IB && node != nullptr && std::strchr(node, ':') == nullptr) continue;
        if (h.ai_family == AF_IB && node == nullptr) continue;
        // A name that is not a number, not in /etc/hosts either: a DNS query (and its timeout).
        if (node != nullptr && std::strcmp(node, "300.1.1.1") == 0 &&
            (h.ai_flags & RAI_NUMERICHOST) == 0) {
          continue;
        }
        const GaiCase c{node, service, &h};
        EXPECT_EQ(ours(c), theirs(c))
            << (node ? node : "(null)") << " " << (service ? service : "(null)") << " hints #" << i;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 500);
}

// ===================================================================== pure functions

TEST_F(RdmacmExtras, EventStrings) {
  const char* const kNames[] = {
      "RDMA_CM_EVENT_ADDR_RESOLVED",   "RDMA_CM_EVENT_ADDR_ERROR",
      "RDMA_CM_EVENT_ROUTE_RESOLVED",  "RDMA_CM_EVENT_ROUTE_ERROR",
      "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
      "RDMA_CM_EVENT_CONNECT_ERROR",   "RDMA_CM_EVENT_UNREACHABLE",
      "RDMA_CM_EVENT_REJECTED",        "RDMA_CM_EVENT_ESTABLISHED",
      "RDMA_CM_EVENT_DISCONNECTED",    "RDMA_CM_EVENT_DEVICE_REMOVAL",
      "RDMA_CM_EVENT_MULTICAST_JOIN",  "RDMA_CM_EVENT_MULTICAST_ERROR",
      "RDMA_CM_EVENT_ADDR_CHANGE",     "RDMA_CM_EVENT_TIMEWAIT_EXIT",
  };
  static_assert(RDMA_CM_EVENT_TIMEWAIT_EXIT == 15);
  for (int e = 0; e <= RDMA_CM_EVENT_TIMEWAIT_EXIT; ++e) {
    EXPECT_STREQ(rdma_event_str(static_cast<rdma_cm_event_type>(e)), kNames[e]);
  }
  for (int e : {-1, 16, 17, 100}) {
    EXPECT_STREQ(rdma_event_str(static_cast<rdma_cm_event_type>(e)), "UNKNOWN EVENT");
  }
  if (real() == nullptr) return;
  for (int e = -3; e < 40; ++e) {
    const auto ev = static_cast<rdma_cm_event_type>(e);
    EXPECT_STREQ(rdma_event_str(ev), real()->event_str(ev)) << e;
  }
}

TEST_F(RdmacmExtras, Ports) {
  std::vector<rdma_cm_id> ids(5);
  const sockaddr_in a4 = in4("127.0.0.1", 7471);
  const sockaddr_in6 a6 = in6("::1", 18515);
  std::memcpy(&ids[0].route.addr.src_storage, &a4, sizeof a4);
  std::memcpy(&ids[0].route.addr.dst_storage, &a6, sizeof a6);
  std::memcpy(&ids[1].route.addr.src_storage, &a6, sizeof a6);
  std::memcpy(&ids[1].route.addr.dst_storage, &a4, sizeof a4);
  sockaddr_ib ib{};
  ib.sib_family = AF_IB;
  ib.sib_sid = htobe64(0x0000000001060000ull + 4791);
  std::memcpy(&ids[2].route.addr.src_storage, &ib, sizeof ib);
  ids[3].route.addr.src_storage.ss_family = AF_UNIX;  // not an RDMA address: 0
  // ids[4]: nothing bound or resolved.

  EXPECT_EQ(rdma_get_src_port(&ids[0]), htons(7471));
  EXPECT_EQ(rdma_get_dst_port(&ids[0]), htons(18515));
  EXPECT_EQ(rdma_get_src_port(&ids[1]), htons(18515));
  EXPECT_EQ(rdma_get_dst_port(&ids[1]), htons(7471));
  EXPECT_EQ(rdma_get_src_port(&ids[2]), htons(4791));
  EXPECT_EQ(rdma_get_src_port(&ids[3]), 0);
  EXPECT_EQ(rdma_get_src_port(&ids[4]), 0);
  EXPECT_EQ(rdma_get_dst_port(&ids[4]), 0);
  if (real() == nullptr) return;
  for (rdma_cm_id& id : ids) {
    EXPECT_EQ(rdma_get_src_port(&id), real()->get_src_port(&id));
    EXPECT_EQ(rdma_get_dst_port(&id), real()->get_dst_port(&id));
  }
}

// ===================================================================== endpoints

TEST_F(RdmacmExtras, CreateEpActive) {
  ibv_pd* const pd = reinterpret_cast<ibv_pd*>(0x1000);  // seen by the stub only
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", nullptr, &res), 0);
  ibv_qp_init_attr attr{};
  attr.cap.max_send_wr = 4;
  attr.qp_type = IBV_QPT_UD;  // the answer's type wins
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_ep(&id, res, pd, &attr), 0);
  ASSERT_NE(id, nullptr);
  EXPECT_EQ(attr.qp_type, IBV_QPT_RC);
  EXPECT_EQ(stub::state().qp_pd, pd);
  EXPECT_EQ(stub::state().qp_attr.cap.max_send_wr, 4u);
  EXPECT_EQ(id->qp_type, IBV_QPT_RC);
  EXPECT_NE(id->qp, nullptr);
  rdma_destroy_ep(id);
  rdma_freeaddrinfo(res);
  const std::vector<std::string> want = {
      "create_id ps=262",  // RDMA_PS_TCP, a null channel (synchronous)
      "resolve_addr src=none dst=AF_INET:7471 timeout=2000",
      "resolve_route timeout=2000",
      "create_qp pd=set qp_type=2",
      "destroy_qp",
      "destroy_id",
  };
  EXPECT_EQ(stub::state().calls, want);
}

TEST_F(RdmacmExtras, CreateEpActiveUdWithoutQp) {
  const rdma_addrinfo h = hints(0, AF_INET6, 0, RDMA_PS_UDP);
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("::1", "7174", &h, &res), 0);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_ep(&id, res, nullptr, nullptr), 0);
  EXPECT_EQ(id->qp_type, IBV_QPT_UD);
  EXPECT_EQ(id->qp, nullptr);
  rdma_destroy_ep(id);
  rdma_freeaddrinfo(res);
  const std::vector<std::string> want = {
      "create_id ps=273",
      "resolve_addr src=none dst=AF_INET6:7174 timeout=2000",
      "resolve_route timeout=2000",
      "destroy_id",
  };
  EXPECT_EQ(stub::state().calls, want);
}

TEST_F(RdmacmExtras, CreateEpPassiveKeepsDefaults) {
  ibv_pd* const pd = reinterpret_cast<ibv_pd*>(0x2000);
  ibv_srq* const srq = reinterpret_cast<ibv_srq*>(0x3000);
  const rdma_addrinfo h = hints(RAI_PASSIVE, AF_INET, IBV_QPT_UD, RDMA_PS_UDP);
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, "7471", &h, &res), 0);
  ibv_qp_init_attr attr{};
  attr.cap.max_recv_wr = 9;
  attr.srq = srq;
  attr.qp_type = IBV_QPT_RC;
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_ep(&id, res, pd, &attr), 0);
  EXPECT_EQ(id->pd, pd);
  EXPECT_EQ(id->qp, nullptr);  // the QPs come with rdma_get_request
  const uroce::rdmacm::EpDefaults& d = uroce::rdmacm::ep_defaults(id);
  EXPECT_EQ(d.pd, pd);
  ASSERT_TRUE(d.has_qp_init);
  EXPECT_EQ(d.qp_init.qp_type, IBV_QPT_UD);
  EXPECT_EQ(d.qp_init.cap.max_recv_wr, 9u);
  EXPECT_EQ(d.qp_init.srq, srq);        // passed along as given
  EXPECT_EQ(attr.qp_type, IBV_QPT_RC);  // the caller's attributes are left alone
  rdma_destroy_ep(id);
  rdma_freeaddrinfo(res);
  const std::vector<std::string> want = {"create_id ps=273", "bind AF_INET:7471", "destroy_id"};
  EXPECT_EQ(stub::state().calls, want);
}

TEST_F(RdmacmExtras, CreateEpFailuresDestroyTheId) {
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", nullptr, &res), 0);
  ibv_qp_init_attr attr{};
  for (const char* call : {"resolve_addr", "resolve_route", "create_qp"}) {
    stub::reset();
    stub::state().fail_call = call;
    stub::state().fail_errno = ETIMEDOUT;
    rdma_cm_id* id = reinterpret_cast<rdma_cm_id*>(0x1);
    errno = 0;
    EXPECT_EQ(rdma_create_ep(&id, res, nullptr, &attr), -1) << call;
    EXPECT_EQ(errno, ETIMEDOUT) << call;
    EXPECT_EQ(id, reinterpret_cast<rdma_cm_id*>(0x1)) << call;
    EXPECT_EQ(stub::state().calls.back(), "destroy_id") << call;
    EXPECT_EQ(stub::state().live_ids, 0) << call;
  }
  stub::reset();
  stub::state().fail_call = "create_id";
  stub::state().fail_errno = ENODEV;
  rdma_cm_id* id = nullptr;
  EXPECT_EQ(rdma_create_ep(&id, res, nullptr, nullptr), -1);
  EXPECT_EQ(errno, ENODEV);
  rdma_freeaddrinfo(res);

  const rdma_addrinfo h = hints(RAI_PASSIVE);
  ASSERT_EQ(rdma_getaddrinfo(nullptr, "7471", &h, &res), 0);
  stub::reset();
  stub::state().fail_call = "bind";
  stub::state().fail_errno = EADDRINUSE;
  EXPECT_EQ(rdma_create_ep(&id, res, nullptr, &attr), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  EXPECT_EQ(stub::state().live_ids, 0);
  rdma_freeaddrinfo(res);
}

// ===================================================================== SRQs on a uroce device

class RdmacmSrq : public RdmacmExtras {
 protected:
  void SetUp() override {
    RdmacmExtras::SetUp();
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ASSERT_NE(list, nullptr);
    ASSERT_GT(n, 0);
    ctx_ = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    ASSERT_NE(ctx_, nullptr);
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
    stub::state().verbs = ctx_;
    stub::state().default_pd = pd_;
  }
  void TearDown() override {
    if (pd_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);  // EBUSY if an SRQ or CQ was left
    }
    if (ctx_ != nullptr) ibv_close_device(ctx_);
    RdmacmExtras::TearDown();
  }
  rdma_cm_id* bound_id(rdma_port_space ps = RDMA_PS_TCP) {
    rdma_cm_id* id = nullptr;
    EXPECT_EQ(rdma_create_id(nullptr, &id, nullptr, ps), 0);
    sockaddr_in a = in4("127.77.250.1", 0);
    EXPECT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&a)), 0);
    return id;
  }
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
};

TEST_F(RdmacmSrq, OnTheIdsPd) {
  rdma_cm_id* id = bound_id();
  ibv_srq_init_attr attr{};
  attr.srq_context = id;
  attr.attr.max_wr = 16;
  attr.attr.max_sge = 1;
  ASSERT_EQ(rdma_create_srq(id, nullptr, &attr), 0) << std::strerror(errno);
  ASSERT_NE(id->srq, nullptr);
  EXPECT_EQ(id->srq->pd, pd_);
  EXPECT_EQ(id->srq->srq_context, id);
  EXPECT_GE(attr.attr.max_wr, 16u);  // the actual capacities, written back
  EXPECT_EQ(id->recv_cq, nullptr);   // a basic SRQ gets no CQ from the library
  rdma_destroy_srq(id);
  EXPECT_EQ(id->srq, nullptr);
  rdma_destroy_id(id);
}

TEST_F(RdmacmSrq, OnAGivenPd) {
  rdma_cm_id* id = bound_id();
  ibv_pd* other = ibv_alloc_pd(ctx_);
  ASSERT_NE(other, nullptr);
  ibv_srq_init_attr_ex attr{};
  attr.attr.max_wr = 8;
  attr.attr.max_sge = 1;
  attr.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
  attr.srq_type = IBV_SRQT_BASIC;
  attr.pd = other;
  ASSERT_EQ(rdma_create_srq_ex(id, &attr), 0) << std::strerror(errno);
  EXPECT_EQ(id->srq->pd, other);
  EXPECT_EQ(id->pd, pd_);  // the ID keeps its own
  rdma_destroy_srq(id);
  EXPECT_EQ(ibv_dealloc_pd(other), 0);
  rdma_destroy_id(id);
}

TEST_F(RdmacmSrq, Errors) {
  rdma_cm_id* id = bound_id();
  ibv_srq_init_attr_ex attr{};
  attr.attr.max_wr = 8;
  attr.attr.max_sge = 1;
  attr.comp_mask = IBV_SRQ_INIT_ATTR_PD;  // no type
  errno = 0;
  EXPECT_EQ(rdma_create_srq_ex(id, &attr), -1);
  EXPECT_EQ(errno, EINVAL);

  // An XRC receive ID's SRQ is an XRC SRQ on the device's XRC domain, with a CQ and completion
  // channel of its own (as rdma-core's ucma_create_xsrq); rdma_destroy_srq takes all three.
  id->qp_type = IBV_QPT_XRC_RECV;
  ibv_srq_init_attr basic{};
  basic.attr.max_wr = 8;
  basic.attr.max_sge = 1;
  ASSERT_EQ(rdma_create_srq(id, nullptr, &basic), 0) << std::strerror(errno);
  ASSERT_NE(id->srq, nullptr);
  EXPECT_NE(id->recv_cq, nullptr);
  EXPECT_NE(id->recv_cq_channel, nullptr);
  std::uint32_t srq_num = 0;
  EXPECT_EQ(ibv_get_srq_num(id->srq, &srq_num), 0);  // an XRC SRQ has a number
  EXPECT_NE(srq_num, 0u);
  rdma_destroy_srq(id);
  EXPECT_EQ(id->srq, nullptr);
  EXPECT_EQ(id->recv_cq, nullptr);
  EXPECT_EQ(id->recv_cq_channel, nullptr);
  rdma_destroy_id(id);

  // Not bound: no PD to put it on.
  rdma_cm_id* unbound = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &unbound, nullptr, RDMA_PS_TCP), 0);
  errno = 0;
  EXPECT_EQ(rdma_create_srq(unbound, nullptr, &basic), -1);
  EXPECT_EQ(errno, EINVAL);
  rdma_destroy_id(unbound);
}

TEST_F(RdmacmSrq, DestroyEpTakesQpThenSrqThenId) {
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("127.77.250.1", "7471", nullptr, &res), 0);
  rdma_cm_id* id = nullptr;
  ibv_qp_init_attr qp_attr{};
  ASSERT_EQ(rdma_create_ep(&id, res, nullptr, &qp_attr), 0);
  rdma_freeaddrinfo(res);
  ibv_srq_init_attr attr{};
  attr.attr.max_wr = 4;
  attr.attr.max_sge = 1;
  ASSERT_EQ(rdma_create_srq(id, nullptr, &attr), 0) << std::strerror(errno);
  stub::state().calls.clear();
  rdma_destroy_ep(id);  // the SRQ is gone before the ID (else TearDown's PD is busy)
  const std::vector<std::string> want = {"destroy_qp", "destroy_id"};
  EXPECT_EQ(stub::state().calls, want);
}

// ===================================================================== devices

TEST_F(RdmacmExtras, Devices) {
  auto* a = reinterpret_cast<ibv_context*>(0x10);
  auto* b = reinterpret_cast<ibv_context*>(0x20);
  // Configured: a, one that did not open, b.
  stub::state().contexts = {a, nullptr, b, nullptr};
  stub::state().contexts_count = 3;
  int n = -1;
  ibv_context** list = rdma_get_devices(&n);
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(list[0], a);
  EXPECT_EQ(list[1], b);
  EXPECT_EQ(list[2], nullptr);
  EXPECT_NE(list, stub::state().contexts.data());  // the caller's own copy
  rdma_free_devices(list);
  ASSERT_NE(list = rdma_get_devices(nullptr), nullptr);
  rdma_free_devices(list);

  // None opened: an empty list.
  stub::state().contexts = {nullptr, nullptr};
  stub::state().contexts_count = 1;
  ASSERT_NE(list = rdma_get_devices(&n), nullptr);
  EXPECT_EQ(n, 0);
  EXPECT_EQ(list[0], nullptr);
  rdma_free_devices(list);

  // None configured.
  stub::state().contexts = {nullptr};
  stub::state().contexts_count = 0;
  n = -1;
  errno = 0;
  EXPECT_EQ(rdma_get_devices(&n), nullptr);
  EXPECT_EQ(n, 0);
  EXPECT_EQ(errno, ENODEV);
}

// ===================================================================== multicast, ECE

TEST_F(RdmacmExtras, MulticastFails) {
  rdma_cm_id bound{};
  bound.verbs = reinterpret_cast<ibv_context*>(0x10);
  bound.qp_type = IBV_QPT_UD;
  rdma_cm_id unbound{};
  sockaddr_in group = in4("239.1.2.3", 0);
  sockaddr_in6 group6 = in6("ff0e::1", 0);
  sockaddr unix_addr{};
  unix_addr.sa_family = AF_UNIX;
  auto* g = reinterpret_cast<sockaddr*>(&group);

  struct Want {
    int ret, err;
  };
  auto got = [](int ret) { return Want{ret, ret == -1 ? errno : 0}; };
  auto expect = [](Want w, int err) {
    EXPECT_EQ(w.ret, -1);
    EXPECT_EQ(w.err, err);
  };
  expect(got(rdma_join_multicast(&bound, g, nullptr)), ENOSYS);
  expect(got(rdma_join_multicast(&bound, reinterpret_cast<sockaddr*>(&group6), nullptr)), ENOSYS);
  expect(got(rdma_join_multicast(&unbound, g, nullptr)), EINVAL);
  expect(got(rdma_join_multicast(&bound, nullptr, nullptr)), EINVAL);
  expect(got(rdma_join_multicast(&bound, &unix_addr, nullptr)), EINVAL);

  rdma_cm_join_mc_attr_ex ex{};
  ex.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
  ex.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
  ex.addr = g;
  expect(got(rdma_join_multicast_ex(&bound, &ex, nullptr)), ENOSYS);
  expect(got(rdma_join_multicast_ex(&unbound, &ex, nullptr)), EINVAL);
  std::vector<std::pair<rdma_cm_join_mc_attr_ex, int>> bad;
  auto variant = [&](auto change, int err) {
    rdma_cm_join_mc_attr_ex v = ex;
    change(v);
    bad.emplace_back(v, err);
  };
  variant([](auto& v) { v.comp_mask = RDMA_CM_JOIN_MC_ATTR_RESERVED; }, ENOTSUP);
  variant([](auto& v) { v.comp_mask |= RDMA_CM_JOIN_MC_ATTR_RESERVED; }, ENOTSUP);
  variant([](auto& v) { v.comp_mask = RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS; }, EINVAL);
  variant([](auto& v) { v.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS; }, EINVAL);
  variant([](auto& v) { v.join_flags = RDMA_MC_JOIN_FLAG_RESERVED; }, EINVAL);
  variant([](auto& v) { v.addr = nullptr; }, EINVAL);
  variant([&](auto& v) { v.addr = &unix_addr; }, EINVAL);
  for (auto& [v, err] : bad) {
    expect(got(rdma_join_multicast_ex(&bound, &v, nullptr)), err);
    // The library's own checks come before it looks at the ID: Debian's answers the same.
    if (real() != nullptr) expect(got(real()->join_multicast_ex(&bound, &v, nullptr)), err);
  }

  expect(got(rdma_leave_multicast(&bound, g)), EADDRNOTAVAIL);  // never joined
  expect(got(rdma_leave_multicast(&bound, nullptr)), EINVAL);
  expect(got(rdma_leave_multicast(&bound, &unix_addr)), EINVAL);
  if (real() != nullptr) {
    expect(got(real()->join_multicast(&bound, nullptr, nullptr)), EINVAL);
    expect(got(real()->join_multicast(&bound, &unix_addr, nullptr)), EINVAL);
    expect(got(real()->leave_multicast(&bound, nullptr)), EINVAL);
  }
}

TEST_F(RdmacmExtras, Ece) {
  rdma_cm_id id{};
  ibv_ece ece{};
  ece.vendor_id = 0x15b3;
  ece.options = 7;
  EXPECT_EQ(rdma_set_local_ece(&id, &ece), 0);
  ibv_ece remote{0xdead, 0xbeef, 0x1};
  EXPECT_EQ(rdma_get_remote_ece(&id, &remote), 0);
  EXPECT_EQ(remote.vendor_id, 0u);
  EXPECT_EQ(remote.options, 0u);
  EXPECT_EQ(remote.comp_mask, 0u);

  // The checks: an ID, no QP on it, an ECE, a vendor, no comp_mask.
  rdma_cm_id with_qp{};
  with_qp.qp = reinterpret_cast<ibv_qp*>(0x10);
  ibv_ece no_vendor{0, 7, 0};
  ibv_ece with_mask{0x15b3, 7, 1};
  struct Case {
    rdma_cm_id* id;
    ibv_ece* ece;
  };
  for (const Case& c : {Case{nullptr, &ece}, Case{&with_qp, &ece}, Case{&id, nullptr},
                        Case{&id, &no_vendor}, Case{&id, &with_mask}}) {
    errno = 0;
    EXPECT_EQ(rdma_set_local_ece(c.id, c.ece), -1);
    EXPECT_EQ(errno, EINVAL);
    if (real() != nullptr) {
      errno = 0;
      EXPECT_EQ(real()->set_local_ece(c.id, c.ece), -1);
      EXPECT_EQ(errno, EINVAL);
    }
  }
  for (const Case& c : {Case{nullptr, &remote}, Case{&with_qp, &remote}, Case{&id, nullptr}}) {
    errno = 0;
    EXPECT_EQ(rdma_get_remote_ece(c.id, c.ece), -1);
    EXPECT_EQ(errno, EINVAL);
    if (real() != nullptr) {
      errno = 0;
      EXPECT_EQ(real()->get_remote_ece(c.id, c.ece), -1);
      EXPECT_EQ(errno, EINVAL);
    }
  }

  const char data[] = "no";
  EXPECT_EQ(rdma_reject_ece(&id, data, 3), 0);
  EXPECT_EQ(stub::state().calls, std::vector<std::string>{"reject len=3"});
}

// ===================================================================== rsockets

TEST_F(RdmacmExtras, RsocketFailsWithoutDevice) {
  for (auto [domain, type, protocol] :
       std::vector<std::array<int, 3>>{{AF_INET, SOCK_STREAM, 0},
                                       {AF_INET6, SOCK_STREAM, IPPROTO_TCP},
                                       {AF_IB, SOCK_STREAM, 0},
                                       {AF_INET, SOCK_DGRAM, 0},
                                       {AF_INET6, SOCK_DGRAM, IPPROTO_UDP}}) {
    errno = 0;
    EXPECT_EQ(rsocket(domain, type, protocol), -1);
    EXPECT_EQ(errno, ENODEV) << domain << " " << type << " " << protocol;
  }
  for (auto [domain, type, protocol] :
       std::vector<std::array<int, 3>>{{AF_UNIX, SOCK_STREAM, 0},
                                       {AF_INET, SOCK_SEQPACKET, 0},
                                       {AF_INET, SOCK_STREAM, IPPROTO_UDP},
                                       {AF_INET, SOCK_DGRAM, IPPROTO_TCP}}) {
    errno = 0;
    EXPECT_EQ(rsocket(domain, type, protocol), -1);
    EXPECT_EQ(errno, ENOTSUP);
    if (real() != nullptr) {
      errno = 0;
      EXPECT_EQ(real()->socket(domain, type, protocol), -1);
      EXPECT_EQ(errno, ENOTSUP);
    }
  }
}

TEST_F(RdmacmExtras, RsocketCallsOnOtherDescriptors) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const int fd = pipe_fds[0];
  char buf[8];
  sockaddr_in a = in4("127.0.0.1", 7471);
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  socklen_t len = sizeof a;
  iovec iov{buf, sizeof buf};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  int one = 1;

  auto ebadf = [](long ret, const char* what) {
    EXPECT_EQ(ret, -1) << what;
    EXPECT_EQ(errno, EBADF) << what;
    errno = 0;
  };
  for (int s : {fd, -1, 12345}) {
    errno = 0;
    ebadf(rbind(s, sa, len), "rbind");
    ebadf(rlisten(s, 1), "rlisten");
    ebadf(raccept(s, sa, &len), "raccept");
    ebadf(rconnect(s, sa, len), "rconnect");
    ebadf(rshutdown(s, SHUT_RDWR), "rshutdown");
    ebadf(rrecv(s, buf, sizeof buf, 0), "rrecv");
    ebadf(rrecvfrom(s, buf, sizeof buf, 0, sa, &len), "rrecvfrom");
    ebadf(rrecvmsg(s, &msg, 0), "rrecvmsg");
    ebadf(rsend(s, buf, sizeof buf, 0), "rsend");
    ebadf(rsendto(s, buf, sizeof buf, 0, sa, len), "rsendto");
    ebadf(rsendmsg(s, &msg, 0), "rsendmsg");
    ebadf(rread(s, buf, sizeof buf), "rread");
    ebadf(rreadv(s, &iov, 1), "rreadv");
    ebadf(rwrite(s, buf, sizeof buf), "rwrite");
    ebadf(rwritev(s, &iov, 1), "rwritev");
    ebadf(rgetpeername(s, sa, &len), "rgetpeername");
    ebadf(rgetsockname(s, sa, &len), "rgetsockname");
    ebadf(rsetsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), "rsetsockopt");
    ebadf(rgetsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, &len), "rgetsockopt");
    ebadf(rfcntl(s, F_GETFL), "rfcntl");
    ebadf(riomap(s, buf, sizeof buf, PROT_WRITE, 0, -1), "riomap");
    ebadf(riounmap(s, buf, sizeof buf), "riounmap");
    EXPECT_EQ(riowrite(s, buf, sizeof buf, 0, 0), SIZE_MAX);
    EXPECT_EQ(errno, EBADF);
    // rclose answers EBADF itself, errno untouched.
    errno = 0;
    EXPECT_EQ(rclose(s), EBADF);
    EXPECT_EQ(errno, 0);
    // Debian's, for those of its calls that check the descriptor's range (idm_lookup; its
    // idm_at calls, rrecv and the like, read through a null table instead).
    if (real() != nullptr && s >= 0) {
      ebadf(real()->bind(s, sa, len), "real rbind");
      ebadf(real()->getsockname(s, sa, &len), "real rgetsockname");
      ebadf(real()->setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), "real rsetsockopt");
      ebadf(real()->fcntl(s, F_GETFL), "real rfcntl");
      EXPECT_EQ(real()->close(s), EBADF);
    }
  }
  // Control messages: ENOTSUP before the descriptor is looked at.
  char control[32];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  errno = 0;
  EXPECT_EQ(rrecvmsg(fd, &msg, 0), -1);
  EXPECT_EQ(errno, ENOTSUP);
  EXPECT_EQ(rsendmsg(fd, &msg, 0), -1);
  EXPECT_EQ(errno, ENOTSUP);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

// rpoll and rselect over ordinary descriptors, as poll(2) sees them (and as Debian's answers).
TEST_F(RdmacmExtras, PollAndSelectOnOrdinaryDescriptors) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  const int closed_fd = dup(p[0]);
  ASSERT_EQ(close(closed_fd), 0);

  for (int with_data : {0, 1}) {
    if (with_data) {
      ASSERT_EQ(write(p[1], "x", 1), 1);
    }
    pollfd fds[3] = {{p[0], POLLIN, 0}, {p[1], POLLOUT, 0}, {closed_fd, POLLIN, 0}};
    ASSERT_EQ(rpoll(fds, 3, 0), 2 + with_data);
    EXPECT_EQ(fds[0].revents, with_data ? POLLIN : 0);
    EXPECT_EQ(fds[1].revents, POLLOUT);
    EXPECT_EQ(fds[2].revents, POLLNVAL);
    if (real() != nullptr) {
      pollfd theirs[3] = {{p[0], POLLIN, 0}, {p[1], POLLOUT, 0}, {closed_fd, POLLIN, 0}};
      ASSERT_EQ(real()->poll(theirs, 3, 0), 2 + with_data);
      for (int i = 0; i < 3; ++i) EXPECT_EQ(theirs[i].revents, fds[i].revents) << i;
    }

    for (auto select_fn : {&rselect, real() != nullptr ? real()->select : nullptr}) {
      if (select_fn == nullptr) continue;
      fd_set r, w, e;
      FD_ZERO(&r);
      FD_ZERO(&w);
      FD_ZERO(&e);
      FD_SET(p[0], &r);
      FD_SET(p[1], &w);
      FD_SET(p[0], &e);
      timeval tv{0, 20000};
      const int nfds = std::max(p[0], p[1]) + 1;
      EXPECT_EQ(select_fn(nfds, &r, &w, &e, &tv), 1 + with_data);
      EXPECT_EQ(FD_ISSET(p[0], &r) != 0, with_data == 1);
      EXPECT_TRUE(FD_ISSET(p[1], &w));
      EXPECT_FALSE(FD_ISSET(p[0], &e));
      EXPECT_FALSE(FD_ISSET(p[1], &r));
    }
    if (with_data) {
      ASSERT_EQ(read(p[0], fds, 1), 1);
    }
  }
  // A timeout with nothing ready.
  pollfd one = {p[0], POLLIN, 0};
  EXPECT_EQ(rpoll(&one, 1, 30), 0);
  fd_set r;
  FD_ZERO(&r);
  FD_SET(p[0], &r);
  timeval tv{0, 30000};
  EXPECT_EQ(rselect(p[0] + 1, &r, nullptr, nullptr, &tv), 0);
  EXPECT_FALSE(FD_ISSET(p[0], &r));
  close(p[0]);
  close(p[1]);
}

}  // namespace
