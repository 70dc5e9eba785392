// <sgl_kernel/type.cuh> for kernels written against the reference framework: the global dtype_trait<T>
// (self_t, packed_t, from, math) and packed_t<T>, over jitkern's types and device::cast.
#pragma once

#include <sgl_kernel/utils.cuh>

#include <jitkern/math.cuh>
#include <jitkern/type.cuh>

// The same alias template as device::packed_t, so `using namespace device;` leaves packed_t unambiguous.
using device::packed_t;

// Not host::dtype_trait (jitkern's DLPack dtype of T, which TensorMatcher reads): the reference's
// per-type helper for device code; `value` is still there for scalar types.
template <typename T>
struct dtype_trait;

namespace device::detail {
template <typename T>
struct SglDtypeTrait : host::dtype_trait<T> {
  using self_t = T;
  using packed_t = ::device::packed_t<T>;
  template <typename S>
  static SGL_DEVICE self_t from(const S& value) {
    return cast<self_t>(value);
  }
  static SGL_DEVICE self_t abs(self_t x) { return math::abs(x); }
  static SGL_DEVICE self_t max(self_t a, self_t b) { return math::max(a, b); }
  static SGL_DEVICE self_t min(self_t a, self_t b) { return math::min(a, b); }
  static SGL_DEVICE self_t sqrt(self_t x) { return math::sqrt(x); }
  static SGL_DEVICE self_t rsqrt(self_t x) { return math::rsqrt(x); }
  static SGL_DEVICE self_t exp(self_t x) { return math::exp(x); }
};
}  // namespace device::detail

template <>
struct dtype_trait<fp32_t> : device::detail::SglDtypeTrait<fp32_t> {};
template <>
struct dtype_trait<fp16_t> : device::detail::SglDtypeTrait<fp16_t> {};
template <>
struct dtype_trait<bf16_t> : device::detail::SglDtypeTrait<bf16_t> {};
