// Test helpers: the golden captures of the kernel's Soft-RoCE (tests/data/golden, copied from
// shared/golden/rxe) loaded as owned frames.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/bytes.h"

namespace uroce::test {

struct CapturedFrame {
  std::string file;       // base name
  std::size_t index = 0;  // 1-based frame number
  std::vector<std::byte> bytes;
  ConstBytes view() const { return bytes; }
};

std::string data_dir();                                           // tests/data
std::vector<std::string> golden_files();                          // full paths, sorted
std::vector<CapturedFrame> load_frames(const std::string& path);  // aborts on a read error
std::vector<CapturedFrame> load_all_golden();

std::vector<std::byte> from_hex(const std::string& hex);  // whitespace ignored

}  // namespace uroce::test
