// The RMSNorm family: rmsnorm, fused_add_rmsnorm, per-head QK-norm and QK-norm across heads, for
// fp16/bf16/fp32 (fp32 accumulation), any hidden size, strided rows, in place or not.
//
// Every op is one or two "row problems" (a set of rows, each normalised over `hidden` elements with
// one weight vector). Narrow rows (<= 32 * kRegVecs vectors) take one warp each; wider rows take one
// CTA each. 16-byte vectors are used whenever every pointer and stride allows.
#pragma once

#include <jitkern/impl/norm.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/type.cuh>
#include <jitkern/utils.cuh>

#include <bit>
#include <cmath>
#include <cstdint>

namespace {

constexpr int kNormRegVecs = 4;     // warp path: vectors per thread kept in registers
constexpr int kNormCtaRegVecs = 2;  // CTA path: fewer, for occupancy (the limit on wide rows)
constexpr int kNormWarpsPerCta = 8;  // warp path: warps per CTA
// Wide-row CTAs stay small enough that the register cache does not spill; rows wider than
// kNormCtaThreads * kNormRegVecs vectors re-read their remainder (from L2) after the reduction.
constexpr int kNormCtaThreads = 256;

// Row r of a problem lives at (r / inner_count) * *_outer + (r % inner_count) * *_inner elements.
template <typename T>
struct RowProblem {
  T* out;
  const T* in;
  T* residual;  // fused_add_rmsnorm only
  const T* weight;
  int64_t rows, inner_count;
  int64_t out_outer, out_inner, in_outer, in_inner, res_outer, res_inner;
};

template <typename T>
struct NormParams {
  RowProblem<T> problem[2];
  int64_t rows0;  // rows of problem[0]; the rest belong to problem[1]
  int64_t total_rows;
  int64_t hidden;
  float eps;
};

template <typename T, int kVec, int kRegVecs, bool kFusedAdd, typename Group>
__device__ __forceinline__ void norm_one_row(const NormParams<T>& p, int64_t row, Group g) {
  const bool second = row >= p.rows0;
  const RowProblem<T>& q = p.problem[second ? 1 : 0];
  if (second) row -= p.rows0;
  const int64_t o = row / q.inner_count, i = row % q.inner_count;
  T* residual = kFusedAdd ? q.residual + o * q.res_outer + i * q.res_inner : nullptr;
  device::norm::rmsnorm_row<T, kVec, kRegVecs, kFusedAdd>(q.out + o * q.out_outer + i * q.out_inner,
                                                               q.in + o * q.in_outer + i * q.in_inner, residual, q.weight,
                                                               p.hidden, p.eps, g);
}

// Narrow rows: kWidth lanes per row, 32 / kWidth rows per warp at a time.
template <typename T, int kVec, int kWidth, int kRegVecs, bool kFusedAdd>
__global__ void __launch_bounds__(kNormWarpsPerCta * 32, 2) norm_warp_kernel(const __grid_constant__ NormParams<T> p) {
  constexpr int kRowsPerCta = kNormWarpsPerCta * 32 / kWidth;
  device::pdl_wait_primary();
  const int64_t stride = int64_t{gridDim.x} * kRowsPerCta;
  for (int64_t row = int64_t{blockIdx.x} * kRowsPerCta + threadIdx.x / kWidth; row < p.total_rows; row += stride)
    norm_one_row<T, kVec, kRegVecs, kFusedAdd>(p, row, device::norm::WarpGroup<kWidth>{});
  device::pdl_trigger_secondary();
}

// Wide rows: one CTA (of at most kNormCtaThreads threads) per row.
template <typename T, int kVec, bool kFusedAdd>
__global__ void __launch_bounds__(kNormCtaThreads, 4) norm_cta_kernel(const __grid_constant__ NormParams<T> p) {
  device::pdl_wait_primary();
  for (int64_t row = blockIdx.x; row < p.total_rows; row += gridDim.x)
    norm_one_row<T, kVec, kNormCtaRegVecs, kFusedAdd>(p, row, device::norm::CtaGroup{});
  device::pdl_trigger_secondary();
}

template <typename T, int kVec, int kWidth, int kRegVecs, bool kFusedAdd>
void launch_norm_warp(const NormParams<T>& p, DLDevice device, int sm_count, bool pdl) {
  constexpr int kRowsPerCta = kNormWarpsPerCta * 32 / kWidth;
  const int64_t max_grid = int64_t{sm_count} * (2048 / (kNormWarpsPerCta * 32));
  const int64_t grid = std::min(host::div_ceil(p.total_rows, kRowsPerCta), max_grid);
  host::LaunchKernel(static_cast<unsigned>(grid), kNormWarpsPerCta * 32, device)
      .enable_pdl(pdl)(norm_warp_kernel<T, kVec, kWidth, kRegVecs, kFusedAdd>, p);
}

template <typename T, int kVec, bool kFusedAdd>
void launch_norm_vec(const NormParams<T>& p, DLDevice device) {
  using namespace host;
  const int sm_count = runtime::get_sm_count(device.device_id);
  const bool pdl = runtime::get_cc_major(device.device_id) >= 9;
  const int64_t nvec = p.hidden / kVec;
  if (nvec <= 32 * kNormRegVecs) {
    if constexpr (kVec == 1) {
      launch_norm_warp<T, 1, 32, kNormRegVecs, kFusedAdd>(p, device, sm_count, pdl);
    } else {
      // The fewest lanes per row that keep each lane at <= kNormRegVecs vectors, widened while the
      // grid would leave SMs idle (each lane then holds fewer vectors).
      int64_t width = std::max<int64_t>(4, std::min<int64_t>(32, std::bit_ceil(static_cast<uint64_t>(div_ceil(nvec, kNormRegVecs)))));
      while (width < 32 && div_ceil(p.total_rows, kNormWarpsPerCta * 32 / width) < 2 * int64_t{sm_count}) width *= 2;
      if (width == 4) {
        launch_norm_warp<T, kVec, 4, kNormRegVecs, kFusedAdd>(p, device, sm_count, pdl);
      } else if (width == 8) {
        launch_norm_warp<T, kVec, 8, kNormRegVecs, kFusedAdd>(p, device, sm_count, pdl);
      } else if (width == 16) {
        launch_norm_warp<T, kVec, 16, kNormRegVecs, kFusedAdd>(p, device, sm_count, pdl);
      } else {
        launch_norm_warp<T, kVec, 32, kNormRegVecs, kFusedAdd>(p, device, sm_count, pdl);
      }
    }
  } else {
    const int threads = static_cast<int>(std::min<int64_t>(kNormCtaThreads, div_ceil(div_ceil(nvec, kNormCtaRegVecs), 32) * 32));
    const int64_t grid = std::min(p.total_rows, int64_t{sm_count} * (2048 / threads));
    LaunchKernel(static_cast<unsigned>(grid), threads, device).enable_pdl(pdl)(norm_cta_kernel<T, kVec, kFusedAdd>, p);
  }
}

template <typename T, bool kFusedAdd>
void launch_norm(NormParams<T> p, int num_problems, DLDevice device) {
  if (num_problems == 1) p.problem[1] = p.problem[0];
  p.rows0 = p.problem[0].rows;
  p.total_rows = p.problem[0].rows + (num_problems == 2 ? p.problem[1].rows : 0);
  if (p.total_rows == 0 || p.hidden == 0) return;
  int vec = 16 / sizeof(T);
  for (int k = 0; k < num_problems; ++k) {
    const RowProblem<T>& q = p.problem[k];
    vec = std::min(vec, host::norm::vector_width<T>(p.hidden, {q.out, q.in, q.residual, q.weight},
                                                    {q.out_outer, q.out_inner, q.in_outer, q.in_inner, q.res_outer, q.res_inner}));
  }
  if (vec == 16 / static_cast<int>(sizeof(T))) {
    launch_norm_vec<T, 16 / sizeof(T), kFusedAdd>(p, device);
  } else {
    launch_norm_vec<T, 1, kFusedAdd>(p, device);
  }
}

inline float checked_eps(double eps) {
  host::RuntimeCheck(std::isfinite(eps) && eps >= 0.0, "eps must be a finite non-negative number, got ", eps);
  return static_cast<float>(eps);
}

template <typename T>
struct NormOps {
  // output[t, :] = rmsnorm(input[t, :]) * weight; rows may be strided; output may be input.
  static void rmsnorm(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output, double eps) {
    using namespace host;
    auto N = SymbolicSize{"num_tokens"};
    auto H = SymbolicSize{"hidden_size"};
    auto in_stride = SymbolicSize{"input_row_stride"};
    auto out_stride = SymbolicSize{"output_row_stride"};
    auto device = SymbolicDevice{};
    TensorMatcher({N, H}).with_strides({in_stride, 1}).template with_dtype<T>().template with_device<kDLCUDA>(device).verify(input);
    TensorMatcher({N, H}).with_strides({out_stride, 1}).template with_dtype<T>().template with_device<kDLCUDA>(device).verify(output);
    TensorMatcher({H}).template with_dtype<T>().template with_device<kDLCUDA>(device).verify(weight);
    check_rows(N, H, in_stride, "input");
    check_rows(N, H, out_stride, "output");
    NormParams<T> p{};
    p.hidden = H.unwrap();
    p.eps = checked_eps(eps);
    p.problem[0] = {static_cast<T*>(output.data_ptr()), static_cast<const T*>(input.data_ptr()), nullptr,
                    static_cast<const T*>(weight.data_ptr()), N.unwrap(), 1, 0, stride_of(out_stride), 0, stride_of(in_stride), 0, 0};
    p.problem[0].inner_count = std::max<int64_t>(N.unwrap(), 1);
    launch_norm<T, false>(p, 1, device.unwrap());
  }

