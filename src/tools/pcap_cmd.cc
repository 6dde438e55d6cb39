#include "tools/pcap_cmd.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cinttypes>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>
#include <vector>

#include "capture/pcap_file.h"
#include "tools/pcap_cm.h"
#include "wire/aeth.h"
#include "wire/builder.h"
#include "wire/icrc.h"
#include "wire/packet.h"

namespace uroce::tools {

namespace {

using wire::DropReason;
using wire::ExtHeader;

std::string format_ip(const wire::IpAddress& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(a.v6 ? AF_INET6 : AF_INET, a.bytes.data(), buf, sizeof buf);
  return buf;
}

std::string format_endpoint(const wire::IpAddress& a, std::uint16_t port) {
  // Appended piece by piece: `"[" + std::string` trips GCC 12's false -Wrestrict at -O3
  // (GCC bug 105651), which -Werror turns into a failed Release build.
  std::string out = a.v6 ? "[" : "";
  out += format_ip(a);
  out += a.v6 ? "]:" : ":";
  out += std::to_string(port);
  return out;
}

struct FileStats {
  std::uint64_t frames = 0;
  std::uint64_t roce = 0;  // valid RoCEv2 packets
  std::uint64_t invalid = 0;
  std::uint64_t not_roce = 0;
  std::uint64_t cut = 0;        // cut by the capture's snaplen: cannot be verified
  std::uint64_t sealed_ok = 0;  // sealed packets whose tag verified under the given key
  std::uint64_t rxe_icrc = 0;   // valid FLUSH packets with rxe's ICRC (wire::icrc_rxe_continue)
  std::map<std::uint8_t, std::uint64_t> per_opcode;
  std::map<std::uint16_t, std::uint64_t> per_cm_attr;         // valid CM MADs (QP 1)
  std::map<std::uint8_t, std::uint64_t> per_other_mad_class;  // valid MADs of other classes

