#include "base/sha256.h"

#include <cerrno>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace jitkern {
namespace {
constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
    0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
    0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
    0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
}  // namespace

Sha256::Sha256()
    : m_h{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

namespace detail {

void sha256_compress_scalar(uint32_t state[8], const uint8_t* p, std::size_t blocks) {
  for (; blocks > 0; --blocks, p += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3], e = state[4], f = state[5], g = state[6], h = state[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    state[0] += a, state[1] += b, state[2] += c, state[3] += d, state[4] += e, state[5] += f, state[6] += g, state[7] += h;
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The x86 SHA extensions: four rounds per sha256rnds2 pair and the message schedule in sha256msg1/2,
// about ten times the scalar speed (the warm cache lookup hashes a few kilobytes of key material).
__attribute__((target("sha,sse4.1,ssse3"))) static void compress_shani(uint32_t state[8], const uint8_t* p, std::size_t blocks) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  // The instructions keep the state as ABEF and CDGH.
  __m128i dcba = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[0]));
  __m128i hgfe = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[4]));
  const __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
  const __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
  __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
  for (; blocks > 0; --blocks, p += 64) {
    const __m128i abef_in = abef, cdgh_in = cdgh;
    __m128i w[4];  // message words 4j..4j+3 of the last four groups j, w[j % 4]
    for (int j = 0; j < 4; ++j) w[j] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * j)), byte_swap);
    for (int j = 0; j < 16; ++j) {
      if (j >= 4) {  // W[4j..4j+3] from groups j-4 (w[j%4]), j-3, j-2 and j-1
        __m128i t = _mm_sha256msg1_epu32(w[j % 4], w[(j + 1) % 4]);
        t = _mm_add_epi32(t, _mm_alignr_epi8(w[(j + 3) % 4], w[(j + 2) % 4], 4));
        w[j % 4] = _mm_sha256msg2_epu32(t, w[(j + 3) % 4]);
      }
      __m128i msg = _mm_add_epi32(w[j % 4], _mm_loadu_si128(reinterpret_cast<const __m128i*>(&kRound[4 * j])));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, msg);
      msg = _mm_shuffle_epi32(msg, 0x0E);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, msg);
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[0]), _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[4]), _mm_alignr_epi8(dchg, feba, 8));
}

// libgcc's CPU model, filled when the process starts: a cpuid here would cost about 10 us in a VM
// (measured on the dev machine), more than hashing the whole cache key.
static bool cpu_has_shani() {
  return __builtin_cpu_supports("sha") && __builtin_cpu_supports("sse4.1") && __builtin_cpu_supports("ssse3");
}

bool sha256_compress_accelerated(uint32_t state[8], const uint8_t* p, std::size_t blocks) {
  static const bool supported = cpu_has_shani();
  if (!supported) return false;
  compress_shani(state, p, blocks);
  return true;
}
#else
bool sha256_compress_accelerated(uint32_t*, const uint8_t*, std::size_t) { return false; }
#endif

}  // namespace detail

void Sha256::compress(const uint8_t* p, std::size_t blocks) {
  if (!detail::sha256_compress_accelerated(m_h, p, blocks)) detail::sha256_compress_scalar(m_h, p, blocks);
}

Sha256& Sha256::update(const void* data, std::size_t len) {
  auto p = static_cast<const uint8_t*>(data);
  m_total += len;
  if (m_buf_len > 0) {
    const std::size_t take = std::min(len, 64 - m_buf_len);
    std::memcpy(m_buf + m_buf_len, p, take);
    m_buf_len += take, p += take, len -= take;
    if (m_buf_len < 64) return *this;
    compress(m_buf, 1), m_buf_len = 0;
  }
  if (len >= 64) compress(p, len / 64), p += len / 64 * 64, len %= 64;
  std::memcpy(m_buf, p, len), m_buf_len = len;
  return *this;
}

Sha256& Sha256::field(std::string_view s) {
  const uint64_t n = s.size();
  update(&n, sizeof n);
  return update(s);
}

std::string Sha256::hex() {
  const uint64_t bits = m_total * 8;
  const uint8_t pad = 0x80;
  update(&pad, 1);
  const uint8_t zero = 0;
  while (m_buf_len != 56) update(&zero, 1);
  uint8_t len_be[8];
  for (int i = 0; i < 8; ++i) len_be[i] = uint8_t(bits >> (56 - 8 * i));
  update(len_be, 8);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(64, '0');
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) out[i * 8 + j] = kHex[(m_h[i] >> (28 - 4 * j)) & 0xf];
  return out;
}

std::string sha256_hex(std::string_view data) { return Sha256().update(data).hex(); }

bool sha256_fd(int fd, std::string* hex) {
  Sha256 h;
  char buf[1 << 16];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    h.update(buf, static_cast<std::size_t>(n));
    at += n;
  }
  *hex = h.hex();
  return true;
}

bool sha256_file(const std::string& path, std::string* hex) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = sha256_fd(fd, hex);
  ::close(fd);
  return ok;
}

}  // namespace jitkern
