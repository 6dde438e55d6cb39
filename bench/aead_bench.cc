// One packet's AES-GCM seal and open through each library that could seal uroce's packets
// (issue 44, docs/SECURITY.md "What sealing costs"), measured in the same run:
//   uroce      seal::Aead as src/seal/aead.cc calls OpenSSL 3.0's EVP (one set_params per packet)
//   evp        OpenSSL's EVP as its manual shows it: a context per key, EVP_EncryptInit_ex with
//   only
//              the nonce, the tag through EVP_CIPHER_CTX_ctrl (the common correct use)
//   gcrypt     libgcrypt (a handle per key; setiv, authenticate, encrypt, gettag / checktag)
//   sodium     libsodium's crypto_aead_aes256gcm_*_afternm with the precomputed state (AES-256
//              only; one piece of associated data and one of payload, no gather)
//   nettle     nettle's gcm_aes128 / gcm_aes256 (a context per key; set_iv, update, encrypt,
//              digest)
// A packet is what the seal gives AES-GCM for an RDMA WRITE First or Only: the associated data is
// its BTH (TVer 2) and RETH as written by wire::write_headers (28 bytes), the plaintext its payload
// (8 B, 256 B, 1 KiB, 4 KiB). Each seal uses a new nonce (salt, counter) as the seal does; each
// open checks a packet sealed by seal::Aead, and fails the run if it does not verify. Buffers are
// reused (in L1 or L2, as the seal's are). AES-256 (the key the CM agrees) and AES-128 (a 32-digit
// pre-shared key).
//
// Before measuring, every library seals the same packets as seal::Aead, which must give the same
// ciphertext and tag (AES-GCM is AES-GCM), and opens them, and refuses them with one bit changed.
//   aead_bench --check                 only that (a test: bench.aead_backends_agree)
//   aead_bench --loop LIB OP BITS SIZE N   N packets and nothing else (OP seal|open), to count
//                                      instructions under callgrind
//                                      (bench/aead_backends_instructions.sh)
//   aead_bench [--benchmark_...]       the Google Benchmark rows, with BM_Clock (the clock they
//                                      ran at: cycles = seconds x its items/s)
#include <benchmark/benchmark.h>
#include <gcrypt.h>
#include <nettle/gcm.h>
#include <nettle/memops.h>
#include <openssl/evp.h>
#include <sodium.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/bytes.h"
#include "clock_bench.h"
#include "seal/aead.h"
#include "wire/builder.h"

namespace {

using namespace uroce;
using seal::Nonce;
using seal::Tag;

const unsigned char* u8(ConstBytes b) { return reinterpret_cast<const unsigned char*>(b.data()); }
unsigned char* u8(MutBytes b) { return reinterpret_cast<unsigned char*>(b.data()); }
int isize(std::size_t n) { return static_cast<int>(n); }

// What every library is driven through here: one key, one direction's worth of state each way.
class Gcm {
 public:
  virtual ~Gcm() = default;
  virtual bool seal(const Nonce& nonce, ConstBytes aad, ConstBytes plain, MutBytes out,
                    Tag& tag) = 0;
  virtual bool open(const Nonce& nonce, ConstBytes aad, ConstBytes cipher, MutBytes out,
                    const Tag& tag) = 0;
};

class UroceGcm final : public Gcm {
 public:
  explicit UroceGcm(seal::Aead a) : a_(std::move(a)) {}
  bool seal(const Nonce& nonce, ConstBytes aad, ConstBytes plain, MutBytes out, Tag& tag) override {
    return a_.seal(nonce, aad, {}, std::span(&plain, 1), out, tag);
  }
  bool open(const Nonce& nonce, ConstBytes aad, ConstBytes cipher, MutBytes out,
            const Tag& tag) override {
    return a_.open(nonce, aad, {}, cipher, out, tag);
  }

