// A program outside uroce's tree, built against an installed liburoce (tests/install): prints the
// library's version; given an address, opens a shared device on it (which starts its
// coordinator, uroce-devd) and prints the program file of every running coordinator.
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "device/udp_device.h"
#include "uroce/version.h"

int main(int argc, char** argv) {
  std::printf("liburoce %s\n", uroce::version());
  if (argc < 2) return 0;
  uroce::engine::DeviceSelection sel;
  sel.ip = argv[1];
  auto dev = uroce::engine::open_device(sel);
  if (!dev.ok()) {
    std::fprintf(stderr, "consumer: %s\n", dev.error().text.c_str());
    return 1;
  }
  std::printf("opened %s\n", argv[1]);
  DIR* proc = opendir("/proc");
  while (dirent* e = proc != nullptr ? readdir(proc) : nullptr) {
    char exe[4096];
    const std::string link = std::string("/proc/") + e->d_name + "/exe";
    const ssize_t n = readlink(link.c_str(), exe, sizeof exe - 1);
    if (n <= 0) continue;
    const std::string path(exe, static_cast<std::size_t>(n));
    if (path.size() >= 11 && path.compare(path.size() - 11, 11, "/uroce-devd") == 0) {
      std::printf("coordinator %s\n", path.c_str());
    }
  }
  if (proc != nullptr) closedir(proc);
  return 0;
}
