// <sgl_kernel/impl/norm.cuh>: RMSNorm building blocks in the reference framework's shape. A row of kDim
// elements is normalised by one warp (kDim <= 256) or one CTA (kDim > 256); each thread holds its part
// of the row in a StorageType<T, kDim>, loaded and stored by the caller (thread t holds vector t).
// jitkern's own norm kernels use <jitkern/impl/norm.cuh> (other shapes, register cache and epilogues).
#pragma once

#include <sgl_kernel/cta.cuh>
#include <sgl_kernel/math.cuh>
#include <sgl_kernel/type.cuh>
#include <sgl_kernel/vec.cuh>
#include <sgl_kernel/warp.cuh>

#include <cstdint>

namespace host::norm {

template <typename T, int64_t kDim>
constexpr bool should_use_cta() {
  return kDim > 256;
}
// Threads of the CTA path: one 16-byte vector of the row each.
template <typename T, int64_t kDim>
constexpr int64_t get_cta_threads() {
  return kDim * static_cast<int64_t>(sizeof(T)) / 16;
}
// Warp path: each lane holds 1, 2 or 4 packed pairs; CTA path: whole warps, at most 1024 threads.
template <typename T, int64_t kDim>
constexpr bool is_config_supported() {
  if constexpr (!should_use_cta<T, kDim>()) {
    return kDim == 64 || kDim == 128 || kDim == 256;
  } else {
    constexpr int64_t threads = get_cta_threads<T, kDim>();
    return kDim * static_cast<int64_t>(sizeof(T)) % 16 == 0 && threads % 32 == 0 && threads <= 1024;
  }
}

}  // namespace host::norm

namespace device::norm {

// Floats of shared memory apply_norm_cta needs: one partial sum per warp and the broadcast result.
inline constexpr int kSmemBufferSize = 33;

template <typename T, int64_t kDim>
using StorageType = AlignedVector<packed_t<T>, (::host::norm::should_use_cta<T, kDim>() ? 16 / sizeof(packed_t<T>)
                                                                                      : static_cast<std::size_t>(kDim / 64))>;

namespace detail {
template <typename Storage>
SGL_DEVICE float sum_of_squares(const Storage& x) {
  float sum = 0.0f;
#pragma unroll
  for (std::size_t i = 0; i < sizeof(Storage) / sizeof(x[0]); ++i) {
    const fp32x2_t v = cast<fp32x2_t>(x[i]);
    sum += v.x * v.x + v.y * v.y;
  }
  return sum;
}
template <typename Storage>
SGL_DEVICE Storage scale(const Storage& x, const Storage& weight, float inv_rms) {
  Storage out;
#pragma unroll
  for (std::size_t i = 0; i < sizeof(Storage) / sizeof(x[0]); ++i) {
    const fp32x2_t v = cast<fp32x2_t>(x[i]), w = cast<fp32x2_t>(weight[i]);
    out[i] = cast<std::remove_cv_t<std::remove_reference_t<decltype(x[i])>>>(fp32x2_t{v.x * inv_rms * w.x, v.y * inv_rms * w.y});
  }
  return out;
}
}  // namespace detail

// input * rsqrt(mean(input^2) + eps) * weight for the row a warp holds (every lane calls it).
template <int64_t kDim, typename Storage>
SGL_DEVICE Storage apply_norm_warp(const Storage& input, const Storage& weight, float eps) {
  static_assert(kDim <= 256, "apply_norm_warp: rows of at most 256 elements (use apply_norm_cta)");
  const float sum = warp::reduce_sum(detail::sum_of_squares(input));
  return detail::scale(input, weight, math::rsqrt(sum / kDim + eps));
}

// The same for the row a CTA of `num_warps` warps holds; `smem` holds kSmemBufferSize floats (every
// thread calls it).
template <int64_t kDim, typename Storage>
SGL_DEVICE Storage apply_norm_cta(const Storage& input, const Storage& weight, float eps, float* smem,
                                  uint32_t num_warps = blockDim.x / kWarpThreads) {
  static_assert(kDim > 256, "apply_norm_cta: rows of more than 256 elements (use apply_norm_warp)");
  const unsigned lane = threadIdx.x % kWarpThreads, warp_id = threadIdx.x / kWarpThreads;
  const float partial = warp::reduce_sum(detail::sum_of_squares(input));
  if (lane == 0) smem[warp_id] = partial;
  __syncthreads();
  if (warp_id == 0) {
    const float sum = warp::reduce_sum(lane < num_warps ? smem[lane] : 0.0f);
    if (lane == 0) smem[kSmemBufferSize - 1] = math::rsqrt(sum / kDim + eps);
  }
  __syncthreads();
  return detail::scale(input, weight, smem[kSmemBufferSize - 1]);
}

}  // namespace device::norm
