// `uroce run [-d DEV|--ip ADDR] [--faults SPEC] [--force] [--] PROGRAM ARGS...`: runs an
// unmodified program over uroce's drop-in libibverbs.so.1 and librdmacm.so.1. It puts the drop-ins'
// directory (found from the uroce program's own place: the installed layout or the build tree's)
// first on LD_LIBRARY_PATH, sets UROCE_DEVICES and UROCE_FAULTS from its options, and execs
// PROGRAM (searched on PATH as execvp does). It refuses, with the reason, a program the loader
// would not run over the drop-ins: a static one (no PT_INTERP), a setuid or setgid one (the
// loader ignores LD_LIBRARY_PATH) or a 32-bit one (the drop-ins are 64-bit); --force runs it
// anyway. Parsed by hand, not by CLI11: everything from PROGRAM on is the program's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace uroce::tools {

struct RunOptions {
  std::string device;  // -d DEV: a configured device, by name
  std::string ip;      // --ip ADDR
  std::string faults;  // --faults SPEC (UROCE_FAULTS' grammar)
  bool force = false;
  bool help = false;
  std::vector<std::string> program;  // PROGRAM ARGS...
};

// Parses `uroce run`'s arguments (after "run"); an error message for a usage error.
std::optional<std::string> parse_run_args(std::span<char* const> args, RunOptions& out);
extern const char* const kRunUsage;

// What the loader would do with an executable file, from its first bytes (the whole file for
// the dynamic section): bad input gives kNotElf or kBadElf, never a crash.
enum class ElfKind { kNotElf, kBadElf, kStatic, kDynamic };
struct ElfFacts {
  ElfKind kind = ElfKind::kNotElf;
  bool is_64 = false;
  std::vector<std::string> needed;  // DT_NEEDED, when dynamic
};
ElfFacts inspect_elf(std::span<const std::uint8_t> file);

// Why the drop-ins cannot take effect in the program at `path` (static, setuid/setgid,
// 32-bit), or nullopt when they can (a dynamic ELF program, or a script).
std::optional<std::string> dropin_obstacle(const std::string& path);

// The directory holding the drop-ins, from the directory of the running uroce program: the
// installed layout (bin/ -> lib/<triplet>/uroce/) first, then the build tree's (compat/);
// nullopt when neither holds libibverbs.so.1.
std::optional<std::string> dropin_dir(const std::string& exe_dir);

// PROGRAM resolved as execvp would (a name with a slash as it is, else the first executable on
// PATH); nullopt when not found.
std::optional<std::string> resolve_program(const std::string& program, const char* path_env);

// Runs the command: returns only on failure (its exit status; 0 for --help).
int run_run(const RunOptions& options, std::FILE* err);

}  // namespace uroce::tools
