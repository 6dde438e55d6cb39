// Reading and writing packet captures with libpcap: pcap and pcapng in, pcap (microsecond or
// nanosecond timestamps) out, readable by Wireshark and `uroce pcap check`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/bytes.h"
#include "base/result.h"

struct pcap;
struct pcap_dumper;

namespace uroce::capture {

struct PcapRecord {
  std::uint64_t index = 0;  // 1-based, as Wireshark numbers frames
  std::int64_t ts_ns = 0;
  ConstBytes data;  // the captured bytes; valid until the next call to next()
  std::uint32_t orig_len = 0;
};

class PcapReader {
 public:
  static Result<PcapReader, std::string> open(const std::string& path);
  PcapReader(PcapReader&& o) noexcept;
  PcapReader& operator=(PcapReader&& o) noexcept;
  PcapReader(const PcapReader&) = delete;
  PcapReader& operator=(const PcapReader&) = delete;
  ~PcapReader();

  int link_type() const { return link_type_; }
  // Reads the next record: true with `rec` filled, false at the end, or an error message.
  Result<bool, std::string> next(PcapRecord& rec);

 private:
  explicit PcapReader(pcap* p);
  pcap* p_ = nullptr;
  int link_type_ = 0;
  std::uint64_t count_ = 0;
  bool nanosecond_ = false;
};

// What for_each_record read: the capture's link type (a LINKTYPE_* value) and its records.
struct PcapScan {
  int link_type = 0;
  std::uint64_t records = 0;
};

// Opens the capture at `path` and calls `fn` with each of its records, in order (a record's
// bytes are valid during its call only). The error of opening or reading it, with the records
// read before a read error given to `fn` already.
Result<PcapScan, std::string> for_each_record(const std::string& path,
                                              const std::function<void(const PcapRecord&)>& fn);

class PcapWriter {
 public:
  // link_type: a LINKTYPE_* value (1 = Ethernet, 101 = raw IP).
  static Result<PcapWriter, std::string> open(const std::string& path, int link_type = 1);
  // As open, for a capture several writers may be given the same name for (UROCE_PCAP in the
  // environment of a program that opens the device more than once, or of several processes):
  // the writer holds an exclusive flock on its file while open, and when `path` is held by
  // another writer takes the first free of PATH-2, PATH-3, ... (the number before the extension:
  // x.pcap -> x-2.pcap). A file no writer holds is truncated and reused. `*chosen` is the name
  // taken.
  static Result<PcapWriter, std::string> open_unshared(const std::string& path, std::string* chosen,
                                                       int link_type = 1);
  PcapWriter(PcapWriter&& o) noexcept;
  PcapWriter& operator=(PcapWriter&& o) noexcept;
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;
  ~PcapWriter();

  // Appends a record. `orig_len` is the frame's length on the wire when `frame` holds only its
  // first bytes (a snaplen cut); 0 means the whole frame.
  void write(ConstBytes frame, std::int64_t ts_ns, std::uint32_t orig_len = 0);
  void flush();

 private:
  PcapWriter(pcap* p, pcap_dumper* d) : p_(p), d_(d) {}
  void close();
  pcap* p_ = nullptr;
  pcap_dumper* d_ = nullptr;
};

}  // namespace uroce::capture
