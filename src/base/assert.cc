#include "base/assert.h"

#include <cstdio>
#include <cstdlib>

namespace uroce::detail {

void assert_fail(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "uroce: assertion failed: %s (%s:%d)\n", expr, file, line);
  std::abort();
}

}  // namespace uroce::detail
