// <sgl_kernel/math.cuh>: jitkern's device::math, plus the reference's constant names.
#pragma once

#include <sgl_kernel/utils.cuh>

#include <jitkern/math.cuh>

namespace device::math {
inline constexpr float log2e = 1.4426950408889634f;  // log2(e)
inline constexpr float loge2 = 0.6931471805599453f;  // ln(2)
inline constexpr float FP8_E4M3_MAX = kFP8E4M3Max;
}  // namespace device::math
