// `uroce setup` and `uroce setup --undo`: the one step of using uroce that needs root, for
// programs that check for a kernel device file before they use a verbs device.
//
// UCX (uct_ib_device_is_accessible) uses a device only if /dev/infiniband/<dev_name> (the
// ibv_device's dev_name; the drop-in names its devices uverbs0, uverbs1, ... in configuration
// order) is a character device that it may read and write. The drop-in never opens that file,
// so setup makes each one a symbolic link to /dev/null: stat() follows it to a character
// device, access() grants read and write to everyone, and `ls -l` shows what it is. A link is
// chosen over a second node with /dev/null's numbers (mknod 1:3) so that --undo, and a reader,
// can tell uroce's files from a kernel driver's by looking: setup never replaces, and --undo
// never removes, anything else.
//
// Idempotent: links that are already there are kept. A kernel RDMA driver loaded later wants
// the same names: run --undo first.
#pragma once

#include <cstdio>
#include <string>

namespace uroce::tools {

struct SetupOptions {
  bool undo = false;  // remove the links (and the directory, when that leaves it empty)
  int count = 0;      // links uverbs0..count-1 (0: one per configured device, at least one)
  std::string dir = "/dev/infiniband";  // tests use another directory
};

// Returns 0, or 1 with a message on `err` (not root for /dev/infiniband, a name taken by
// something that is not uroce's link, a failed system call).
int setup_run(const SetupOptions& opt, std::FILE* out, std::FILE* err);

}  // namespace uroce::tools