  // residual += input; input = rmsnorm(residual) * weight (both in place).
  static void fused_add_rmsnorm(jitkern::TensorView input, jitkern::TensorView residual, jitkern::TensorView weight, double eps) {
    using namespace host;
    auto N = SymbolicSize{"num_tokens"};
    auto H = SymbolicSize{"hidden_size"};
    auto in_stride = SymbolicSize{"input_row_stride"};
    auto res_stride = SymbolicSize{"residual_row_stride"};
    auto device = SymbolicDevice{};
    TensorMatcher({N, H}).with_strides({in_stride, 1}).template with_dtype<T>().template with_device<kDLCUDA>(device).verify(input);
    TensorMatcher({N, H}).with_strides({res_stride, 1}).template with_dtype<T>().template with_device<kDLCUDA>(device).verify(residual);
    TensorMatcher({H}).template with_dtype<T>().template with_device<kDLCUDA>(device).verify(weight);
    check_rows(N, H, in_stride, "input");
    check_rows(N, H, res_stride, "residual");
    NormParams<T> p{};
    p.hidden = H.unwrap();
    p.eps = checked_eps(eps);
    auto* in = static_cast<T*>(input.data_ptr());
    p.problem[0] = {in, in, static_cast<T*>(residual.data_ptr()), static_cast<const T*>(weight.data_ptr()), N.unwrap(), 1,
                    0, stride_of(in_stride), 0, stride_of(in_stride), 0, stride_of(res_stride)};
    p.problem[0].inner_count = std::max<int64_t>(N.unwrap(), 1);
    launch_norm<T, true>(p, 1, device.unwrap());
  }

