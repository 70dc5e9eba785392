// device::cta: reductions and a prefix sum across all threads of a block (blockDim.x a multiple of 32, at
// most 1024). Every thread gets the result. Each call uses its own 32-word shared buffer and two barriers
// (one for the _once forms).
#pragma once

#include <jitkern/warp.cuh>

namespace device::cta {

namespace detail {
// kReusable: a second barrier after reading the buffer, so that the next reduction may overwrite it.
template <bool kReusable, typename T, typename Op>
JITKERN_DEVICE T reduce(T value, Op op, T identity) {
  __shared__ T partial[kWarpThreads];
  const int lane = threadIdx.x % kWarpThreads, warp_id = threadIdx.x / kWarpThreads;
  const int num_warps = (blockDim.x + kWarpThreads - 1) / kWarpThreads;
  value = op(value);
  if (lane == 0) partial[warp_id] = value;
  __syncthreads();
  value = lane < num_warps ? partial[lane] : identity;
  value = op(value);
  if constexpr (kReusable) __syncthreads();
  return value;
}
}  // namespace detail

template <typename T>
JITKERN_DEVICE T reduce_sum(T value) {
  return detail::reduce<true>(value, [](T v) { return warp::reduce_sum(v); }, T(0));
}

// The same, for a CTA's last reduction over this buffer: one barrier instead of two (nothing reuses
// the shared buffer afterwards).
template <typename T>
JITKERN_DEVICE T reduce_sum_once(T value) {
  return detail::reduce<false>(value, [](T v) { return warp::reduce_sum(v); }, T(0));
}

template <typename T>
JITKERN_DEVICE T reduce_max(T value, T lowest) {
  return detail::reduce<true>(value, [](T v) { return warp::reduce_max(v); }, lowest);
}

template <typename T>
JITKERN_DEVICE T reduce_max_once(T value, T lowest) {
  return detail::reduce<false>(value, [](T v) { return warp::reduce_max(v); }, lowest);
}

// The max of non-negative floats (e.g. an amax; see warp::reduce_max_nonnegative), and its _once form.
JITKERN_DEVICE float reduce_max_nonnegative(float value) {
  return detail::reduce<true>(value, [](float v) { return warp::reduce_max_nonnegative(v); }, 0.0f);
}
JITKERN_DEVICE float reduce_max_nonnegative_once(float value) {
  return detail::reduce<false>(value, [](float v) { return warp::reduce_max_nonnegative(v); }, 0.0f);
}

// The exclusive prefix sum of value over the CTA's threads in thread order (every thread gets its own) and
// `total`, the sum over the CTA. Its shared buffer is not protected for reuse: one call per CTA lifetime,
// or a barrier before the next.
template <typename T>
JITKERN_DEVICE T exclusive_sum_once(T value, T& total) {
  __shared__ T warp_sums[kWarpThreads];
  const int lane = threadIdx.x % kWarpThreads, warp_id = threadIdx.x / kWarpThreads;
  const int num_warps = (blockDim.x + kWarpThreads - 1) / kWarpThreads;
  T inclusive = value;
#pragma unroll
  for (int offset = 1; offset < kWarpThreads; offset *= 2) {
    const T o = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += o;
  }
  if (lane == kWarpThreads - 1) warp_sums[warp_id] = inclusive;
  __syncthreads();
  if (warp_id == 0) {
    T s = lane < num_warps ? warp_sums[lane] : T(0);
#pragma unroll
    for (int offset = 1; offset < kWarpThreads; offset *= 2) {
      const T o = __shfl_up_sync(0xffffffffu, s, offset);
      if (lane >= offset) s += o;
    }
    warp_sums[lane] = s;  // inclusive over warps
  }
  __syncthreads();
  total = warp_sums[num_warps - 1];
  return inclusive - value + (warp_id > 0 ? warp_sums[warp_id - 1] : T(0));
}

}  // namespace device::cta
