#include "support/golden.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "base/assert.h"
#include "capture/pcap_file.h"

namespace uroce::test {

std::string data_dir() { return UROCE_TEST_DATA_DIR; }

std::vector<std::string> golden_files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(data_dir() + "/golden")) {
    if (e.path().extension() == ".pcap") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  UROCE_CHECK(!files.empty());
  return files;
}

std::vector<CapturedFrame> load_frames(const std::string& path) {
  std::vector<CapturedFrame> frames;
  auto scan = capture::for_each_record(path, [&](const capture::PcapRecord& rec) {
    CapturedFrame f;
    f.file = std::filesystem::path(path).filename().string();
    f.index = rec.index;
    f.bytes.assign(rec.data.begin(), rec.data.end());
    frames.push_back(std::move(f));
  });
  UROCE_CHECK(scan.ok());
  return frames;
}

std::vector<CapturedFrame> load_all_golden() {
  std::vector<CapturedFrame> all;
  for (const auto& file : golden_files()) {
    auto frames = load_frames(file);
    all.insert(all.end(), frames.begin(), frames.end());
  }
  return all;
}

std::vector<std::byte> from_hex(const std::string& hex) {
  std::vector<std::byte> out;
  int hi = -1;
  for (char c : hex) {
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    UROCE_CHECK(std::isxdigit(static_cast<unsigned char>(c)));
    const int v = std::isdigit(static_cast<unsigned char>(c))
                      ? c - '0'
                      : std::tolower(static_cast<unsigned char>(c)) - 'a' + 10;
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<std::byte>(hi * 16 + v));
      hi = -1;
    }
  }
  UROCE_CHECK(hi < 0);
  return out;
}

}  // namespace uroce::test
