// device::math: elementary functions for fp32/fp16/bf16 (and their x2 forms), computed in fp32 for
// the 16-bit types; constants.
#pragma once

#include <jitkern/type.cuh>

namespace device::math {

inline constexpr float kFP8E4M3Max = 448.0f;  // largest finite float8_e4m3fn
inline constexpr float kFP16Max = 65504.0f;

namespace detail {
template <typename T, typename F>
JITKERN_DEVICE T via_fp32(T x, F f) {
  if constexpr (std::is_same_v<T, fp32_t>) {
    return f(x);
  } else if constexpr (std::is_same_v<T, fp16x2_t> || std::is_same_v<T, bf16x2_t>) {
    const fp32x2_t v = cast<fp32x2_t>(x);
    return cast<T>(fp32x2_t{f(v.x), f(v.y)});
  } else {
    return cast<T>(f(cast<fp32_t>(x)));
  }
}
template <typename T, typename F>
JITKERN_DEVICE T via_fp32(T a, T b, F f) {
  if constexpr (std::is_same_v<T, fp32_t>) {
    return f(a, b);
  } else if constexpr (std::is_same_v<T, fp16x2_t> || std::is_same_v<T, bf16x2_t>) {
    const fp32x2_t u = cast<fp32x2_t>(a), v = cast<fp32x2_t>(b);
    return cast<T>(fp32x2_t{f(u.x, v.x), f(u.y, v.y)});
  } else {
    return cast<T>(f(cast<fp32_t>(a), cast<fp32_t>(b)));
  }
}
}  // namespace detail

template <typename T>
JITKERN_DEVICE T max(T a, T b) {
  return detail::via_fp32(a, b, [](float x, float y) { return fmaxf(x, y); });
}
template <typename T>
JITKERN_DEVICE T min(T a, T b) {
  return detail::via_fp32(a, b, [](float x, float y) { return fminf(x, y); });
}
template <typename T>
JITKERN_DEVICE T abs(T x) {
  return detail::via_fp32(x, [](float v) { return fabsf(v); });
}
template <typename T>
JITKERN_DEVICE T sqrt(T x) {
  return detail::via_fp32(x, [](float v) { return sqrtf(v); });
}
template <typename T>
JITKERN_DEVICE T rsqrt(T x) {
  return detail::via_fp32(x, [](float v) { return rsqrtf(v); });
}
template <typename T>
JITKERN_DEVICE T exp(T x) {
  return detail::via_fp32(x, [](float v) { return expf(v); });
}
template <typename T>
JITKERN_DEVICE T sin(T x) {
  return detail::via_fp32(x, [](float v) { return sinf(v); });
}
template <typename T>
JITKERN_DEVICE T cos(T x) {
  return detail::via_fp32(x, [](float v) { return cosf(v); });
}

}  // namespace device::math
