// host::ScalarType's constants seen through its members, to compare two implementations of
// <sgl_kernel/scalar_type.hpp> (include one before this file). Host code only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

inline constexpr host::ScalarType kScalarTypes[] = {host::kS4,     host::kU4,     host::kU4B8,    host::kS8,     host::kU8,
                                                   host::kU8B128, host::kFE2M1f, host::kFE3M2f,  host::kFE4M3fn, host::kFE8M0fnu,
                                                   host::kFE5M2,  host::kFE8M7,  host::kFE5M10,  host::kHalf,   host::kBFloat16};

inline int64_t scalar_type_count() { return sizeof(kScalarTypes) / sizeof(kScalarTypes[0]); }
inline int64_t scalar_type_id(int64_t i) { return kScalarTypes[i].id(); }
inline int64_t scalar_type_size_bits(int64_t id) { return host::ScalarType::from_id(id).size_bits(); }
inline int64_t scalar_type_name_hash(int64_t id) {
  return static_cast<int64_t>(std::hash<std::string>{}(host::ScalarType::from_id(id).str()));
}