 private:
  seal::Aead a_;
};

class EvpGcm final : public Gcm {
 public:
  explicit EvpGcm(ConstBytes key) {
    const EVP_CIPHER* c = key.size() == 16 ? EVP_aes_128_gcm() : EVP_aes_256_gcm();
    ok_ = enc_ != nullptr && dec_ != nullptr &&
          EVP_EncryptInit_ex(enc_, c, nullptr, u8(key), nullptr) == 1 &&
          EVP_DecryptInit_ex(dec_, c, nullptr, u8(key), nullptr) == 1;
  }
  ~EvpGcm() override {
    EVP_CIPHER_CTX_free(enc_);
    EVP_CIPHER_CTX_free(dec_);
  }
  EvpGcm(const EvpGcm&) = delete;
  EvpGcm& operator=(const EvpGcm&) = delete;
  bool ok() const { return ok_; }
  bool seal(const Nonce& nonce, ConstBytes aad, ConstBytes plain, MutBytes out, Tag& tag) override {
    int len = 0;
    if (EVP_EncryptInit_ex(enc_, nullptr, nullptr, nullptr, u8(ConstBytes(nonce))) != 1 ||
        EVP_EncryptUpdate(enc_, nullptr, &len, u8(aad), isize(aad.size())) != 1) {
      return false;
    }
    if (!plain.empty() &&
        EVP_EncryptUpdate(enc_, u8(out), &len, u8(plain), isize(plain.size())) != 1) {
      return false;
    }
    return EVP_EncryptFinal_ex(enc_, u8(out), &len) == 1 &&
           EVP_CIPHER_CTX_ctrl(enc_, EVP_CTRL_GCM_GET_TAG, isize(tag.size()), tag.data()) == 1;
  }
  bool open(const Nonce& nonce, ConstBytes aad, ConstBytes cipher, MutBytes out,
            const Tag& tag) override {
    Tag expected = tag;
    int len = 0;
    if (EVP_DecryptInit_ex(dec_, nullptr, nullptr, nullptr, u8(ConstBytes(nonce))) != 1 ||
        EVP_CIPHER_CTX_ctrl(dec_, EVP_CTRL_GCM_SET_TAG, isize(expected.size()), expected.data()) !=
            1 ||
        EVP_DecryptUpdate(dec_, nullptr, &len, u8(aad), isize(aad.size())) != 1) {
      return false;
    }
    if (!cipher.empty() &&
        EVP_DecryptUpdate(dec_, u8(out), &len, u8(cipher), isize(cipher.size())) != 1) {
      return false;
    }
    return EVP_DecryptFinal_ex(dec_, u8(out), &len) == 1;
  }

 private:
  EVP_CIPHER_CTX* enc_ = EVP_CIPHER_CTX_new();
  EVP_CIPHER_CTX* dec_ = EVP_CIPHER_CTX_new();
  bool ok_ = false;
};

class GcryptGcm final : public Gcm {
 public:
  explicit GcryptGcm(ConstBytes key) {
    const int algo = key.size() == 16 ? GCRY_CIPHER_AES128 : GCRY_CIPHER_AES256;
    ok_ = gcry_cipher_open(&enc_, algo, GCRY_CIPHER_MODE_GCM, 0) == 0 &&
          gcry_cipher_open(&dec_, algo, GCRY_CIPHER_MODE_GCM, 0) == 0 &&
          gcry_cipher_setkey(enc_, key.data(), key.size()) == 0 &&
          gcry_cipher_setkey(dec_, key.data(), key.size()) == 0;
  }
  ~GcryptGcm() override {
    gcry_cipher_close(enc_);
    gcry_cipher_close(dec_);
  }
  GcryptGcm(const GcryptGcm&) = delete;
  GcryptGcm& operator=(const GcryptGcm&) = delete;
  bool ok() const { return ok_; }
  bool seal(const Nonce& nonce, ConstBytes aad, ConstBytes plain, MutBytes out, Tag& tag) override {
    return gcry_cipher_setiv(enc_, nonce.data(), nonce.size()) == 0 &&
           gcry_cipher_authenticate(enc_, aad.data(), aad.size()) == 0 &&
           gcry_cipher_encrypt(enc_, out.data(), out.size(), plain.data(), plain.size()) == 0 &&
           gcry_cipher_gettag(enc_, tag.data(), tag.size()) == 0;
  }
  bool open(const Nonce& nonce, ConstBytes aad, ConstBytes cipher, MutBytes out,
            const Tag& tag) override {
    // checktag compares in constant time (GPG_ERR_CHECKSUM when the tag is wrong).
    return gcry_cipher_setiv(dec_, nonce.data(), nonce.size()) == 0 &&
           gcry_cipher_authenticate(dec_, aad.data(), aad.size()) == 0 &&
           gcry_cipher_decrypt(dec_, out.data(), out.size(), cipher.data(), cipher.size()) == 0 &&
           gcry_cipher_checktag(dec_, tag.data(), tag.size()) == 0;
  }