  void add(const FileStats& o) {
    frames += o.frames;
    roce += o.roce;
    invalid += o.invalid;
    not_roce += o.not_roce;
    cut += o.cut;
    sealed_ok += o.sealed_ok;
    rxe_icrc += o.rxe_icrc;
    for (const auto& [op, n] : o.per_opcode) per_opcode[op] += n;
    for (const auto& [a, n] : o.per_cm_attr) per_cm_attr[a] += n;
    for (const auto& [c, n] : o.per_other_mad_class) per_other_mad_class[c] += n;
  }
  bool bad() const { return invalid != 0 || cut != 0; }
};

void print_stats(std::FILE* out, const char* label, const FileStats& s) {
  std::fprintf(out,
               "%s: %" PRIu64 " frames, %" PRIu64 " valid RoCEv2, %" PRIu64 " invalid, %" PRIu64
               " other traffic",
               label, s.frames, s.roce, s.invalid, s.not_roce);
  if (s.cut != 0) std::fprintf(out, ", %" PRIu64 " cut by snaplen (unverifiable)", s.cut);
  if (s.sealed_ok != 0) std::fprintf(out, ", %" PRIu64 " sealed and verified", s.sealed_ok);
  if (s.rxe_icrc != 0) std::fprintf(out, ", %" PRIu64 " with rxe's FLUSH ICRC", s.rxe_icrc);
  std::fprintf(out, "\n");
  for (const auto& [op, n] : s.per_opcode) {
    const auto name = wire::opcode_info(op)->name;
    std::fprintf(out, "  0x%02x %-36.*s %10" PRIu64 "\n", unsigned{op},
                 static_cast<int>(name.size()), name.data(), n);
  }
  for (const auto& [attr, n] : s.per_cm_attr) {
    const auto name = wire::cm_attr_name(static_cast<wire::CmAttr>(attr));
    std::fprintf(out, "  CM   0x%04x %-29.*s %10" PRIu64 "\n", unsigned{attr},
                 static_cast<int>(name.size()), name.data(), n);
  }
  for (const auto& [mgmt_class, n] : s.per_other_mad_class) {
    std::fprintf(out, "  MAD  class 0x%02x (not CM)%17s %10" PRIu64 "\n", unsigned{mgmt_class}, "",
                 n);
  }
}

void print_invalid(std::FILE* out, const std::string& file, std::uint64_t frame,
                   std::string_view name, std::string_view text) {
  std::fprintf(out, "%s: frame %" PRIu64 ": invalid: %.*s (%.*s)\n", file.c_str(), frame,
               static_cast<int>(name.size()), name.data(), static_cast<int>(text.size()),
               text.data());
}

// A valid RoCEv2 packet is counted by opcode; one to or from QP 1 must also be a valid MAD.
void count_packet(const std::string& file, std::uint64_t frame, const wire::RocePacket& p,
                  FileStats& stats, std::FILE* out) {
  if (is_gsi_packet(p)) {
    const auto mad = parse_gsi_packet(p);
    if (!mad.ok()) {
      ++stats.invalid;
      print_invalid(out, file, frame, mad.error().name, mad.error().text);
      return;
    }
    if (mad->cm) {
      ++stats.per_cm_attr[static_cast<std::uint16_t>(wire::cm_attr_of(mad->cm->message))];
    } else {
      ++stats.per_other_mad_class[mad->mgmt_class];
    }
  }
  ++stats.roce;
  ++stats.per_opcode[p.bth().opcode()];
}

// Opens a capture and checks that uroce can decode its link type.
Result<capture::PcapReader, std::string> open_capture(const std::string& file) {
  auto reader = capture::PcapReader::open(file);
  if (!reader.ok()) return Err{file + ": " + reader.error()};
  if (!wire::link_type_supported(reader->link_type())) {
    return Err{file + ": unsupported link type " + std::to_string(reader->link_type()) +
               " (Ethernet, Linux cooked v1/v2 and raw IP are supported)"};
  }
  return reader;
}

// The AES-GCM context of --psk, when given; an error when the key is unusable.
Result<std::optional<seal::Aead>, std::string> aead_for(const seal::Key* key) {
  std::optional<seal::Aead> a;
  if (key == nullptr) return a;
  auto made = seal::Aead::create(*key);
  if (!made.ok()) return Err{made.error()};
  a.emplace(std::move(made.value()));
  return a;
}

// A sealed packet that does not verify under the key (docs/SECURITY.md); counts what does.
bool seal_fails(std::optional<seal::Aead>& aead, const wire::RocePacket& p, FileStats& stats) {
  if (!aead || !p.sealed()) return false;
  std::vector<std::byte> plain(p.payload.size());
  if (!seal::open_packet(*aead, p, plain)) return true;
  ++stats.sealed_ok;
  return false;
}

wire::LinkType link_of(int dlt) {
  if (dlt == 12 || dlt == 14) return wire::LinkType::kRaw;
  return static_cast<wire::LinkType>(dlt);
}

}  // namespace

int pcap_check(const std::vector<std::string>& files, std::FILE* out, std::FILE* err,
               const seal::Key* key) {
  auto aead = aead_for(key);
  if (!aead.ok()) {
    std::fprintf(err, "uroce pcap check: --psk: %s\n", aead.error().c_str());
    return kExitFileError;
  }
  FileStats total;
  bool file_error = false;
  for (const auto& file : files) {
    auto reader = open_capture(file);
    if (!reader.ok()) {
      std::fprintf(err, "uroce pcap check: %s\n", reader.error().c_str());
      file_error = true;
      continue;
    }
    const wire::LinkType link = link_of(reader->link_type());
    FileStats stats;
    capture::PcapRecord rec;
    while (true) {
      auto more = reader->next(rec);
      if (!more.ok()) {
        std::fprintf(err, "uroce pcap check: %s: read error after frame %" PRIu64 ": %s\n",
                     file.c_str(), stats.frames, more.error().c_str());
        file_error = true;
        break;
      }
      if (!more.value()) break;
      ++stats.frames;
      if (rec.data.size() < rec.orig_len) {
        ++stats.cut;
        std::fprintf(out,
                     "%s: frame %" PRIu64 ": cut by the capture (%zu of %u bytes): not verified\n",
                     file.c_str(), rec.index, rec.data.size(), rec.orig_len);
        continue;
      }
      // Sealed packets (docs/SECURITY.md) are checked as far as their headers and ICRC go.
      auto frame = wire::parse_frame(link, rec.data, wire::FrameOptions{.accept_sealed = true});
      if (frame.ok() && seal_fails(aead.value(), frame->roce, stats)) {
        ++stats.invalid;
        print_invalid(out, file, rec.index, "seal",
                      "the tag does not verify with the given key: forged, tampered or another "
                      "key's");
        continue;
      }
      if (frame.ok()) {
        // A FLUSH with the kernel's Soft-RoCE's ICRC (docs/INTEROP.md, "FLUSH and rxe") is
        // valid, as a uroce receiver takes it; counted apart.
        if (frame->icrc_form == wire::IcrcForm::kRxe) ++stats.rxe_icrc;
        count_packet(file, rec.index, frame->roce, stats, out);
        continue;
      }
      if (wire::is_not_roce(frame.error())) {
        ++stats.not_roce;
        continue;
      }
      ++stats.invalid;
      print_invalid(out, file, rec.index, wire::drop_reason_name(frame.error()),
                    wire::drop_reason_text(frame.error()));
    }
    print_stats(out, file.c_str(), stats);
    total.add(stats);
  }
  if (files.size() > 1) print_stats(out, "total", total);
  if (file_error) return kExitFileError;
  return total.bad() ? kExitInvalidPackets : kExitOk;
}

namespace {

// A sealed packet's trailer and, given the key, whether it verifies and its payload's first
// bytes in clear. False when it does not verify.
bool dump_seal(std::FILE* out, const wire::RocePacket& p, std::optional<seal::Aead>& aead) {
  const bool encrypted = p.bth().tver() == wire::kTverEncrypted;
  std::fprintf(out, "  SEAL %s nonce ", encrypted ? "encrypted" : "authenticated");
  for (std::size_t i = 0; i < p.trailer.size(); ++i) {
    if (i == wire::kSealNonceBytes) std::fprintf(out, " tag ");
    std::fprintf(out, "%02x", static_cast<unsigned>(p.trailer[i]));
  }
  if (!aead) {
    std::fprintf(out, " (not verified: no key)\n");
    return true;
  }
  std::vector<std::byte> plain(p.payload.size());
  const auto clear = seal::open_packet(*aead, p, plain);
  if (!clear) {
    std::fprintf(out, " FAILED verification (forged, tampered or another key's)\n");
    return false;
  }
  std::fprintf(out, " verified\n");
  if (clear->empty()) return true;
  constexpr std::size_t kShown = 32;
  std::fprintf(out, "  %s", encrypted ? "decrypted" : "in clear");
  for (std::size_t i = 0; i < std::min(kShown, clear->size()); ++i) {
    std::fprintf(out, "%s%02x", i % 4 == 0 ? " " : "", static_cast<unsigned>((*clear)[i]));
  }
  std::fprintf(out, "%s\n", clear->size() > kShown ? " ..." : "");
  return true;
}

// Returns false when the packet is invalid (a malformed MAD to or from QP 1, or a sealed packet
// that does not verify under the given key).
bool dump_roce(std::FILE* out, const wire::Frame& f, std::optional<seal::Aead>& aead) {
  const wire::RocePacket& p = f.roce;
  const wire::Bth bth = p.bth().decode();
  std::fprintf(out,
               "  BTH  %.*s (0x%02x) QPN 0x%06x PSN %u AckReq %d SE %d M %d Pad %u TVer %u "
               "P_Key 0x%04x FECN %d BECN %d\n",
               static_cast<int>(p.op->name.size()), p.op->name.data(), unsigned{bth.opcode},
               bth.dest_qpn, bth.psn, bth.ack_req, bth.solicited, bth.mig_req,
               unsigned{bth.pad_count}, unsigned{bth.tver}, unsigned{bth.pkey}, bth.fecn, bth.becn);
  const bool seal_ok = !p.sealed() || dump_seal(out, p, aead);
  const wire::TransportHeaders h = wire::decode_headers(p);
  if (p.op->has(ExtHeader::kDeth)) {
    std::fprintf(out, "  DETH Q_Key 0x%08x SrcQP 0x%06x\n", h.deth.qkey, h.deth.src_qpn);
  }
  if (p.op->has(ExtHeader::kXrcEth)) std::fprintf(out, "  XRCETH XRC SRQ 0x%06x\n", h.xrc_srqn);
  if (p.op->has(ExtHeader::kFeth)) {
    // Placement type bits: 1 global visibility, 2 persistence; selectivity 0 range, 1 region.
    const unsigned plt = h.feth.placement;
    std::fprintf(out, "  FETH placement 0x%x%s%s selectivity %u (%s)\n", plt,
                 (plt & wire::kFlushGlobal) != 0 ? " global" : "",
                 (plt & wire::kFlushPersistent) != 0 ? " persistent" : "",
                 unsigned{h.feth.selectivity},
                 h.feth.selectivity == wire::kFlushRange ? "range"
                 : h.feth.selectivity == wire::kFlushMr  ? "memory region"
                                                         : "reserved");
  }
  if (p.op->has(ExtHeader::kReth)) {
    std::fprintf(out, "  RETH VA 0x%016" PRIx64 " R_Key 0x%08x DMA length %u\n", h.reth.va,
                 h.reth.rkey, h.reth.dma_length);
  }
  if (p.op->has(ExtHeader::kAtomicEth)) {
    std::fprintf(out,
                 "  AtomicETH VA 0x%016" PRIx64 " R_Key 0x%08x SwapAdd 0x%016" PRIx64
                 " Compare 0x%016" PRIx64 "\n",
                 h.atomic_eth.va, h.atomic_eth.rkey, h.atomic_eth.swap_add, h.atomic_eth.compare);
  }
  if (p.op->has(ExtHeader::kAeth)) {
    std::fprintf(out, "  AETH syndrome 0x%02x %s MSN %u\n", unsigned{h.aeth.syndrome},
                 wire::describe_syndrome(h.aeth.syndrome).c_str(), h.aeth.msn);
  }
  if (p.op->has(ExtHeader::kAtomicAckEth)) {
    std::fprintf(out, "  AtomicAckETH OrigRemDt 0x%016" PRIx64 "\n", h.atomic_ack_orig);
  }
  if (p.op->has(ExtHeader::kImmDt)) std::fprintf(out, "  ImmDt 0x%08x\n", h.imm_data);
  if (p.op->has(ExtHeader::kIeth)) std::fprintf(out, "  IETH R_Key 0x%08x\n", h.ieth_rkey);
  if (p.op->is(wire::kFlagCnp)) std::fprintf(out, "  CNP (congestion notification)\n");
  std::fprintf(out, "  payload %zu bytes, pad %u\n", p.payload.size(), unsigned{p.pad});
  if (!is_gsi_packet(p)) return seal_ok;
  const auto mad = parse_gsi_packet(p);
  if (!mad.ok()) {
    const GsiError& e = mad.error();
    std::fprintf(out, "  MAD  INVALID: %.*s (%s)\n", static_cast<int>(e.name.size()), e.name.data(),
                 e.text.c_str());
    return false;
  }
  dump_gsi_mad(out, *mad);
  return true;
}

}  // namespace

namespace {

// A line of a capture's companion log of injected faults (FILE.faults, device/udp_device.h):
// "time_ns dir packet kind class dest_qpn peer rule"; '#' lines are comments.
struct FaultLine {
  std::int64_t ts_ns = 0;
  std::string text;  // the rest, as written
};

std::vector<FaultLine> read_fault_log(const std::string& path, std::FILE* out) {
  std::vector<FaultLine> lines;
  std::ifstream in(path);
  if (!in) return lines;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::fprintf(out, "%s\n", line.c_str());
      continue;
    }
    std::istringstream words(line);
    FaultLine f;
    if (!(words >> f.ts_ns)) continue;
    std::getline(words, f.text);
    lines.push_back(f);
  }
  return lines;
}

}  // namespace

