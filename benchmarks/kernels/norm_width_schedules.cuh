// Layouts of the plain and Gemma norms' wide rows side by side (bench_norm.py `widths`), bf16: the kernel built
// for the width (norm_static_kernel) at kRegVecs vectors a thread, at any row count; and, for rows of 3584 (448
// vectors, held exactly at two vectors a thread of 224), forms with the product's sums in the product's order (its
// bits): that kernel under launch bounds, kRows rows a CTA, and a persistent grid loading the next row ahead; the
// product's folded kernel at 2560. E: bf16_t (rmsnorm) or the Gemma-tagged bf16 (gemma_rmsnorm).
#pragma once

#include <norm_variants.cuh>
#ifndef __CUDACC_RTC__
#include <jitkern/runtime.cuh>

#include <algorithm>
#endif

namespace bench_norm_widths {

using namespace device::norm;

// norm_static_kernel<T, kHidden, 2> (two vectors a thread, held exactly) under __launch_bounds__(its threads, kMinBlocks).
template <typename T, int kHidden, int kMinBlocks>
__global__ void __launch_bounds__(kNormStaticThreads<T, kHidden, 2>, kMinBlocks) bounded_static_kernel(const __grid_constant__ StaticRows<T> p) {
#ifdef __CUDACC__
  constexpr int kVec = device::kVec16<T>, kThreads = kNormStaticThreads<T, kHidden, 2>;
  static_assert(kHidden / kVec == 2 * kThreads, "rows held exactly");
  const int64_t row = blockIdx.x;
  const typename StoreOutput<T>::template Row<T, kVec> epi{p.out + row * p.out_stride};
  device::pdl_wait_primary();
  rmsnorm_row<T, kVec, 2, false, RowFit::kExact>(epi, p.in + row * p.in_stride, nullptr, p.weight, kHidden, p.eps, FixedCtaGroup<kThreads>{});
  device::pdl_trigger_secondary();
#endif
}

// FixedCtaGroup<kThreads>::reduce_sum of kRows values at once (the same additions in the same order), one barrier.
template <int kThreads, int kRows>
JITKERN_DEVICE void reduce_sums(float (&v)[kRows], float (*partial)[kThreads / device::kWarpThreads]) {
  constexpr int kWarps = kThreads / device::kWarpThreads;
#pragma unroll
  for (int i = 0; i < kRows; ++i) v[i] = device::warp::reduce_sum(v[i]);
  if (threadIdx.x % device::kWarpThreads == 0)
#pragma unroll
    for (int i = 0; i < kRows; ++i) partial[i][threadIdx.x / device::kWarpThreads] = v[i];
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kRows; ++i) v[i] = add_warp_partials<kWarps>(partial[i]);
}

// kRows rows a CTA of norm_static_kernel<T, kHidden, 2>'s threads, each thread holding its two vectors of every row
// (the same sums and products, so the same bits): the rows' loads issued together, the weights loaded once, one
// barrier. Rows past the last: the last row again (its bits stored twice). kMinBlocks: __launch_bounds__'s CTAs an SM.
template <typename T, int kHidden, int kRows, int kMinBlocks = 0>
__global__ void __launch_bounds__(kNormStaticThreads<T, kHidden, 2>, kMinBlocks) rows_static_kernel(const __grid_constant__ StaticRows<T> p, int32_t rows) {
#ifdef __CUDACC__
  constexpr int kVec = device::kVec16<T>, kThreads = kNormStaticThreads<T, kHidden, 2>;
  static_assert(kHidden / kVec == 2 * kThreads, "rows held exactly");
  using Vec = device::AlignedVector<T, kVec>;
  using M = VecMath<T, kVec>;
  int64_t row[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) row[i] = min(static_cast<int32_t>(blockIdx.x) * kRows + i, rows - 1);
  const int t = static_cast<int>(threadIdx.x);
  const float inv_hidden = 1.0f / static_cast<float>(kHidden);
  device::pdl_wait_primary();
  Vec xs[kRows][2], ws[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) xs[i][r].load_global(p.in + row[i] * p.in_stride + (r * kThreads + t) * kVec);
    ws[r].load_global(p.weight + (r * kThreads + t) * kVec);
  }
  float sumsq[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    sumsq[i] = 0.0f;
#pragma unroll
    for (int r = 0; r < 2; ++r) sumsq[i] += M::sum_squares(xs[i][r]);
  }
  __shared__ float partial[kRows][kThreads / device::kWarpThreads];
  reduce_sums<kThreads, kRows>(sumsq, partial);
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const float scale = rsqrtf(sumsq[i] * inv_hidden + p.eps);
#pragma unroll
    for (int r = 0; r < 2; ++r) M::normalized(xs[i][r], ws[r], scale).store_global(p.out + row[i] * p.out_stride + (r * kThreads + t) * kVec);
  }
  device::pdl_trigger_secondary();