  // q [N, Hq, D], k [N, Hk, D]: every head normalised over D, in place.
  static void qknorm(jitkern::TensorView q, jitkern::TensorView k, jitkern::TensorView q_weight, jitkern::TensorView k_weight,
                     double eps) {
    using namespace host;
    auto N = SymbolicSize{"num_tokens"};
    auto Hq = SymbolicSize{"num_q_heads"};
    auto Hk = SymbolicSize{"num_k_heads"};
    auto D = SymbolicSize{"head_dim"};
    auto q_token = SymbolicSize{"q_token_stride"}, q_head = SymbolicSize{"q_head_stride"};
    auto k_token = SymbolicSize{"k_token_stride"}, k_head = SymbolicSize{"k_head_stride"};
    auto device = SymbolicDevice{};
    TensorMatcher({N, Hq, D}).with_strides({q_token, q_head, 1}).template with_dtype<T>().template with_device<kDLCUDA>(device).verify(q);
    TensorMatcher({N, Hk, D}).with_strides({k_token, k_head, 1}).template with_dtype<T>().template with_device<kDLCUDA>(device).verify(k);
    TensorMatcher({D}).template with_dtype<T>().template with_device<kDLCUDA>(device).verify(q_weight).verify(k_weight);
    NormParams<T> p{};
    p.hidden = D.unwrap();
    p.eps = checked_eps(eps);
    p.problem[0] = heads_problem(q, q_weight, N.unwrap(), Hq.unwrap(), stride_of(q_token), stride_of(q_head));
    p.problem[1] = heads_problem(k, k_weight, N.unwrap(), Hk.unwrap(), stride_of(k_token), stride_of(k_head));
    launch_norm<T, false>(p, 2, device.unwrap());
  }

