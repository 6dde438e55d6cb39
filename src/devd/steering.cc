#include "devd/steering.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "proto/devd_protocol.h"

namespace uroce::engine {

namespace {

// A conditional jump's offsets are 8 bits: a socket's blocks go in runs of at most this many
// comparisons, each run followed by its own "return index".
constexpr std::size_t kRun = 200;

sock_filter stmt(std::uint16_t code, std::uint32_t k) { return sock_filter{code, 0, 0, k}; }
sock_filter jump(std::uint16_t code, std::uint32_t k, std::uint8_t jt, std::uint8_t jf) {
  return sock_filter{code, jt, jf, k};
}

}  // namespace

std::vector<sock_filter> steering_program(std::span<const SteeringEntry> entries,
                                          std::uint32_t qp1_index) {
  std::vector<sock_filter> p;
  // A = the BTH's bytes 4..7 (reserved byte, DestQP); a datagram shorter than 8 bytes makes
  // the load fail, which ends the program with 0: the coordinator's socket.
  p.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, 4));
  p.push_back(stmt(BPF_ALU | BPF_AND | BPF_K, 0xffffff));
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, 1));
  p.push_back(stmt(BPF_RET | BPF_K, qp1_index));
  p.push_back(stmt(BPF_ALU | BPF_RSH | BPF_K, devd::kBlockBits));
  for (const SteeringEntry& e : entries) {
    for (std::size_t first = 0; first < e.blocks.size(); first += kRun) {
      const std::size_t len = std::min(kRun, e.blocks.size() - first);
      for (std::size_t j = 0; j < len; ++j) {
        // Taken: over the rest of the run and its "skip" to this run's return.
        p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, e.blocks[first + j],
                         static_cast<std::uint8_t>(len - j), 0));
      }
      p.push_back(stmt(BPF_JMP | BPF_JA, 1));
      p.push_back(stmt(BPF_RET | BPF_K, e.index));
    }
  }
  p.push_back(stmt(BPF_RET | BPF_K, 0));
  return p;
}

int attach_steering_program(int fd, const std::vector<sock_filter>& program) {
  if (program.size() > BPF_MAXINSNS) return E2BIG;
  sock_fprog prog{};
  prog.len = static_cast<unsigned short>(program.size());
  prog.filter = const_cast<sock_filter*>(program.data());
  if (::setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog) != 0) {
    return errno;
  }
  return 0;
}

}  // namespace uroce::engine
