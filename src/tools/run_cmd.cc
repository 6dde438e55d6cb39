#include "tools/run_cmd.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "device/device_config.h"
#include "edge/environment.h"
#include "fault/fault.h"

namespace uroce::tools {

const char* const kRunUsage =
    "usage: uroce run [-d DEV | --ip ADDR] [--faults SPEC] [--force] [--] PROGRAM [ARGS...]\n"
    "Runs PROGRAM over uroce's drop-in libibverbs.so.1 and librdmacm.so.1.\n"
    "  -d, --dev DEV    only the configured device DEV (UROCE_DEVICES=DEV=its address)\n"
    "  --ip ADDR        only a device on ADDR (UROCE_DEVICES)\n"
    "  --faults SPEC    inject faults on every device (UROCE_FAULTS; docs/FAULTS.md)\n"
    "  --force          run a static, setuid or 32-bit program anyway\n";

namespace {

// The value of option `name` at args[i] ("--ip ADDR" or "--ip=ADDR"); advances i.
std::optional<std::string> option_value(std::span<char* const> args, std::size_t& i,
                                        std::string_view arg, std::string_view name,
                                        std::string& error) {
  if (arg.size() > name.size() && arg.substr(0, name.size()) == name && arg[name.size()] == '=') {
    return std::string(arg.substr(name.size() + 1));
  }
  if (i + 1 >= args.size()) {
    error = std::string(name) + " needs a value";
    return std::nullopt;
  }
  return std::string(args[++i]);
}

bool is_option(std::string_view arg, std::string_view name) {
  return arg == name || (arg.size() > name.size() && arg.substr(0, name.size()) == name &&
                         arg[name.size()] == '=' && name.substr(0, 2) == "--");
}

}  // namespace

std::optional<std::string> parse_run_args(std::span<char* const> args, RunOptions& out) {
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string_view a = args[i];
    std::string error;
    std::optional<std::string> v;
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      out.help = true;
      return std::nullopt;
    } else if (a == "--force") {
      out.force = true;
      continue;
    } else if (is_option(a, "-d") || is_option(a, "--dev")) {
      v = option_value(args, i, a, a[1] == 'd' ? "-d" : "--dev", error);
      if (v) out.device = *v;
    } else if (is_option(a, "--ip")) {
      v = option_value(args, i, a, "--ip", error);
      if (v) out.ip = *v;
    } else if (is_option(a, "--faults")) {
      v = option_value(args, i, a, "--faults", error);
      if (v) out.faults = *v;
    } else if (!a.empty() && a[0] == '-') {
      return "unknown option '" + std::string(a) + "'";
    } else {
      break;  // PROGRAM
    }
    if (!v) return error;
  }
  if (!out.device.empty() && !out.ip.empty()) return "-d and --ip exclude each other";
  if (i >= args.size()) return "no PROGRAM to run";
  out.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return std::nullopt;
}

namespace {

template <class T>
bool read_at(std::span<const std::uint8_t> file, std::uint64_t offset, T& out) {
  if (offset > file.size() || file.size() - offset < sizeof(T)) return false;
  std::memcpy(&out, file.data() + offset, sizeof(T));
  return true;
}

// The file offset of virtual address `vaddr`, from the PT_LOAD segments.
template <class Phdr>
std::optional<std::uint64_t> file_offset(const std::vector<Phdr>& phdrs, std::uint64_t vaddr) {
  for (const Phdr& p : phdrs) {
    if (p.p_type == PT_LOAD && vaddr >= p.p_vaddr && vaddr - p.p_vaddr < p.p_filesz) {
      return vaddr - p.p_vaddr + p.p_offset;
    }
  }
  return std::nullopt;
}

template <class Ehdr, class Phdr, class Dyn>
ElfFacts inspect(std::span<const std::uint8_t> file) {
  ElfFacts f;
  f.kind = ElfKind::kBadElf;
  f.is_64 = sizeof(Ehdr) == sizeof(Elf64_Ehdr);
  Ehdr eh;
  if (!read_at(file, 0, eh) || eh.e_phentsize != sizeof(Phdr)) return f;
  std::vector<Phdr> phdrs;
  for (std::uint64_t k = 0; k < eh.e_phnum; ++k) {
    Phdr ph;
    if (!read_at(file, eh.e_phoff + k * sizeof(Phdr), ph)) return f;
    phdrs.push_back(ph);
  }
  bool interp = false;
  const Phdr* dynamic = nullptr;
  for (const Phdr& p : phdrs) {
    if (p.p_type == PT_INTERP) interp = true;
    if (p.p_type == PT_DYNAMIC) dynamic = &p;
  }
  f.kind = interp ? ElfKind::kDynamic : ElfKind::kStatic;
  if (!interp || dynamic == nullptr) return f;
  std::vector<std::uint64_t> needed;
  std::optional<std::uint64_t> strtab;
  for (std::uint64_t off = dynamic->p_offset;
       off - dynamic->p_offset + sizeof(Dyn) <= dynamic->p_filesz; off += sizeof(Dyn)) {
    Dyn d;
    if (!read_at(file, off, d) || d.d_tag == DT_NULL) break;
    if (d.d_tag == DT_NEEDED) needed.push_back(d.d_un.d_val);
    if (d.d_tag == DT_STRTAB) strtab = file_offset(phdrs, d.d_un.d_ptr);
  }
  if (!strtab) return f;
  for (std::uint64_t n : needed) {
    if (*strtab > file.size() || n >= file.size() - *strtab) continue;
    const auto* s = reinterpret_cast<const char*>(file.data() + *strtab + n);
    f.needed.emplace_back(s, ::strnlen(s, file.size() - *strtab - n));
  }
  return f;
}

}  // namespace

