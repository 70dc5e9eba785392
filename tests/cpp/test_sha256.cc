// SHA-256 (cache keys, dependency hashes): known answers, streaming, and the x86 SHA-extension path
// against the portable one.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "base/sha256.h"

namespace {

TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(jitkern::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(jitkern::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(jitkern::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(jitkern::sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, StreamingInOddPiecesEqualsOneShot) {
  std::mt19937 rng(7);
  std::string data(5000, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  const std::string expected = jitkern::sha256_hex(data);
  for (std::size_t piece : {1, 3, 63, 64, 65, 127, 1000}) {
    jitkern::Sha256 h;
    for (std::size_t i = 0; i < data.size(); i += piece) h.update(std::string_view(data).substr(i, piece));
    EXPECT_EQ(h.hex(), expected) << "piece " << piece;
  }
}

TEST(Sha256, ShaExtensionsMatchThePortableCompression) {
  std::mt19937 rng(11);
  std::vector<uint8_t> data(64 * 33);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  for (std::size_t blocks = 0; blocks <= 33; ++blocks) {
    uint32_t portable[8], accelerated[8];
    for (int i = 0; i < 8; ++i) portable[i] = accelerated[i] = static_cast<uint32_t>(rng());
    jitkern::detail::sha256_compress_scalar(portable, data.data(), blocks);
    if (!jitkern::detail::sha256_compress_accelerated(accelerated, data.data(), blocks))
      GTEST_SKIP() << "NOT RUN: this CPU has no SHA extensions";
    for (int i = 0; i < 8; ++i) EXPECT_EQ(accelerated[i], portable[i]) << blocks << " blocks, word " << i;
  }
}

}  // namespace
