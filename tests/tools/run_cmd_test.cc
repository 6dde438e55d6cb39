// `uroce run`'s pieces (src/tools/run_cmd.h): the options, the ELF reading (real and forged
// files, every truncation: bad input gives an answer, never a crash), PATH search, and the
// setuid/setgid refusal. tests/tools/run_test.sh runs the command itself.
#include "tools/run_cmd.h"

#include <elf.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace uroce::tools {
namespace {

std::optional<std::string> parse(std::vector<std::string> words, RunOptions& o) {
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  return parse_run_args(argv, o);
}

TEST(RunArgs, OptionsThenTheProgramWithItsOwnOptions) {
  RunOptions o;
  ASSERT_EQ(parse({"-d", "rxe9", "--faults=loss=1%", "--", "ib_write_bw", "-d", "x"}, o),
            std::nullopt);
  EXPECT_EQ(o.device, "rxe9");
  EXPECT_EQ(o.faults, "loss=1%");
  EXPECT_EQ(o.program, (std::vector<std::string>{"ib_write_bw", "-d", "x"}));
  RunOptions p;
  ASSERT_EQ(parse({"--ip=10.0.0.1", "--force", "prog", "--force"}, p), std::nullopt);
  EXPECT_EQ(p.ip, "10.0.0.1");
  EXPECT_TRUE(p.force);
  EXPECT_EQ(p.program, (std::vector<std::string>{"prog", "--force"}));
  RunOptions h;
  ASSERT_EQ(parse({"--help"}, h), std::nullopt);
  EXPECT_TRUE(h.help);
}

TEST(RunArgs, UsageErrorsAreNamed) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "no PROGRAM"},
      {{"--"}, "no PROGRAM"},
      {{"-d"}, "-d needs a value"},
      {{"--ip"}, "--ip needs a value"},
      {{"--bogus", "prog"}, "unknown option '--bogus'"},
      {{"-dx", "prog"}, "unknown option '-dx'"},
      {{"-d", "a", "--ip", "1.2.3.4", "prog"}, "exclude each other"},
  };
  for (const auto& [words, message] : cases) {
    RunOptions o;
    const auto error = parse(words, o);
    ASSERT_TRUE(error.has_value()) << message;
    EXPECT_NE(error->find(message), std::string::npos) << *error;
  }
}

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(InspectElf, ThisTestIsADynamic64BitProgramThatNeedsLibc) {
  const auto self = read_file("/proc/self/exe");
  const ElfFacts f = inspect_elf(self);
  EXPECT_EQ(f.kind, ElfKind::kDynamic);
  EXPECT_TRUE(f.is_64);
  EXPECT_NE(std::find(f.needed.begin(), f.needed.end(), "libc.so.6"), f.needed.end());
}

// A forged ELF header with the given program headers' types.
template <class Ehdr, class Phdr>
std::vector<std::uint8_t> forge(unsigned char elf_class, std::vector<std::uint32_t> types) {
  Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = elf_class;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_phoff = sizeof(Ehdr);
  eh.e_phentsize = sizeof(Phdr);
  eh.e_phnum = static_cast<std::uint16_t>(types.size());
  std::vector<std::uint8_t> out(sizeof(Ehdr) + types.size() * sizeof(Phdr));
  std::memcpy(out.data(), &eh, sizeof eh);
  for (std::size_t i = 0; i < types.size(); ++i) {
    Phdr ph{};
    ph.p_type = types[i];
    std::memcpy(out.data() + sizeof(Ehdr) + i * sizeof(Phdr), &ph, sizeof ph);
  }
  return out;
}

TEST(InspectElf, NoProgramInterpreterIsStaticAndThirtyTwoBitsIsSaid) {
  EXPECT_EQ(inspect_elf(forge<Elf64_Ehdr, Elf64_Phdr>(ELFCLASS64, {PT_LOAD, PT_DYNAMIC})).kind,
            ElfKind::kStatic);  // a static-pie too has PT_DYNAMIC but no PT_INTERP
  const ElfFacts f32 = inspect_elf(forge<Elf32_Ehdr, Elf32_Phdr>(ELFCLASS32, {PT_INTERP}));
  EXPECT_EQ(f32.kind, ElfKind::kDynamic);
  EXPECT_FALSE(f32.is_64);
}

TEST(InspectElf, BadInputGivesAnAnswerNeverACrash) {
  EXPECT_EQ(inspect_elf({}).kind, ElfKind::kNotElf);
  const std::string script = "#!/bin/sh\necho hi\n";
  EXPECT_EQ(inspect_elf({reinterpret_cast<const std::uint8_t*>(script.data()), script.size()}).kind,
            ElfKind::kNotElf);
  auto huge = forge<Elf64_Ehdr, Elf64_Phdr>(ELFCLASS64, {PT_INTERP});
  reinterpret_cast<Elf64_Ehdr*>(huge.data())->e_phnum = 0xffff;  // beyond the file
  EXPECT_EQ(inspect_elf(huge).kind, ElfKind::kBadElf);
  auto far = forge<Elf64_Ehdr, Elf64_Phdr>(ELFCLASS64, {PT_INTERP});
  reinterpret_cast<Elf64_Ehdr*>(far.data())->e_phoff = ~0ULL;  // overflows
  EXPECT_EQ(inspect_elf(far).kind, ElfKind::kBadElf);
  // Every prefix of a real program, and the program with each of its first bytes flipped.
  const auto self = read_file("/proc/self/exe");
  for (std::size_t n = 0; n < std::min<std::size_t>(self.size(), 4096); ++n) {
    (void)inspect_elf(std::span(self).first(n));
  }
  std::vector<std::uint8_t> flipped = self;
  for (std::size_t i = 0; i < std::min<std::size_t>(flipped.size(), 2048); ++i) {
    flipped[i] ^= 0xff;
    (void)inspect_elf(flipped);
    flipped[i] ^= 0xff;
  }
}

TEST(ResolveProgram, AsExecvpSearchesPath) {
  EXPECT_EQ(resolve_program("sh", "/nonexistent:/bin"), std::optional<std::string>("/bin/sh"));
  EXPECT_EQ(resolve_program("./x/y", "/bin"), std::optional<std::string>("./x/y"));
  EXPECT_EQ(resolve_program("no-such-program-here", "/bin:/usr/bin"), std::nullopt);
  EXPECT_EQ(resolve_program("", "/bin"), std::nullopt);
}

TEST(DropinObstacle, SetuidAndSetgidAreRefusedWithTheReason) {
  char dir[] = "/tmp/run_cmd_test.XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/prog";
  { std::ofstream(path, std::ios::binary) << "#!/bin/sh\n"; }
  EXPECT_EQ(dropin_obstacle(path), std::nullopt);  // a script: its interpreter is dynamic
  ASSERT_EQ(::chmod(path.c_str(), 04755), 0);
  auto why = dropin_obstacle(path);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("is setuid"), std::string::npos) << *why;
  ASSERT_EQ(::chmod(path.c_str(), 02755), 0);
  why = dropin_obstacle(path);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("is setgid"), std::string::npos) << *why;
  EXPECT_EQ(dropin_obstacle(std::string(dir) + "/missing"), std::nullopt);  // exec says why
  ::unlink(path.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace uroce::tools
