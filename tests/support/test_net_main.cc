// uroce_test_net: runs a command (a shell or Python test) on a block of test addresses of its
// own (support/test_net.h), which no other test process can claim while the command runs.
//
//   uroce_test_net COMMAND [ARG...]
//
// The command runs with UROCE_TEST_NET=127.B.C (its addresses are UROCE_TEST_NET.1 to .254)
// and UROCE_TEST_PORT=P (its ports, for ::1 and TCP listeners, are P to P+15). It replaces this
// program (exec) and inherits the claim's socket, as do the programs it starts: the block
// stays claimed until the last of them exits.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "support/test_net.h"

int main(int argc, char** argv) {
  using namespace uroce::test;
  if (argc < 2) {
    std::fprintf(stderr, "usage: uroce_test_net COMMAND [ARG...]\n");
    return 2;
  }
  auto block = NetBlock::claim(NetBlock::first_for_pid(static_cast<int>(::getpid())));
  if (!block) {
    std::fprintf(stderr, "uroce_test_net: no free block of test addresses\n");
    return 1;
  }
  const int fd = block->release_fd();
  if (::fcntl(fd, F_SETFD, 0) != 0) {  // kept across exec: the command holds the claim
    std::fprintf(stderr, "uroce_test_net: fcntl: %s\n", std::strerror(errno));
    return 1;
  }
  const std::string port = std::to_string(block->port(0));
  if (::setenv("UROCE_TEST_NET", block->prefix().c_str(), 1) != 0 ||
      ::setenv("UROCE_TEST_PORT", port.c_str(), 1) != 0) {
    std::fprintf(stderr, "uroce_test_net: setenv: %s\n", std::strerror(errno));
    return 1;
  }
  ::execvp(argv[1], argv + 1);
  std::fprintf(stderr, "uroce_test_net: cannot run %s: %s\n", argv[1], std::strerror(errno));
  return 127;
}
