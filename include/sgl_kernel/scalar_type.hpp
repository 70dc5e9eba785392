// <sgl_kernel/scalar_type.hpp>: host::ScalarType, the description of a (possibly sub-byte, biased)
// integer or floating-point weight type that the quantized-GEMM kernels (GPTQ/Marlin) take as an id.
// The id is the reference framework's encoding, so ids computed by its Python side decode here: from
// bit 0 up, exponent (8 bits), mantissa (8), signed (1), bias (32, two's complement), finite values
// only (1), NaN representation (8).
#pragma once

#include <cstdint>
#include <string>

namespace host {

class ScalarType {
 public:
  using Id = int64_t;

  enum NanRepr : uint8_t {
    NAN_NONE = 0,                // no NaN encodings
    NAN_IEEE_754 = 1,            // exponent all ones, mantissa not all zeros
    NAN_EXTD_RANGE_MAX_MIN = 2,  // exponent and mantissa all ones
    NAN_REPR_ID_MAX
  };

  constexpr ScalarType(uint8_t exponent, uint8_t mantissa, bool signed_, int32_t bias, bool finite_values_only = false,
                       NanRepr nan_repr = NAN_IEEE_754)
      : exponent(exponent), mantissa(mantissa), signed_(signed_), bias(bias), finite_values_only(finite_values_only),
        nan_repr(nan_repr) {}

  // Signed integers keep one bit of size_bits for the sign, as two's complement does.
  static constexpr ScalarType int_(uint8_t size_bits, int32_t bias = 0) { return {0, uint8_t(size_bits - 1), true, bias}; }
  static constexpr ScalarType uint(uint8_t size_bits, int32_t bias = 0) { return {0, size_bits, false, bias}; }
  static constexpr ScalarType float_IEEE754(uint8_t exponent, uint8_t mantissa) { return {exponent, mantissa, true, 0}; }
  static constexpr ScalarType float_(uint8_t exponent, uint8_t mantissa, bool finite_values_only, NanRepr nan_repr) {
    return {exponent, mantissa, true, 0, finite_values_only, nan_repr};
  }

  uint8_t exponent;     // exponent bits (0 for integers)
  uint8_t mantissa;     // mantissa bits (value bits for integers)
  bool signed_;         // a sign bit
  int32_t bias;         // stored value = real value + bias (integers)
  bool finite_values_only;
  NanRepr nan_repr;

  constexpr Id id() const {
    return static_cast<Id>(uint64_t(exponent) | uint64_t(mantissa) << 8 | uint64_t(signed_) << 16 |
                           uint64_t(uint32_t(bias)) << 17 | uint64_t(finite_values_only) << 49 | uint64_t(nan_repr) << 50);
  }
  static constexpr ScalarType from_id(Id id) {
    const auto u = static_cast<uint64_t>(id);
    return {uint8_t(u & 0xff), uint8_t(u >> 8 & 0xff), bool(u >> 16 & 1), int32_t(uint32_t(u >> 17 & 0xffffffffu)),
            bool(u >> 49 & 1), NanRepr(u >> 50 & 0xff)};
  }

  constexpr int64_t size_bits() const { return int64_t(exponent) + mantissa + signed_; }
  constexpr bool is_signed() const { return signed_; }
  constexpr bool is_integer() const { return exponent == 0; }
  constexpr bool is_floating_point() const { return exponent != 0; }
  constexpr bool has_bias() const { return bias != 0; }
  constexpr bool has_infs() const { return !finite_values_only; }
  constexpr bool has_nans() const { return nan_repr != NAN_NONE; }
  constexpr bool is_ieee_754() const { return is_floating_point() && !finite_values_only && nan_repr == NAN_IEEE_754; }

  // "uint4b8", "int8", "float8_e4m3fn" (f: finite values only, n: NaNs in a non-IEEE encoding).
  std::string str() const {
    if (is_integer()) {
      std::string s = (signed_ ? "int" : "uint") + std::to_string(size_bits());
      return has_bias() ? s + "b" + std::to_string(bias) : s;
    }
    std::string s = "float" + std::to_string(size_bits()) + "_e" + std::to_string(exponent) + "m" + std::to_string(mantissa);
    if (!is_ieee_754()) s += std::string(finite_values_only ? "f" : "") + (has_nans() ? "n" : "");
    return s;
  }

  constexpr bool operator==(const ScalarType& o) const { return id() == o.id(); }
  constexpr bool operator!=(const ScalarType& o) const { return !(*this == o); }
};

using ScalarTypeId = ScalarType::Id;

inline constexpr ScalarType kS4 = ScalarType::int_(4);
inline constexpr ScalarType kU4 = ScalarType::uint(4);
inline constexpr ScalarType kU4B8 = ScalarType::uint(4, 8);
inline constexpr ScalarType kS8 = ScalarType::int_(8);
inline constexpr ScalarType kU8 = ScalarType::uint(8);
inline constexpr ScalarType kU8B128 = ScalarType::uint(8, 128);
inline constexpr ScalarType kFE2M1f = ScalarType::float_(2, 1, true, ScalarType::NAN_NONE);
inline constexpr ScalarType kFE3M2f = ScalarType::float_(3, 2, true, ScalarType::NAN_NONE);
inline constexpr ScalarType kFE4M3fn = ScalarType::float_(4, 3, true, ScalarType::NAN_EXTD_RANGE_MAX_MIN);
inline constexpr ScalarType kFE8M0fnu = ScalarType(8, 0, false, 0, true, ScalarType::NAN_EXTD_RANGE_MAX_MIN);
inline constexpr ScalarType kFE5M2 = ScalarType::float_IEEE754(5, 2);
inline constexpr ScalarType kFE8M7 = ScalarType::float_IEEE754(8, 7);
inline constexpr ScalarType kFE5M10 = ScalarType::float_IEEE754(5, 10);

// Long and colloquial names of the same types.
inline constexpr ScalarType kInt4 = kS4, kUint4 = kU4, kUint4b8 = kU4B8, kInt8 = kS8, kUint8 = kU8, kUint8b128 = kU8B128;
inline constexpr ScalarType kFloat4_e2m1f = kFE2M1f, kFloat6_e3m2f = kFE3M2f, kFloat8_e4m3fn = kFE4M3fn, kFloat8_e5m2 = kFE5M2;
inline constexpr ScalarType kFloat16_e8m7 = kFE8M7, kFloat16_e5m10 = kFE5M10;
inline constexpr ScalarType kHalf = kFE5M10, kFloat16 = kHalf, kBFloat16 = kFE8M7;
inline constexpr ScalarTypeId kFloat16Id = kFloat16.id();

}  // namespace host
