#include "base/entropy.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "base/assert.h"

namespace uroce {

void kernel_random_bytes(std::span<std::byte> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::getrandom(out.data() + done, out.size() - done, 0);
    if (n < 0 && errno == EINTR) continue;
    UROCE_CHECK(n > 0);
    done += static_cast<std::size_t>(n);
  }
}

std::uint64_t kernel_random_u64() {
  std::byte b[8];
  kernel_random_bytes(b);
  std::uint64_t v;
  std::memcpy(&v, b, sizeof v);
  return v;
}

}  // namespace uroce
