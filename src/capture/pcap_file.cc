#include "capture/pcap_file.h"

#include <fcntl.h>
#include <pcap/pcap.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace uroce::capture {

namespace {

// libpcap's API speaks DLT_* values, files and uroce speak LINKTYPE_* values; they differ only
// for raw IP here (DLT_RAW is 12 or 14 depending on the platform, LINKTYPE_RAW is 101).
constexpr int kLinkTypeRaw = 101;
int to_linktype(int dlt) { return dlt == DLT_RAW ? kLinkTypeRaw : dlt; }
int to_dlt(int linktype) { return linktype == kLinkTypeRaw ? DLT_RAW : linktype; }

}  // namespace

PcapReader::PcapReader(pcap* p) : p_(p), link_type_(to_linktype(pcap_datalink(p))) {
  nanosecond_ = pcap_get_tstamp_precision(p) == PCAP_TSTAMP_PRECISION_NANO;
}

Result<PcapReader, std::string> PcapReader::open(const std::string& path) {
  char err[PCAP_ERRBUF_SIZE] = {};
  pcap* p = pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, err);
  if (p == nullptr) return Err{std::string(err)};
  return PcapReader(p);
}

PcapReader::PcapReader(PcapReader&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)),
      link_type_(o.link_type_),
      count_(o.count_),
      nanosecond_(o.nanosecond_) {}

PcapReader& PcapReader::operator=(PcapReader&& o) noexcept {
  if (this != &o) {
    if (p_ != nullptr) pcap_close(p_);
    p_ = std::exchange(o.p_, nullptr);
    link_type_ = o.link_type_;
    count_ = o.count_;
    nanosecond_ = o.nanosecond_;
  }
  return *this;
}

PcapReader::~PcapReader() {
  if (p_ != nullptr) pcap_close(p_);
}

Result<bool, std::string> PcapReader::next(PcapRecord& rec) {
  pcap_pkthdr* hdr = nullptr;
  const u_char* data = nullptr;
  const int rc = pcap_next_ex(p_, &hdr, &data);
  if (rc == PCAP_ERROR_BREAK) return false;
  if (rc != 1) return Err{std::string(pcap_geterr(p_))};
  rec.index = ++count_;
  const std::int64_t frac = hdr->ts.tv_usec;
  rec.ts_ns = std::int64_t{hdr->ts.tv_sec} * 1'000'000'000 + (nanosecond_ ? frac : frac * 1000);
  rec.data = as_bytes(data, hdr->caplen);
  rec.orig_len = hdr->len;
  return true;
}

Result<PcapScan, std::string> for_each_record(const std::string& path,
                                              const std::function<void(const PcapRecord&)>& fn) {
  auto reader = PcapReader::open(path);
  if (!reader.ok()) return Err{reader.error()};
  PcapScan scan{.link_type = reader->link_type()};
  PcapRecord rec;
  for (;;) {
    auto more = reader->next(rec);
    if (!more.ok()) return Err{more.error()};
    if (!more.value()) return scan;
    ++scan.records;
    fn(rec);
  }
}

Result<PcapWriter, std::string> PcapWriter::open(const std::string& path, int link_type) {
  pcap* p =
      pcap_open_dead_with_tstamp_precision(to_dlt(link_type), 262144, PCAP_TSTAMP_PRECISION_NANO);
  if (p == nullptr) return Err{std::string("pcap_open_dead failed")};
  pcap_dumper* d = pcap_dump_open(p, path.c_str());
  if (d == nullptr) {
    std::string err = pcap_geterr(p);
    pcap_close(p);
    return Err{path + ": " + err};
  }
  return PcapWriter(p, d);
}

namespace {

// The n-th name for `path` (n >= 2): the number before the extension of the file's name.
std::string numbered(const std::string& path, int n) {
  const std::size_t slash = path.rfind('/');
  const std::size_t dot = path.rfind('.');
  const bool ext = dot != std::string::npos && dot > (slash == std::string::npos ? 0 : slash + 1);
  std::string out = ext ? path.substr(0, dot) : path;
  out += '-';
  out += std::to_string(n);
  if (ext) out.append(path, dot, std::string::npos);
  return out;
}

}  // namespace

Result<PcapWriter, std::string> PcapWriter::open_unshared(const std::string& path,
                                                          std::string* chosen, int link_type) {
  constexpr int kMaxNames = 1000;
  for (int n = 1; n <= kMaxNames; ++n) {
    const std::string name = n == 1 ? path : numbered(path, n);
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Err{name + ": " + std::strerror(errno)};
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      ::close(fd);
      if (e == EWOULDBLOCK) continue;  // another writer's
      return Err{name + ": flock: " + std::strerror(e)};
    }
    if (::ftruncate(fd, 0) != 0) {
      const int e = errno;
      ::close(fd);
      return Err{name + ": " + std::strerror(e)};
    }
    std::FILE* f = ::fdopen(fd, "wb");
    if (f == nullptr) {
      const int e = errno;
      ::close(fd);
      return Err{name + ": " + std::strerror(e)};
    }
    pcap* p =
        pcap_open_dead_with_tstamp_precision(to_dlt(link_type), 262144, PCAP_TSTAMP_PRECISION_NANO);
    if (p == nullptr) {
      std::fclose(f);
      return Err{std::string("pcap_open_dead failed")};
    }
    pcap_dumper* d = pcap_dump_fopen(p, f);  // owns f (and the lock) from here on
    if (d == nullptr) {
      std::string err = pcap_geterr(p);
      pcap_close(p);
      std::fclose(f);
      return Err{name + ": " + err};
    }
    if (chosen != nullptr) *chosen = name;
    return PcapWriter(p, d);
  }
  return Err{path + ": " + std::to_string(kMaxNames) + " names of it are all in use"};
}

PcapWriter::PcapWriter(PcapWriter&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)), d_(std::exchange(o.d_, nullptr)) {}

PcapWriter& PcapWriter::operator=(PcapWriter&& o) noexcept {
  if (this != &o) {
    close();
    p_ = std::exchange(o.p_, nullptr);
    d_ = std::exchange(o.d_, nullptr);
  }
  return *this;
}

PcapWriter::~PcapWriter() { close(); }

void PcapWriter::close() {
  if (d_ != nullptr) pcap_dump_close(d_);
  if (p_ != nullptr) pcap_close(p_);
  d_ = nullptr;
  p_ = nullptr;
}

void PcapWriter::write(ConstBytes frame, std::int64_t ts_ns, std::uint32_t orig_len) {
  pcap_pkthdr hdr{};
  hdr.ts.tv_sec = static_cast<time_t>(ts_ns / 1'000'000'000);
  hdr.ts.tv_usec = static_cast<suseconds_t>(ts_ns % 1'000'000'000);  // nanoseconds: see open()
  hdr.caplen = static_cast<bpf_u_int32>(frame.size());
  hdr.len = orig_len != 0 ? orig_len : hdr.caplen;
  pcap_dump(reinterpret_cast<u_char*>(d_), &hdr, reinterpret_cast<const u_char*>(frame.data()));
}

void PcapWriter::flush() {
  if (d_ != nullptr) pcap_dump_flush(d_);
}

}  // namespace uroce::capture
