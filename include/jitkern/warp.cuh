// device::warp: reductions across the lanes of a warp (or of aligned groups of kWidth lanes).
#pragma once

#include <jitkern/utils.cuh>

#include <type_traits>

namespace device {
inline constexpr int kWarpThreads = 32;
}

namespace device::warp {

template <int kWidth = kWarpThreads, typename T>
JITKERN_DEVICE T reduce_sum(T value, unsigned mask = 0xffffffffu) {
  static_assert(kWidth > 0 && kWidth <= kWarpThreads && (kWidth & (kWidth - 1)) == 0, "width must be a power of two <= 32");
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(mask, value, offset, kWidth);
  return value;
}

// float: NaN is left out (fmaxf, one instruction a step), so every lane gets the same result; a
// compare-and-select would keep NaN in some lanes and not in others.
template <int kWidth = kWarpThreads, typename T>
JITKERN_DEVICE T reduce_max(T value, unsigned mask = 0xffffffffu) {
  static_assert(kWidth > 0 && kWidth <= kWarpThreads && (kWidth & (kWidth - 1)) == 0, "width must be a power of two <= 32");
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) {
    const T other = __shfl_xor_sync(mask, value, offset, kWidth);
    if constexpr (std::is_same_v<T, float>) {
      value = fmaxf(value, other);
    } else {
      value = other > value ? other : value;
    }
  }
  return value;
}

// The max of non-negative floats (+inf allowed, no NaN), e.g. an amax: their bit patterns order as
// unsigned integers, so a whole warp reduces with one redux.sync instead of five shuffle steps.
template <int kWidth = kWarpThreads>
JITKERN_DEVICE float reduce_max_nonnegative(float value, unsigned mask = 0xffffffffu) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kWidth == kWarpThreads) return __uint_as_float(__reduce_max_sync(mask, __float_as_uint(value)));
#endif
  return reduce_max<kWidth>(value, mask);
}

}  // namespace device::warp
