// <sgl_kernel/utils.cuh> for kernels written against the reference framework: jitkern's LaunchKernel and
// RuntimeDeviceCheck, the element type aliases, and the reference's device-side names.
#pragma once

#include <sgl_kernel/utils.h>

#include <jitkern/type.cuh>
#include <jitkern/utils.cuh>
#include <jitkern/warp.cuh>

#include <cstdint>
#include <type_traits>

#define SGL_DEVICE JITKERN_DEVICE
#define SGLANG_LDG(p) __ldg(p)

using fp32x4_t = float4;

namespace device {

inline constexpr unsigned kFullMask = 0xffffffffu;

// The reference's PDL helpers: the instruction when kUsePDL (sm_90+), nothing otherwise.
template <bool kUsePDL>
SGL_DEVICE void PDLWaitPrimary() {
  if constexpr (kUsePDL) pdl_wait_primary();
}
template <bool kUsePDL>
SGL_DEVICE void PDLTriggerSecondary() {
  if constexpr (kUsePDL) pdl_trigger_secondary();
}

namespace pointer {
// `ptr` advanced by the sum of `n` elements of T (bytes by default), constness kept. Device-side,
// unlike host::pointer::offset, which takes byte counts only.
template <typename T = char, typename... U>
SGL_DEVICE void* offset(void* ptr, U... n) {
  static_assert((std::is_integral_v<U> && ...), "pointer::offset takes integral element counts");
  return static_cast<T*>(ptr) + (std::int64_t{0} + ... + static_cast<std::int64_t>(n));
}
template <typename T = char, typename... U>
SGL_DEVICE const void* offset(const void* ptr, U... n) {
  static_assert((std::is_integral_v<U> && ...), "pointer::offset takes integral element counts");
  return static_cast<const T*>(ptr) + (std::int64_t{0} + ... + static_cast<std::int64_t>(n));
}
}  // namespace pointer

}  // namespace device
