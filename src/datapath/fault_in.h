// Page faults for on-demand (ODP) memory regions, as the kernel serves a NIC's: the system call
// behind verbs' DeviceConfig::fault_in (uroce/verbs.h, kAccessOnDemand), made on the packet path
// for ODP regions only.
#pragma once

#include <cstddef>

namespace uroce::datapath {

// Makes [addr, addr + length) present for a read, or for a write when `write` (madvise
// MADV_POPULATE_READ / MADV_POPULATE_WRITE, Linux 5.14: they fault the pages in as an access
// would, without touching a byte). False when a page of it is not mapped, or not mapped with
// that access (where the access would raise SIGSEGV or SIGBUS). On a kernel without them, only
// whether the range is mapped is checked (mincore(2)): a read-only page passes for a write there.
bool fault_in(std::byte* addr, std::size_t length, bool write);

}  // namespace uroce::datapath