// Long: per frame its outer headers, its RoCE part and its ICRC, with the faults between them;
// read top to bottom.
int pcap_dump(const std::string& file, std::FILE* out, std::FILE* err, const seal::Key* key) {
  auto aead = aead_for(key);
  if (!aead.ok()) {
    std::fprintf(err, "uroce pcap dump: --psk: %s\n", aead.error().c_str());
    return kExitFileError;
  }
  // Injected faults beside the packets, by time (a dropped packet is in the log only).
  const std::vector<FaultLine> faults = read_fault_log(file + ".faults", out);
  std::size_t next_fault = 0;
  auto print_faults_until = [&](std::int64_t ts_ns) {
    for (; next_fault < faults.size() && faults[next_fault].ts_ns <= ts_ns; ++next_fault) {
      const FaultLine& f = faults[next_fault];
      std::fprintf(out, "fault t=%" PRId64 ".%09" PRId64 "%s\n", f.ts_ns / 1'000'000'000,
                   f.ts_ns % 1'000'000'000, f.text.c_str());
    }
  };
  auto reader = open_capture(file);
  if (!reader.ok()) {
    std::fprintf(err, "uroce pcap dump: %s\n", reader.error().c_str());
    return kExitFileError;
  }
  const wire::LinkType link = link_of(reader->link_type());
  bool any_invalid = false;
  capture::PcapRecord rec;
  while (true) {
    auto more = reader->next(rec);
    if (!more.ok()) {
      std::fprintf(err, "uroce pcap dump: %s: %s\n", file.c_str(), more.error().c_str());
      return kExitFileError;
    }
    if (!more.value()) break;
    print_faults_until(rec.ts_ns);
    std::fprintf(out, "#%" PRIu64 " t=%" PRId64 ".%09" PRId64 " len %u", rec.index,
                 rec.ts_ns / 1'000'000'000, rec.ts_ns % 1'000'000'000, rec.orig_len);
    auto frame = wire::parse_frame(link, rec.data,
                                   wire::FrameOptions{.verify_icrc = false, .accept_sealed = true});
    if (!frame.ok()) {
      if (wire::is_not_roce(frame.error())) {
        std::fprintf(out, " not RoCEv2\n");
      } else {
        any_invalid = true;
        const auto name = wire::drop_reason_name(frame.error());
        std::fprintf(out, " INVALID: %.*s\n", static_cast<int>(name.size()), name.data());
      }
      continue;
    }
    const wire::Frame& f = frame.value();
    const auto& src = f.v6 ? f.ipv6.src : f.ipv4.src;
    const auto& dst = f.v6 ? f.ipv6.dst : f.ipv4.dst;
    std::fprintf(out, " %s -> %s\n", format_endpoint(src, f.udp.src_port).c_str(),
                 format_endpoint(dst, f.udp.dst_port).c_str());
    if (f.v6) {
      std::fprintf(out, "  IPv6 tclass 0x%02x flow 0x%05x hlim %u\n",
                   unsigned{f.ipv6.traffic_class}, f.ipv6.flow_label, unsigned{f.ipv6.hop_limit});
    } else {
      std::fprintf(out, "  IPv4 tos 0x%02x ttl %u id 0x%04x%s\n", unsigned{f.ipv4.tos},
                   unsigned{f.ipv4.ttl}, unsigned{f.ipv4.identification},
                   f.ipv4.dont_fragment ? " DF" : "");
    }
    if (!dump_roce(out, f, aead.value())) any_invalid = true;
    const std::size_t n = f.roce.bytes.size() - wire::kIcrcBytes;
    const std::uint32_t expected = wire::icrc_compute(f.ip_udp, f.roce.bytes.first(n));
    if (expected == f.roce.icrc()) {
      std::fprintf(out, "  ICRC 0x%08x ok\n", f.roce.icrc());
    } else if (wire::icrc_match(f.ip_udp, f.roce.bytes) == wire::IcrcForm::kRxe) {
      std::fprintf(out, "  ICRC 0x%08x ok: rxe FLUSH ICRC (the IBTA's would be 0x%08x)\n",
                   f.roce.icrc(), expected);
    } else {
      any_invalid = true;
      std::fprintf(out, "  ICRC 0x%08x BAD (expected 0x%08x)\n", f.roce.icrc(), expected);
    }
  }
  print_faults_until(INT64_MAX);
  return any_invalid ? kExitInvalidPackets : kExitOk;
}

}  // namespace uroce::tools