ElfFacts inspect_elf(std::span<const std::uint8_t> file) {
  if (file.size() < EI_NIDENT || std::memcmp(file.data(), ELFMAG, SELFMAG) != 0) return {};
  // The drop-ins are this host's: a little-endian ELF of another byte order is not one the
  // loader would run.
  if (file[EI_DATA] != ELFDATA2LSB) return ElfFacts{ElfKind::kBadElf, false, {}};
  if (file[EI_CLASS] == ELFCLASS64) return inspect<Elf64_Ehdr, Elf64_Phdr, Elf64_Dyn>(file);
  if (file[EI_CLASS] == ELFCLASS32) return inspect<Elf32_Ehdr, Elf32_Phdr, Elf32_Dyn>(file);
  return ElfFacts{ElfKind::kBadElf, false, {}};
}

std::optional<std::string> dropin_obstacle(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;  // exec will say why
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
    ::close(fd);
    return std::nullopt;
  }
  if ((st.st_mode & (S_ISUID | S_ISGID)) != 0) {
    ::close(fd);
    return path + " is " + ((st.st_mode & S_ISUID) != 0 ? "setuid" : "setgid") +
           ": the loader ignores LD_LIBRARY_PATH in such programs, so it would run on the "
           "distribution's libibverbs, not on uroce's drop-in";
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) return std::nullopt;
  const ElfFacts f = inspect_elf({static_cast<const std::uint8_t*>(m), size});
  ::munmap(m, size);
  if (f.kind == ElfKind::kStatic) {
    return path +
           " is statically linked (no program interpreter): it loads no shared libibverbs, so "
           "uroce's drop-in cannot take effect";
  }
  if (f.kind == ElfKind::kDynamic && !f.is_64) {
    return path + " is a 32-bit program: uroce's drop-ins are 64-bit, the loader would skip them";
  }
  return std::nullopt;
}

std::optional<std::string> dropin_dir(const std::string& exe_dir) {
  for (const char* rel : {UROCE_DROPIN_FROM_BINDIR, UROCE_DROPIN_FROM_BUILD_BIN}) {
    const std::string dir = exe_dir + "/" + rel;
    if (::access((dir + "/libibverbs.so.1").c_str(), R_OK) == 0) return dir;
  }
  return std::nullopt;
}

std::optional<std::string> resolve_program(const std::string& program, const char* path_env) {
  if (program.empty()) return std::nullopt;
  if (program.find('/') != std::string::npos) return program;
  const std::string path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end > start ? path.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + program;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = end + 1;
  }
  return std::nullopt;
}

namespace {

// UROCE_DEVICES for -d or --ip (nullopt: leave it), or an error message.
std::optional<std::string> device_variable(const RunOptions& o, std::string& value) {
  if (o.device.empty() && o.ip.empty()) return std::nullopt;
  if (!o.ip.empty()) {
    if (auto ip = engine::parse_ip(o.ip); !ip.ok()) return "--ip: " + ip.error();
  }
  engine::DeviceSelection sel;
  sel.name = o.device;
  sel.ip = o.ip;
  auto spec = engine::resolve_device(sel, edge::device_source());
  if (!spec.ok()) return (o.device.empty() ? "--ip: " : "-d: ") + spec.error();
  value = spec.value().name + "=" + engine::ip_to_string(spec.value().ip);
  return std::nullopt;
}

}  // namespace

int run_run(const RunOptions& o, std::FILE* err) {
  if (o.help) {
    std::fputs(kRunUsage, stdout);
    return 0;
  }
  if (!o.faults.empty()) {
    if (auto spec = fault::FaultSpec::parse(o.faults); !spec.ok()) {
      std::fprintf(err, "uroce run: --faults: %s\n", spec.error().c_str());
      return 2;
    }
  }
  std::string devices;
  if (auto why = device_variable(o, devices)) {
    std::fprintf(err, "uroce run: %s\n", why->c_str());
    return 2;
  }
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string exe_dir(exe, n > 0 ? static_cast<std::size_t>(n) : 0);
  exe_dir = exe_dir.substr(0, exe_dir.rfind('/') == std::string::npos ? 0 : exe_dir.rfind('/'));
  const auto dir = dropin_dir(exe_dir);
  if (!dir) {
    std::fprintf(err,
                 "uroce run: the drop-in libibverbs.so.1 is neither in %s/%s (installed) nor in "
                 "%s/%s (build tree)\n",
                 exe_dir.c_str(), UROCE_DROPIN_FROM_BINDIR, exe_dir.c_str(),
                 UROCE_DROPIN_FROM_BUILD_BIN);
    return 1;
  }
  const std::string& program = o.program.front();
  const auto path = resolve_program(program, std::getenv("PATH"));
  if (!path) {
    std::fprintf(err, "uroce run: %s: command not found\n", program.c_str());
    return 127;
  }
  if (auto why = dropin_obstacle(*path)) {
    if (!o.force) {
      std::fprintf(err, "uroce run: %s (--force runs it anyway)\n", why->c_str());
      return 1;
    }
    std::fprintf(err, "uroce run: warning: %s\n", why->c_str());
  }
  const char* old = std::getenv("LD_LIBRARY_PATH");
  std::string lib = *dir;
  if (old != nullptr && *old != '\0') lib.append(":").append(old);
  ::setenv("LD_LIBRARY_PATH", lib.c_str(), 1);
  if (!devices.empty()) ::setenv("UROCE_DEVICES", devices.c_str(), 1);
  if (!o.faults.empty()) ::setenv("UROCE_FAULTS", o.faults.c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& a : o.program) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(path->c_str(), argv.data());
  const int e = errno;
  std::fprintf(err, "uroce run: cannot run %s: %s\n", path->c_str(), std::strerror(e));
  return e == ENOENT ? 127 : 126;
}

}  // namespace uroce::tools