 private:
  gcry_cipher_hd_t enc_ = nullptr;
  gcry_cipher_hd_t dec_ = nullptr;
  bool ok_ = false;
};

class SodiumGcm final : public Gcm {
 public:
  explicit SodiumGcm(ConstBytes key) {
    ok_ = key.size() == crypto_aead_aes256gcm_KEYBYTES && crypto_aead_aes256gcm_is_available() &&
          crypto_aead_aes256gcm_beforenm(&state_, u8(key)) == 0;
  }
  bool ok() const { return ok_; }
  bool seal(const Nonce& nonce, ConstBytes aad, ConstBytes plain, MutBytes out, Tag& tag) override {
    unsigned long long tag_len = 0;
    return crypto_aead_aes256gcm_encrypt_detached_afternm(
               u8(out), u8(MutBytes(tag)), &tag_len, u8(plain), plain.size(), u8(aad), aad.size(),
               nullptr, u8(ConstBytes(nonce)), &state_) == 0;
  }
  bool open(const Nonce& nonce, ConstBytes aad, ConstBytes cipher, MutBytes out,
            const Tag& tag) override {
    return crypto_aead_aes256gcm_decrypt_detached_afternm(
               u8(out), nullptr, u8(cipher), cipher.size(), u8(ConstBytes(tag)), u8(aad),
               aad.size(), u8(ConstBytes(nonce)), &state_) == 0;
  }

 private:
  crypto_aead_aes256gcm_state state_{};
  bool ok_ = false;
};

class NettleGcm final : public Gcm {
 public:
  explicit NettleGcm(ConstBytes key) : aes128_(key.size() == 16) {
    if (aes128_) {
      gcm_aes128_set_key(&c128_, u8(key));
    } else {
      gcm_aes256_set_key(&c256_, u8(key));
    }
  }
  bool seal(const Nonce& nonce, ConstBytes aad, ConstBytes plain, MutBytes out, Tag& tag) override {
    start(nonce, aad);
    if (aes128_) {
      gcm_aes128_encrypt(&c128_, plain.size(), u8(out), u8(plain));
      gcm_aes128_digest(&c128_, tag.size(), u8(MutBytes(tag)));
    } else {
      gcm_aes256_encrypt(&c256_, plain.size(), u8(out), u8(plain));
      gcm_aes256_digest(&c256_, tag.size(), u8(MutBytes(tag)));
    }
    return true;
  }
  bool open(const Nonce& nonce, ConstBytes aad, ConstBytes cipher, MutBytes out,
            const Tag& tag) override {
    start(nonce, aad);
    Tag got;
    if (aes128_) {
      gcm_aes128_decrypt(&c128_, cipher.size(), u8(out), u8(cipher));
      gcm_aes128_digest(&c128_, got.size(), u8(MutBytes(got)));
    } else {
      gcm_aes256_decrypt(&c256_, cipher.size(), u8(out), u8(cipher));
      gcm_aes256_digest(&c256_, got.size(), u8(MutBytes(got)));
    }
    return memeql_sec(got.data(), tag.data(), tag.size()) != 0;  // constant time
  }

