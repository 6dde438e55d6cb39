// A context's membership of a shared device (devd_protocol.h): its connection to the device's
// coordinator, its socket in the device's reuseport group, and the QP numbers it may use.
//
//   auto sp = SharedPort::join(ip, 4791, "uroce0");   // starts the coordinator if none runs
//   UdpOptions o{ip, 4791}; o.bound_fd = sp->take_socket();
//   device.set_qpn_source(sp.get());                  // QPNs unique across the device
//   ...
//   sp->forget_socket(); close the socket; sp->leave();
//
// QP numbers come in blocks of 256 from the coordinator: one block is current and hands out its
// numbers in a random order (proto/block_order.h), each once; a block goes back when its last QP
// is destroyed and it is no longer current. The coordinator hands out random blocks of the whole
// 24-bit space and keeps released ones in quarantine (devd/block_allocator.h), so that QPNs are
// hard to predict (issue 44) and a destroyed QP's number is not reused while a peer may still be
// sending to it (rxe delays reuse likewise).
//
// The coordinator is the program DevdOptions::path names (UROCE_DEVD at the edge), else the
// uroce-devd built with this library. It is started with its standard streams on /dev/null and
// no other file of the starting process, in a session of its own, with everything it is told on
// its command line (proto/devd_options.h), and exits a while (linger_ms: UROCE_DEVD_LINGER_MS,
// default 2000) after the last context left. any_user (UROCE_SHARE=all in the environment of the
// process that starts it) lets every user's processes join; by default only the starting user's
// may (others get an error that says so).
//
// fork: a child does not inherit any membership. The connections and group sockets of the
// parent's contexts are replaced in the child by inert placeholders (pthread_atfork), so that the
// child neither receives the parent's packets nor keeps the parent's contexts alive; the child
// may open devices itself.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "base/owner.h"
#include "base/result.h"
#include "proto/devd_options.h"
#include "proto/devd_protocol.h"
#include "uroce/verbs.h"
#include "wire/ip.h"

namespace uroce::engine {

// A connection to the coordinator listening on the abstract unix socket `name`
// (devd::socket_name), or -errno (ECONNREFUSED: none is listening).
int connect_coordinator(const std::string& name);

// What `uroce stats` shows of a shared device.
struct SharedMember {
  pid_t pid = 0;
  std::uint32_t uid = 0;
  std::string comm;
  std::string device;
  std::uint32_t index = 0;   // its socket's index in the group
  std::uint32_t blocks = 0;  // QPN blocks held
  bool qp1 = false;
  bool exiting = false;  // its process is exiting
};
struct SharedCmId {
  pid_t pid = 0;
  std::uint32_t port_space = 0;  // rdma_port_space
  std::uint16_t port = 0;
  std::string state;
};
struct SharedDeviceInfo {
  std::vector<SharedMember> members;
  std::vector<SharedCmId> cm_ids;
  std::string cm_counters;  // "name value" pairs
  // Datagrams the coordinator dropped: no context owns their QPN, or they are no RoCE packet
  // (malformed, a bad ICRC).
  std::uint64_t unsteered = 0;
  // QPN blocks handed out and not given back: the sum of the members' unless the coordinator
  // lost track of one (issue 43 checks that it returns to its value before a run).
  std::uint32_t blocks_used = 0;
  std::uint32_t closed_qps = 0;  // destroyed RC QPs whose duplicates it still acknowledges
};

class SharedPort final : public QpnSource {
 public:
  // A clear message on failure (address not local, port held by another program, another
  // user's device, coordinator not found).
  // `options`: what a coordinator this call starts is told (proto/devd_options.h).
  static Result<std::unique_ptr<SharedPort>, Error> join(
      const wire::IpAddress& ip, std::uint16_t port, const std::string& device,
      const devd::DevdOptions& options = devd::DevdOptions{});
  // A connection for an rdma_cm event channel (devd_cm_protocol.h), to the coordinator it
  // starts when none runs; the caller owns the fd (close-on-exec). A clear message on failure.
  static Result<int, Error> connect_cm(const wire::IpAddress& ip, std::uint16_t port,
                                       const std::string& device,
                                       const devd::DevdOptions& options = devd::DevdOptions{});
  // The coordinator's list of contexts, or an error message when the device has none running.
  static Result<SharedDeviceInfo, Error> query(const wire::IpAddress& ip, std::uint16_t port);

  ~SharedPort() override;
  SharedPort(const SharedPort&) = delete;
  SharedPort& operator=(const SharedPort&) = delete;

  // The group socket, once (-1 after): the caller owns it (UdpOptions::bound_fd).
  int take_socket();
  // Call right before closing the socket: a fork after it no longer touches that fd number.
  void forget_socket();
  // Says kBye and closes the connection (the socket must be closed already). Idempotent; the
  // destructor calls it. QPN calls after it allocate nothing.
  void leave();

  std::optional<std::uint32_t> allocate_qpn() override;
  void release_qpn(std::uint32_t qpn) override;
  // Tells the coordinator about a destroyed RC QP (devd kClosedQp, not answered: no round trip),
  // which it acknowledges duplicates for, for `life`, once this context has gone
  // (transport/closed_qps.h).
  void keep_closed_qp(const transport::ClosedQp& q, Duration life);
  // Delivers QP1's datagrams (CM MADs) to this context's socket (kBusy: another context has
  // them), or gives them back to the coordinator.
  Errc claim_qp1(bool on);

  std::uint32_t group_index() const { return index_; }

 private:
  SharedPort() = default;
  // One request, one answer, under mu_. false when the coordinator is gone.
  bool call(const devd::Msg& req, devd::Msg& answer);
  // A block whose numbers are all handed out and whose QPs are all gone, back to the coordinator
  // (under mu_).
  void give_back(std::uint32_t block);

  OwnedMutex mu_;
  int conn_ = -1;
  int udp_ = -1;         // until take_socket()
  int udp_number_ = -1;  // the socket's fd number while the fork guard knows it
  pid_t owner_ = 0;      // the process that joined (a forked child is not a member)
  std::uint32_t index_ = 0;
  std::optional<std::uint32_t> current_;                   // the block numbers come from
  std::uint32_t next_in_block_ = 0;                        // its next unused number
  std::array<std::uint8_t, devd::kBlockSize> order_{};     // ... in this order (block_order)
  std::unordered_map<std::uint32_t, std::uint32_t> live_;  // live QPs per block held
};

}  // namespace uroce::engine
