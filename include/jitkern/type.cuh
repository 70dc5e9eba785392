// Element types and conversions: fp32_t/fp16_t/bf16_t/fp8_e4m3_t/fp8_e5m2_t and x2 forms, dtype_trait
// for TensorMatcher, packed_t<T> (the 2-wide type), device::cast<To>(from).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#ifndef __CUDACC_RTC__
#include <jitkern/tensor.h>
#endif
#include <jitkern/utils.cuh>

using fp32_t = float;
using fp16_t = __half;
using bf16_t = __nv_bfloat16;
using fp8_e4m3_t = __nv_fp8_e4m3;
using fp8_e5m2_t = __nv_fp8_e5m2;
using fp32x2_t = float2;
using fp16x2_t = __half2;
using bf16x2_t = __nv_bfloat162;
using fp8x2_e4m3_t = __nv_fp8x2_e4m3;
using fp8x2_e5m2_t = __nv_fp8x2_e5m2;

#ifndef __CUDACC_RTC__
template <>
struct host::dtype_trait<fp16_t> {
  static constexpr DLDataType value = {kDLFloat, 16, 1};
};
template <>
struct host::dtype_trait<bf16_t> {
  static constexpr DLDataType value = {kDLBfloat, 16, 1};
};
template <>
struct host::dtype_trait<fp8_e4m3_t> {
  static constexpr DLDataType value = {kDLFloat8_e4m3fn, 8, 1};
};
template <>
struct host::dtype_trait<fp8_e5m2_t> {
  static constexpr DLDataType value = {kDLFloat8_e5m2, 8, 1};
};
#endif

namespace device {

template <typename T>
struct packed;
template <>
struct packed<fp32_t> {
  using type = fp32x2_t;
};
template <>
struct packed<fp16_t> {
  using type = fp16x2_t;
};
template <>
struct packed<bf16_t> {
  using type = bf16x2_t;
};
template <typename T>
using packed_t = typename packed<T>::type;

namespace detail {
template <typename T>
inline constexpr bool kAlwaysFalse = false;
}

// Value conversion between the element types (round-to-nearest-even; fp8 saturates: e4m3 to +-448,
// e5m2 to +-57344).
template <typename To, typename From>
JITKERN_DEVICE To cast(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<To, fp32_t>) {
    if constexpr (std::is_same_v<From, fp16_t>) return __half2float(x);
    else if constexpr (std::is_same_v<From, bf16_t>) return __bfloat162float(x);
    else if constexpr (std::is_same_v<From, fp8_e4m3_t> || std::is_same_v<From, fp8_e5m2_t>) return static_cast<float>(x);
    else return static_cast<float>(x);
  } else if constexpr (std::is_same_v<From, fp32_t>) {
    if constexpr (std::is_same_v<To, fp16_t>) return __float2half_rn(x);
    else if constexpr (std::is_same_v<To, bf16_t>) return __float2bfloat16_rn(x);
    else if constexpr (std::is_same_v<To, fp8_e4m3_t>) return fp8_e4m3_t(x);  // satfinite, RNE
    else if constexpr (std::is_same_v<To, fp8_e5m2_t>) return fp8_e5m2_t(x);  // satfinite, RNE
    else return static_cast<To>(x);
  } else if constexpr (std::is_same_v<To, fp32x2_t>) {
    if constexpr (std::is_same_v<From, fp16x2_t>) return __half22float2(x);
    else if constexpr (std::is_same_v<From, bf16x2_t>) {
      // By the bits, one instruction a value (__bfloat1622float2 takes two for the high half).
      unsigned int bits;
      __builtin_memcpy(&bits, &x, sizeof(bits));
      return fp32x2_t{__uint_as_float(bits << 16), __uint_as_float(bits & 0xffff0000u)};
    }
    else static_assert(detail::kAlwaysFalse<From>, "device::cast: unsupported conversion");
  } else if constexpr (std::is_same_v<From, fp32x2_t>) {
    if constexpr (std::is_same_v<To, fp16x2_t>) return __float22half2_rn(x);
    else if constexpr (std::is_same_v<To, bf16x2_t>) return __float22bfloat162_rn(x);
    else if constexpr (std::is_same_v<To, fp8x2_e4m3_t>) return fp8x2_e4m3_t(x);
    else static_assert(detail::kAlwaysFalse<From>, "device::cast: unsupported conversion");
  } else {
    return cast<To>(cast<fp32_t>(x));  // through fp32
  }
}

}  // namespace device