 private:
  void start(const Nonce& nonce, ConstBytes aad) {
    if (aes128_) {
      gcm_aes128_set_iv(&c128_, nonce.size(), u8(ConstBytes(nonce)));
      gcm_aes128_update(&c128_, aad.size(), u8(aad));
    } else {
      gcm_aes256_set_iv(&c256_, nonce.size(), u8(ConstBytes(nonce)));
      gcm_aes256_update(&c256_, aad.size(), u8(aad));
    }
  }
  bool aes128_;
  gcm_aes128_ctx c128_{};
  gcm_aes256_ctx c256_{};
};

constexpr std::string_view kLibs[] = {"uroce", "evp", "gcrypt", "sodium", "nettle"};
constexpr std::size_t kSizes[] = {8, 256, 1024, 4096};
constexpr std::size_t kKeyBits[] = {256, 128};

std::vector<std::byte> key_bytes(std::size_t bits) {
  std::vector<std::byte> k(bits / 8);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::byte>(0x3c + 7 * i);
  return k;
}

// The library `lib` with a `bits`-bit key; null when it cannot take one (libsodium: AES-128, or
// a CPU without AES-NI and PCLMULQDQ).
std::unique_ptr<Gcm> make(std::string_view lib, std::size_t bits) {
  const std::vector<std::byte> key = key_bytes(bits);
  if (lib == "uroce") {
    seal::Key sk;
    sk.size = key.size();
    std::memcpy(sk.bytes.data(), key.data(), key.size());
    auto a = seal::Aead::create(sk);
    return a.ok() ? std::make_unique<UroceGcm>(std::move(a.value())) : nullptr;
  }
  if (lib == "evp") {
    auto g = std::make_unique<EvpGcm>(key);
    return g->ok() ? std::move(g) : nullptr;
  }
  if (lib == "gcrypt") {
    auto g = std::make_unique<GcryptGcm>(key);
    return g->ok() ? std::move(g) : nullptr;
  }
  if (lib == "sodium") {
    auto g = std::make_unique<SodiumGcm>(key);
    return g->ok() ? std::move(g) : nullptr;
  }
  if (lib == "nettle") return std::make_unique<NettleGcm>(key);
  return nullptr;
}

// A WRITE packet of `n` payload bytes as the seal hands it to AES-GCM, and room for its output.
struct Packet {
  explicit Packet(std::size_t n) : payload(n), out(n), back(n) {
    wire::TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcRdmaWriteFirst);
    h.bth.tver = wire::kTverEncrypted;
    h.bth.dest_qpn = 0x1234;
    h.bth.psn = 77;
    h.reth = wire::Reth{0x7f0000001000, 0xabcd12, 65536};
    headers.resize(64);
    headers.resize(wire::write_headers(headers, h, n));
    for (std::size_t i = 0; i < n; ++i) payload[i] = static_cast<std::byte>(i * 131 + 7);
  }
  std::vector<std::byte> headers, payload, out, back;
  Tag tag{};
};

Nonce nonce_for(std::uint64_t counter) {
  Nonce n{};
  store_be32(n, 0, 0x5a17c0de);
  store_be64(n, 4, counter);
  return n;
}

// The run's self-check: every library seals as seal::Aead does and opens what it sealed, and
// refuses a packet whose tag or ciphertext changed by one bit. Prints what differs.
bool libraries_agree() {
  bool ok = true;
  for (std::size_t bits : kKeyBits) {
    auto ref = make("uroce", bits);
    for (std::string_view lib : kLibs) {
      auto g = make(lib, bits);
      if (!g) {
        std::printf("aead_bench: %.*s: no AES-%zu-GCM (skipped)\n", isize(lib.size()), lib.data(),
                    bits);
        continue;
      }
      for (std::size_t n : kSizes) {
        Packet p(n), q(n);
        const Nonce nonce = nonce_for(n);
        const bool sealed = ref->seal(nonce, p.headers, p.payload, p.out, p.tag) &&
                            g->seal(nonce, q.headers, q.payload, q.out, q.tag);
        const bool same = sealed && p.out == q.out && p.tag == q.tag;
        const bool opens = g->open(nonce, p.headers, p.out, q.back, p.tag) && q.back == p.payload;
        Tag bad_tag = p.tag;
        bad_tag[5] ^= std::byte{0x10};
        p.out[n / 2] ^= std::byte{0x01};
        const bool bad_data = g->open(nonce, p.headers, p.out, q.back, p.tag);
        p.out[n / 2] ^= std::byte{0x01};
        const bool bad = g->open(nonce, p.headers, p.out, q.back, bad_tag) || bad_data;
        if (!same || !opens || bad) {
          std::printf("aead_bench: %.*s AES-%zu, %zu bytes: %s\n", isize(lib.size()), lib.data(),
                      bits, n,
                      !same    ? "seals differently from seal::Aead"
                      : !opens ? "does not open seal::Aead's packet"
                               : "opens a changed packet");
          ok = false;
        }
      }
    }
  }
  return ok;
}

