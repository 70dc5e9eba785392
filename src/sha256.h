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
  void block(const uint8_t* p);
  uint32_t m_h[8];
  uint8_t m_buf[64];
  std::size_t m_buf_len = 0;
  uint64_t m_total = 0;
};

std::string sha256_hex(std::string_view data);
// Hash of a file's contents; returns false if it cannot be read.
bool sha256_file(const std::string& path, std::string* hex);

}  // namespace jitkern