  // q [N, Wq], k [N, Wk]: every row normalised over its whole width, in place.
  static void qknorm_across_heads(jitkern::TensorView q, jitkern::TensorView k, jitkern::TensorView q_weight,
                                  jitkern::TensorView k_weight, double eps) {
    using namespace host;
    auto N = SymbolicSize{"num_tokens"};
    auto Wq = SymbolicSize{"q_width"}, Wk = SymbolicSize{"k_width"};
    auto q_stride = SymbolicSize{"q_row_stride"}, k_stride = SymbolicSize{"k_row_stride"};
    auto device = SymbolicDevice{};
    TensorMatcher({N, Wq}).with_strides({q_stride, 1}).template with_dtype<T>().template with_device<kDLCUDA>(device).verify(q);
    TensorMatcher({N, Wk}).with_strides({k_stride, 1}).template with_dtype<T>().template with_device<kDLCUDA>(device).verify(k);
    TensorMatcher({Wq}).template with_dtype<T>().template with_device<kDLCUDA>(device).verify(q_weight);
    TensorMatcher({Wk}).template with_dtype<T>().template with_device<kDLCUDA>(device).verify(k_weight);
    check_rows(N, Wq, q_stride, "q");
    check_rows(N, Wk, k_stride, "k");
    const float e = checked_eps(eps);
    const RowProblem<T> pq = heads_problem(q, q_weight, N.unwrap(), 1, stride_of(q_stride), 0);
    const RowProblem<T> pk = heads_problem(k, k_weight, N.unwrap(), 1, stride_of(k_stride), 0);
    NormParams<T> p{};
    p.eps = e;
    if (Wq.unwrap() == Wk.unwrap()) {  // one launch for both
      p.hidden = Wq.unwrap();
      p.problem[0] = pq, p.problem[1] = pk;
      launch_norm<T, false>(p, 2, device.unwrap());
    } else {
      p.hidden = Wq.unwrap();
      p.problem[0] = pq;
      launch_norm<T, false>(p, 1, device.unwrap());
      p.hidden = Wk.unwrap();
      p.problem[0] = pk;
      launch_norm<T, false>(p, 1, device.unwrap());
    }
  }

 private:
  // A size-1 dimension leaves its stride symbol unresolved when nothing else fixes it.
  static int64_t stride_of(const host::SymbolicSize& s) { return s.has_value() ? s.unwrap() : 0; }

  static void check_rows(const host::SymbolicSize& rows, const host::SymbolicSize& width, const host::SymbolicSize& stride,
                         const char* name) {
    if (rows.unwrap() > 1)
      host::RuntimeCheck(stride.unwrap() >= width.unwrap(), name, " rows overlap: row stride ", stride.unwrap(),
                         " is smaller than the row width ", width.unwrap());
  }

  static RowProblem<T> heads_problem(jitkern::TensorView t, jitkern::TensorView w, int64_t tokens, int64_t heads,
                                     int64_t token_stride, int64_t head_stride) {
    if (tokens > 1 && heads > 1)
      host::RuntimeCheck(token_stride != 0 && head_stride != 0, "heads and tokens must not overlap");
    auto* ptr = static_cast<T*>(t.data_ptr());
    return {ptr, ptr, nullptr, static_cast<const T*>(w.data_ptr()), tokens * heads, std::max<int64_t>(heads, 1),
            token_stride, head_stride, token_stride, head_stride, 0, 0};
  }
};

}  // namespace
