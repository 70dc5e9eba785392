// device::warp: reductions across the lanes of a warp (or of aligned groups of kWidth lanes).
#pragma once

#include <jitkern/utils.cuh>

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

template <int kWidth = kWarpThreads, typename T>
JITKERN_DEVICE T reduce_max(T value, unsigned mask = 0xffffffffu) {
  static_assert(kWidth > 0 && kWidth <= kWarpThreads && (kWidth & (kWidth - 1)) == 0, "width must be a power of two <= 32");
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) {
    const T other = __shfl_xor_sync(mask, value, offset, kWidth);
    value = other > value ? other : value;
  }
  return value;
}

}  // namespace device::warp
