// <sgl_kernel/cta.cuh>: jitkern's device::cta reductions, plus the reference's reduce_max through a
// caller's shared buffer.
#pragma once

#include <sgl_kernel/warp.cuh>

#include <jitkern/cta.cuh>

namespace device::cta {
// The block-wide max of `value` (blockDim.x a multiple of 32) left in smem[0], which must hold
// kWarpThreads floats; synchronise before reading it. `min_value` stands in for absent warps.
template <typename T>
SGL_DEVICE void reduce_max(T value, float* smem, float min_value = 0.0f) {
  const unsigned lane = threadIdx.x % kWarpThreads, warp_id = threadIdx.x / kWarpThreads;
  const float local = warp::reduce_max(static_cast<float>(value));
  if (lane == 0) smem[warp_id] = local;
  __syncthreads();
  if (warp_id == 0) {
    const float total = warp::reduce_max(lane < blockDim.x / kWarpThreads ? smem[lane] : min_value);
    if (lane == 0) smem[0] = total;
  }
}
}  // namespace device::cta
