#include "datapath/fault_in.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace uroce::datapath {

namespace {

std::uintptr_t page_size() {
  static const auto size = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

// mincore(2) fails with ENOMEM when a page of the range is not mapped: the check left on a
// kernel older than 5.14 (it cannot tell a read-only page from a writable one).
bool mapped(std::uintptr_t start, std::size_t bytes) {
  constexpr std::size_t kPages = 64;  // a chunk at a time: the range may be large
  unsigned char v[kPages];
  while (bytes != 0) {
    const std::size_t n = std::min(bytes, kPages * page_size());
    while (::mincore(reinterpret_cast<void*>(start), n, v) != 0) {
      if (errno != EAGAIN) return false;
    }
    start += n;
    bytes -= n;
  }
  return true;
}

// Whether this kernel has MADV_POPULATE_READ/WRITE (5.14): asked once, of a page that is surely
// mapped. Where it has them, EINVAL from them means the range cannot be populated for that
// access (a write into a read-only mapping, VM_IO or VM_PFNMAP memory): a failure.
bool populate_supported() {
  static const bool supported = [] {
    alignas(4096) static unsigned char probe[4096];
    const auto start = reinterpret_cast<std::uintptr_t>(probe) & ~(page_size() - 1);
    return ::madvise(reinterpret_cast<void*>(start), page_size(), MADV_POPULATE_READ) == 0 ||
           errno != EINVAL;
  }();
  return supported;
}

}  // namespace

bool fault_in(std::byte* addr, std::size_t length, bool write) {
  if (length == 0) return true;
  const auto first = reinterpret_cast<std::uintptr_t>(addr);
  if (first + (length - 1) < first) return false;  // wraps around the address space
  const std::uintptr_t mask = page_size() - 1;
  const std::uintptr_t start = first & ~mask;
  const std::uintptr_t last = (first + (length - 1)) | mask;
  const std::size_t bytes = last - start + 1;
  void* p = reinterpret_cast<void*>(start);
  if (!populate_supported()) return mapped(start, bytes);
  for (;;) {
    if (::madvise(p, bytes, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0) return true;
    switch (errno) {
      case EINTR:
      case EAGAIN:
        continue;
      default:  // ENOMEM: not mapped; EINVAL: not for this access (a write into a read-only
                // mapping); EFAULT: the access would fault (PROT_NONE); EHWPOISON
        return false;
    }
  }
}

}  // namespace uroce::datapath