// Seals one packet per iteration, a new nonce each; or opens one sealed by seal::Aead.
void run(benchmark::State& state, std::string_view lib, bool open) {
  const auto bits = static_cast<std::size_t>(state.range(0));
  const auto n = static_cast<std::size_t>(state.range(1));
  auto g = make(lib, bits);
  Packet p(n);
  const Nonce sealed_nonce = nonce_for(1);
  if (!make("uroce", bits)->seal(sealed_nonce, p.headers, p.payload, p.out, p.tag)) {
    state.SkipWithError("seal::Aead failed");
    return;
  }
  std::uint64_t counter = 2;
  for (auto _ : state) {
    const bool ok = open ? g->open(sealed_nonce, p.headers, p.out, p.back, p.tag)
                         : g->seal(nonce_for(counter++), p.headers, p.payload, p.back, p.tag);
    if (!ok) {
      state.SkipWithError("the library failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n));
}

void register_rows() {
  for (std::string_view lib : kLibs) {
    for (bool open : {false, true}) {
      const std::string name = std::string(open ? "BM_Open/" : "BM_Seal/") + std::string(lib);
      auto* b = benchmark::RegisterBenchmark(
          name.c_str(), [lib, open](benchmark::State& s) { run(s, lib, open); });
      b->ArgNames({"bits", "bytes"});
      for (std::size_t bits : kKeyBits) {
        if (!make(lib, bits)) continue;
        for (std::size_t n : kSizes) {
          b->Args({static_cast<std::int64_t>(bits), static_cast<std::int64_t>(n)});
        }
      }
    }
  }
  benchmark::RegisterBenchmark("BM_Clock", uroce::bench::BM_Clock);
}

// --loop: `count` packets through `lib` and nothing else, for callgrind (its instructions per
// packet are the difference between two counts over their difference).
int loop(std::string_view lib, std::string_view op, std::size_t bits, std::size_t n,
         std::uint64_t count) {
  auto g = make(lib, bits);
  auto ref = make("uroce", bits);
  if (!g || !ref || (op != "seal" && op != "open")) return 2;
  Packet p(n);
  const Nonce sealed_nonce = nonce_for(1);
  if (!ref->seal(sealed_nonce, p.headers, p.payload, p.out, p.tag)) return 1;
  for (std::uint64_t i = 0; i < count; ++i) {
    const bool ok = op == "open" ? g->open(sealed_nonce, p.headers, p.out, p.back, p.tag)
                                 : g->seal(nonce_for(i + 2), p.headers, p.payload, p.back, p.tag);
    if (!ok) return 1;
  }
  return 0;
}

bool init_libraries() {
  if (gcry_check_version(GCRYPT_VERSION) == nullptr) return false;
  gcry_control(GCRYCTL_DISABLE_SECMEM, 0);  // keys here are test keys; no locked memory needed
  gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0);
  return sodium_init() >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (!init_libraries()) {
    std::fprintf(stderr, "aead_bench: libgcrypt or libsodium did not initialise\n");
    return 1;
  }
  if (argc == 7 && std::string_view(argv[1]) == "--loop") {
    return loop(argv[2], argv[3], std::strtoul(argv[4], nullptr, 10),
                std::strtoul(argv[5], nullptr, 10), std::strtoull(argv[6], nullptr, 10));
  }
  if (!libraries_agree()) return 1;
  if (argc == 2 && std::string_view(argv[1]) == "--check") {
    std::printf("aead_bench: every library seals and opens as seal::Aead does\n");
    return 0;
  }
  register_rows();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
