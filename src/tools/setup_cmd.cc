#include "tools/setup_cmd.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "device/device_config.h"
#include "edge/environment.h"

namespace uroce::tools {

namespace {

constexpr std::string_view kTarget = "/dev/null";
constexpr std::string_view kPrefix = "uverbs";
constexpr std::string_view kDefaultDir = "/dev/infiniband";

// Whether `path` is a symbolic link to /dev/null: one of uroce's.
bool is_ours(const std::string& path) {
  std::vector<char> buf(kTarget.size() + 2);
  const ssize_t n = ::readlink(path.c_str(), buf.data(), buf.size());
  return n == static_cast<ssize_t>(kTarget.size()) &&
         std::string_view(buf.data(), static_cast<std::size_t>(n)) == kTarget;
}

// uverbs followed by digits only.
bool is_uverbs_name(std::string_view name) {
  if (name.size() <= kPrefix.size() || name.substr(0, kPrefix.size()) != kPrefix) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(kPrefix.size()), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

int fail(std::FILE* err, const std::string& what, int e) {
  std::fprintf(err, "uroce setup: %s: %s\n", what.c_str(), std::strerror(e));
  return 1;
}

int create_links(const SetupOptions& opt, int count, std::FILE* out, std::FILE* err) {
  if (::mkdir(opt.dir.c_str(), 0755) != 0 && errno != EEXIST) return fail(err, opt.dir, errno);
  struct stat st {};
  if (::stat(opt.dir.c_str(), &st) != 0) return fail(err, opt.dir, errno);
  if (!S_ISDIR(st.st_mode)) return fail(err, opt.dir, ENOTDIR);
  for (int i = 0; i < count; ++i) {
    const std::string path = opt.dir + "/" + std::string(kPrefix) + std::to_string(i);
    if (::symlink(std::string(kTarget).c_str(), path.c_str()) == 0) {
      std::fprintf(out, "%s -> %s\n", path.c_str(), std::string(kTarget).c_str());
      continue;
    }
    if (errno != EEXIST) return fail(err, path, errno);
    if (!is_ours(path)) {
      std::fprintf(err,
                   "uroce setup: %s exists and is not uroce's (a link to /dev/null): a kernel "
                   "RDMA device? Left alone\n",
                   path.c_str());
      return 1;
    }
    std::fprintf(out, "%s -> %s (already there)\n", path.c_str(), std::string(kTarget).c_str());
  }
  return 0;
}

int remove_links(const SetupOptions& opt, std::FILE* out, std::FILE* err) {
  DIR* d = ::opendir(opt.dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return 0;  // nothing to undo
    return fail(err, opt.dir, errno);
  }
  std::vector<std::string> ours;
  while (const dirent* e = ::readdir(d)) {
    const std::string path = opt.dir + "/" + e->d_name;
    if (is_uverbs_name(e->d_name) && is_ours(path)) ours.push_back(path);
  }
  ::closedir(d);
  std::sort(ours.begin(), ours.end());
  for (const std::string& path : ours) {
    if (::unlink(path.c_str()) != 0) return fail(err, path, errno);
    std::fprintf(out, "removed %s\n", path.c_str());
  }
  // The directory goes only when empty: a kernel driver's files, or anyone else's, keep it.
  if (::rmdir(opt.dir.c_str()) == 0) {
    std::fprintf(out, "removed %s\n", opt.dir.c_str());
  } else if (errno != ENOTEMPTY && errno != EEXIST && errno != EBUSY) {
    return fail(err, opt.dir, errno);
  }
  return 0;
}

}  // namespace

int setup_run(const SetupOptions& opt, std::FILE* out, std::FILE* err) {
  if (opt.dir == kDefaultDir && ::geteuid() != 0) {
    std::fprintf(err,
                 "uroce setup: needs root, once per machine (it %s %s/uverbsN, which UCX checks "
                 "for); everything else in uroce runs unprivileged\n",
                 opt.undo ? "removes" : "creates", opt.dir.c_str());
    return 1;
  }
  if (opt.undo) return remove_links(opt, out, err);
  int count = opt.count;
  if (count == 0) {
    // The drop-in names the configured devices uverbs0, uverbs1, ... in order.
    auto list = engine::configured_devices(edge::device_source());
    if (!list.ok()) {
      std::fprintf(err, "uroce setup: %s\n", list.error().c_str());
      return 1;
    }
    count = std::max<int>(1, static_cast<int>(list.value().size()));
  }
  return create_links(opt, count, out, err);
}

}  // namespace uroce::tools