#endif
}

// Rows blockIdx.x, + gridDim.x, ... of norm_static_kernel<T, kHidden, 2>'s threads, the next row's loads issued before
// this row's reduction (two rows' vectors in registers), the weights loaded once; each row's sums and products as
// there (the same bits). kMinBlocks: __launch_bounds__'s CTAs an SM.
template <typename T, int kHidden, int kMinBlocks = 0>
__global__ void __launch_bounds__(kNormStaticThreads<T, kHidden, 2>, kMinBlocks) stream_static_kernel(const __grid_constant__ StaticRows<T> p, int32_t rows) {
#ifdef __CUDACC__
  constexpr int kVec = device::kVec16<T>, kThreads = kNormStaticThreads<T, kHidden, 2>;
  static_assert(kHidden / kVec == 2 * kThreads, "rows held exactly");
  using Vec = device::AlignedVector<T, kVec>;
  using M = VecMath<T, kVec>;
  const int t = static_cast<int>(threadIdx.x), step = static_cast<int>(gridDim.x);
  const float inv_hidden = 1.0f / static_cast<float>(kHidden);
  __shared__ float partial[2][1][kThreads / device::kWarpThreads];  // by the row's parity
  device::pdl_wait_primary();
  Vec xs[2], ws[2], next[2];
  int row = static_cast<int>(blockIdx.x);
#pragma unroll
  for (int r = 0; r < 2; ++r) xs[r].load_global(p.in + int64_t{row} * p.in_stride + (r * kThreads + t) * kVec);
#pragma unroll
  for (int r = 0; r < 2; ++r) ws[r].load_global(p.weight + (r * kThreads + t) * kVec);
  for (int k = 0; row < rows; ++k, row += step) {
    const int following = row + step < rows ? row + step : row;
#pragma unroll
    for (int r = 0; r < 2; ++r) next[r].load_global(p.in + int64_t{following} * p.in_stride + (r * kThreads + t) * kVec);
    float sumsq[1] = {0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) sumsq[0] += M::sum_squares(xs[r]);
    reduce_sums<kThreads, 1>(sumsq, partial[k & 1]);
    const float scale = rsqrtf(sumsq[0] * inv_hidden + p.eps);
#pragma unroll
    for (int r = 0; r < 2; ++r) M::normalized(xs[r], ws[r], scale).store_global(p.out + int64_t{row} * p.out_stride + (r * kThreads + t) * kVec);
#pragma unroll
    for (int r = 0; r < 2; ++r) xs[r] = next[r];
  }
  device::pdl_trigger_secondary();
#endif
}

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
using Gemma = jitkern_norm_variants::Tagged<bf16_t, jitkern_norm_variants::Rule::kGemma>;
constexpr int kWidths[] = {1536, 2560, 3584, 4096};

template <typename E, int kRegVecs>
void static_rows(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output, double eps) {
  using namespace device::norm;
  const host::norm::TokenRows<E> rows(input, weight, &output, nullptr, eps);
  const NormParams<E>& p = rows.params;
  const RowProblem<E>& q = p.problem[0];
  const StaticRows<E> s{q.out, q.in, q.weight, q.out_token, q.in_token, p.eps, rows.tokens <= kNormStaticEarlyTriggerMaxRows};
  bool launched = false;
  const auto one = [&](auto width) {
    constexpr int kWidth = decltype(width)::value;
    if (p.hidden != kWidth) return;
    host::LaunchKernel(static_cast<unsigned>(rows.tokens), kNormStaticThreads<E, kWidth, kRegVecs>, rows.device)
        .enable_pdl()(norm_static_kernel<E, kWidth, kRegVecs>, s);
    launched = true;
  };
  one(std::integral_constant<int, kWidths[0]>{}), one(std::integral_constant<int, kWidths[1]>{});
  one(std::integral_constant<int, kWidths[2]>{}), one(std::integral_constant<int, kWidths[3]>{});
  host::RuntimeCheck(launched, "width ", p.hidden, " is not built here");
}

