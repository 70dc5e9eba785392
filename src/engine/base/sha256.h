// SHA-256, used for cache keys and dependency content hashes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace jitkern {

class Sha256 {
 public:
  Sha256();
  Sha256& update(const void* data, std::size_t len);
  Sha256& update(std::string_view s) { return update(s.data(), s.size()); }
  // A length-prefixed field, so that ("ab","c") and ("a","bc") hash differently.
  Sha256& field(std::string_view s);
  std::string hex();  // finalises

 private:
  void compress(const uint8_t* p, std::size_t blocks);
  uint32_t m_h[8];
  uint8_t m_buf[64];
  std::size_t m_buf_len = 0;
  uint64_t m_total = 0;
};

std::string sha256_hex(std::string_view data);
// Hash of a file's contents; returns false if it cannot be read.
bool sha256_file(const std::string& path, std::string* hex);
// The same for an open file, from its start (its offset is left alone).
bool sha256_fd(int fd, std::string* hex);

namespace detail {
// The compression function over whole 64-byte blocks: portable, and with the x86 SHA extensions
// (returns false, touching nothing, where the CPU lacks them). Exposed for the tests.
void sha256_compress_scalar(uint32_t state[8], const uint8_t* data, std::size_t blocks);
bool sha256_compress_accelerated(uint32_t state[8], const uint8_t* data, std::size_t blocks);
}  // namespace detail

}  // namespace jitkern