// The rows of a [*, 3584] input (held exactly at two vectors a thread of 224) given to launch(s, rows, device).
template <typename E, typename Launch>
void rows_3584(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output, double eps, const Launch& launch) {
  const host::norm::TokenRows<E> rows(input, weight, &output, nullptr, eps);
  const NormParams<E>& p = rows.params;
  const RowProblem<E>& q = p.problem[0];
  host::RuntimeCheck(p.hidden == 3584 && rows.tokens < (int64_t{1} << 31), "rows of 3584 only, got ", p.hidden);
  if (rows.tokens > 0) launch(StaticRows<E>{q.out, q.in, q.weight, q.out_token, q.in_token, p.eps, false}, static_cast<int32_t>(rows.tokens), rows.device);
}

// bounded_static_kernel<E, 3584, kMinBlocks>.
template <typename E, int kMinBlocks>
void bounded_rows(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output, double eps) {
  rows_3584<E>(input, weight, output, eps, [](const StaticRows<E>& s, int32_t n, DLDevice device) {
    host::LaunchKernel(static_cast<unsigned>(n), kNormStaticThreads<E, 3584, 2>, device).enable_pdl()(bounded_static_kernel<E, 3584, kMinBlocks>, s);
  });
}

// rows_static_kernel<E, 3584, kRows, kMinBlocks>.
template <typename E, int kRows, int kMinBlocks>
void paired_rows(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output, double eps) {
  rows_3584<E>(input, weight, output, eps, [](const StaticRows<E>& s, int32_t n, DLDevice device) {
    host::LaunchKernel(static_cast<unsigned>((n + kRows - 1) / kRows), kNormStaticThreads<E, 3584, 2>, device)
        .enable_pdl()(rows_static_kernel<E, 3584, kRows, kMinBlocks>, s, n);
  });
}

// The product's norm_folded_kernel<E, H>, rows of H = 3584 or 2560 (the product folds 3584 only).
template <typename E>
void folded_rows(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output, double eps) {
  const host::norm::TokenRows<E> rows(input, weight, &output, nullptr, eps);
  const NormParams<E>& p = rows.params;
  const RowProblem<E>& q = p.problem[0];
  const StaticRows<E> s{q.out, q.in, q.weight, q.out_token, q.in_token, p.eps, false};
  const auto one = [&](auto width) {
    constexpr int kWidth = decltype(width)::value;
    host::LaunchKernel(static_cast<unsigned>(rows.tokens), kNormFoldedThreads<E, kWidth>, rows.device).enable_pdl()(norm_folded_kernel<E, kWidth>, s);
  };
  host::RuntimeCheck(p.hidden == 3584 || p.hidden == 2560, "rows of 3584 or 2560 only, got ", p.hidden);
  if (rows.tokens == 0) return;
  if (p.hidden == 3584) one(std::integral_constant<int, 3584>{});
  else one(std::integral_constant<int, 2560>{});
}

// stream_static_kernel<E, 3584, kMinBlocks>, as many CTAs as the SMs hold (at most one a row).
template <typename E, int kMinBlocks>
void streamed_rows(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output, double eps) {
  rows_3584<E>(input, weight, output, eps, [](const StaticRows<E>& s, int32_t n, DLDevice device) {
    constexpr auto kKernel = stream_static_kernel<E, 3584, kMinBlocks>;
    static const int per_sm = host::runtime::get_blocks_per_sm(kKernel, kNormStaticThreads<E, 3584, 2>);
    const int64_t ctas = std::min<int64_t>(n, int64_t{per_sm} * host::runtime::get_sm_count(device.device_id));
    host::LaunchKernel(static_cast<unsigned>(ctas), kNormStaticThreads<E, 3584, 2>, device).enable_pdl()(kKernel, s, n);
  });
}

#endif  // __CUDACC_RTC__

}  // namespace bench_norm_widths
