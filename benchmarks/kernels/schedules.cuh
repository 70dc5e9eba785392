// Launch schedules of the norm and group-quantization kernels side by side (bench_schedules.py): the
// product's building blocks (rmsnorm_row, rmsnorm_narrow_rows, quantize_group) under other CTA shapes
// and PDL trigger placements, to find which schedule a shape wants before the launch rules change.
//   trigger: 0 at kernel start, 1 right after the PDL wait, 2 after the last store.
#pragma once

#include <jitkern/impl/norm_launch.cuh>
#include <jitkern/impl/quant.cuh>
#include <jitkern/runtime.cuh>
#ifndef __CUDACC_RTC__
#include <jitkern/tensor.h>
#endif
#include <jitkern/utils.cuh>
#include <jitkern/utils.h>

#include <algorithm>
#include <cstdint>

// A named namespace: a host_without_nvcc module launches its kernels by their symbols, which an anonymous
// namespace would keep out of its device image.
namespace bench_schedules {

using namespace device::norm;
using bf16 = bf16_t;
constexpr int kV = 8;  // bf16 elements of a 16-byte vector

template <int kTrigger>
__device__ __forceinline__ void wait_and_trigger() {
  if constexpr (kTrigger == 0) device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  if constexpr (kTrigger == 1) device::pdl_trigger_secondary();
}

// One row per CTA, kRegVecs vectors a thread, the row held exactly.
template <int kRegVecs, int kTrigger, RowOrder kOrder>
__global__ void __launch_bounds__(1024) wide_schedule_kernel(const __grid_constant__ NormParams<bf16> p) {
#ifdef __CUDACC__
  const RowPointers<bf16> row = locate_row<bf16, kOrder>(p, static_cast<int32_t>(blockIdx.x));
  const auto epi = StoreOutput<bf16>{}.template row<bf16, kV>(row, blockIdx.x);
  wait_and_trigger<kTrigger>();
  rmsnorm_row<bf16, kV, kRegVecs, false, RowFit::kExact>(epi, row.in, nullptr, row.weight, p.hidden, p.eps, CtaGroup<true>{});
  if constexpr (kTrigger == 2) device::pdl_trigger_secondary();
#endif
}

// The same with the row's pointers as the only parameters (the reference's parameter block is 48 bytes,
// NormParams over 200).
template <int kRegVecs, int kTrigger>
__global__ void __launch_bounds__(1024) slim_schedule_kernel(const bf16* in, const bf16* weight, bf16* out, int64_t hidden, float eps) {
#ifdef __CUDACC__
  const int64_t row = blockIdx.x;
  const auto epi = StoreOutput<bf16>{}.template row<bf16, kV>(RowPointers<bf16>{out + row * hidden, nullptr, nullptr, nullptr}, blockIdx.x);
  wait_and_trigger<kTrigger>();
  rmsnorm_row<bf16, kV, kRegVecs, false, RowFit::kExact>(epi, in + row * hidden, nullptr, weight, hidden, eps, CtaGroup<true>{});
  if constexpr (kTrigger == 2) device::pdl_trigger_secondary();
#endif
}

#ifndef __CUDACC_RTC__
// rmsnorm of x [N, H] (bf16, contiguous, H a multiple of 256 * reg_vecs... held exactly) into out.
void rmsnorm_schedule(jitkern::TensorView x, jitkern::TensorView w, jitkern::TensorView out, int64_t reg_vecs, int64_t trigger,
                      int64_t token_rows) {
  using namespace host;
  const host::norm::TokenRows<bf16> rows(x, w, &out, nullptr, 1e-6);
  NormParams<bf16> p = rows.params;
  p.problem[1] = p.problem[0], p.problem[1].heads = 0;
  p.rows0 = p.total_rows = static_cast<int32_t>(rows.tokens);
  p.heads_per_token = 1;
  const int64_t nvec = p.hidden / kV;
  RuntimeCheck(nvec % (32 * reg_vecs) == 0 && nvec / reg_vecs <= 1024, "rmsnorm_schedule: the row must fill whole warps exactly");
  LaunchKernel launch(static_cast<unsigned>(rows.tokens), static_cast<unsigned>(nvec / reg_vecs), rows.device);
  launch.enable_pdl();
  const auto by_order = [&](auto r, auto t) {
    constexpr int kR = decltype(r)::value, kT = decltype(t)::value;
    if (token_rows == 2) {  // contiguous rows, the slim kernel
      launch(slim_schedule_kernel<kR, kT>, static_cast<const bf16*>(x.data_ptr()), static_cast<const bf16*>(w.data_ptr()),
             static_cast<bf16*>(out.data_ptr()), p.hidden, p.eps);
    } else if (token_rows) {
      launch(wide_schedule_kernel<kR, kT, RowOrder::kTokenRows>, p);
    } else {
      launch(wide_schedule_kernel<kR, kT, RowOrder::kProblemMajor>, p);
    }
  };
  const auto by_trigger = [&](auto r) {
    if (trigger == 0) by_order(r, std::integral_constant<int, 0>{});
    if (trigger == 1) by_order(r, std::integral_constant<int, 1>{});
    if (trigger == 2) by_order(r, std::integral_constant<int, 2>{});
  };
  if (reg_vecs == 1) by_trigger(std::integral_constant<int, 1>{});
  if (reg_vecs == 2) by_trigger(std::integral_constant<int, 2>{});
  if (reg_vecs == 4) by_trigger(std::integral_constant<int, 4>{});
}
#endif  // __CUDACC_RTC__

// Narrow rows of 16 vectors (head_dim 128), a 16-lane group taking kRows rows a batch; persistent: the
// CTAs loop over the batches (grid-stride), else one batch a CTA.
template <int kRows, int kTrigger, bool kPersistent>
__global__ void __launch_bounds__(256) narrow_schedule_kernel(const __grid_constant__ NormParams<bf16> p) {
#ifdef __CUDACC__
  constexpr int kWidth = 16;
  const int groups = static_cast<int>(blockDim.x) / kWidth;
  wait_and_trigger<kTrigger>();
  const int64_t batches = (int64_t{p.total_rows} + groups * kRows - 1) / (groups * kRows);
  for (int64_t b = blockIdx.x; b < batches; b += kPersistent ? gridDim.x : batches) {
    NarrowBatch<bf16, kV, kRows, StoreOutput<bf16>> batch;
    batch.template locate<RowOrder::kTokenMajor>(p, StoreOutput<bf16>{}, b, groups, kWidth);
    rmsnorm_narrow_rows<bf16, kV, kRows, false>(batch.rows, batch.epis, batch.valid, p.hidden, p.eps, WarpGroup<kWidth>{});
  }
  if constexpr (kTrigger == 2) device::pdl_trigger_secondary();
#endif
}

#ifndef __CUDACC_RTC__
// qknorm of q [N, Hq, 128], k [N, Hk, 128] (bf16, contiguous) in place.
void qknorm_schedule(jitkern::TensorView q, jitkern::TensorView k, jitkern::TensorView qw, jitkern::TensorView kw, int64_t rows_per_group,
                     int64_t threads, int64_t persistent, int64_t trigger) {
  using namespace host;
  RuntimeCheck(q.dim() == 3 && k.dim() == 3 && q.size(2) == 128 && k.size(2) == 128, "qknorm_schedule: [N, H, 128]");
  NormParams<bf16> p{};
  p.hidden = 128;
  p.eps = 1e-6f;
  const int64_t n = q.size(0), hq = q.size(1), hk = k.size(1);
  auto* qp = static_cast<bf16*>(q.data_ptr());
  auto* kp = static_cast<bf16*>(k.data_ptr());
  p.problem[0] = {qp, qp, nullptr, static_cast<const bf16*>(qw.data_ptr()), hq * 128, 128, hq * 128, 128, 0, 0, static_cast<int32_t>(hq)};
  p.problem[1] = {kp, kp, nullptr, static_cast<const bf16*>(kw.data_ptr()), hk * 128, 128, hk * 128, 128, 0, 0, static_cast<int32_t>(hk)};
  p.rows0 = static_cast<int32_t>(n * hq);
  p.heads_per_token = static_cast<int32_t>(hq + hk);
  p.total_rows = static_cast<int32_t>(n * (hq + hk));
  const DLDevice device = q.device();
  const int64_t batches = div_ceil(int64_t{p.total_rows}, threads / 16 * rows_per_group);
  const auto go = [&](auto r, auto t, auto pers) {
    constexpr int kR = decltype(r)::value, kT = decltype(t)::value;
    constexpr bool kP = decltype(pers)::value;
    const auto kernel = narrow_schedule_kernel<kR, kT, kP>;
    int64_t grid = batches;
    if (kP) grid = std::min<int64_t>(grid, int64_t{runtime::get_sm_count(device.device_id)} * runtime::get_blocks_per_sm(kernel, threads));
    LaunchKernel(static_cast<unsigned>(grid), static_cast<unsigned>(threads), device).enable_pdl()(kernel, p);
  };
  const auto by_trigger = [&](auto r, auto pers) {
    if (trigger == 0) go(r, std::integral_constant<int, 0>{}, pers);
    if (trigger == 1) go(r, std::integral_constant<int, 1>{}, pers);
    if (trigger == 2) go(r, std::integral_constant<int, 2>{}, pers);
  };
  const auto by_rows = [&](auto pers) {
    if (rows_per_group == 1) by_trigger(std::integral_constant<int, 1>{}, pers);
    if (rows_per_group == 2) by_trigger(std::integral_constant<int, 2>{}, pers);
    if (rows_per_group == 4) by_trigger(std::integral_constant<int, 4>{}, pers);
  };
  if (persistent) {
    by_rows(std::true_type{});
  } else {
    by_rows(std::false_type{});
  }
}
#endif  // __CUDACC_RTC__

// fp8 group quantization, group 128, 8 lanes a group of two 16-byte vectors each: vectors l and l + 8 of its
// group (strided, the product's layout, two 8-byte stores), or 2l and 2l + 1 (contiguous, one 16-byte
// store); CTAs of `threads`; x [N, H] bf16 contiguous, q [N, H] uint8, s [N, H / 128] fp32 row-major.
template <int kTrigger, bool kContiguous>
__global__ void __launch_bounds__(1024) group_schedule_kernel(const bf16* in, uint8_t* q, device::quant::GroupScales scales,
                                                              int64_t groups_per_row, int64_t total_groups) {
#ifdef __CUDACC__
  constexpr int kLanes = 8, kPerLane = 2, kGroup = 128, kStep = kContiguous ? kV : kLanes * kV;
  const int lane = static_cast<int>(threadIdx.x % kLanes);
  const int64_t group = int64_t{blockIdx.x} * (blockDim.x / kLanes) + threadIdx.x / kLanes;
  const bool valid = group < total_groups;
  const int64_t at = group * kGroup + lane * (kContiguous ? kPerLane * kV : kV);
  device::AlignedVector<bf16, kV> x[kPerLane];
  wait_and_trigger<kTrigger>();
#pragma unroll
  for (int j = 0; j < kPerLane; ++j)
    if (valid) x[j].load(in + at + j * kStep);
  device::quant::quantize_group<fp8_e4m3_t, kLanes, kPerLane, false, kContiguous>(x, valid, q + at, 1e-10f, scales, group, groups_per_row,
                                                                                   total_groups);
  if constexpr (kTrigger == 2) device::pdl_trigger_secondary();
#endif
}

// A diagnostic, not a product schedule: the contiguous layout quantized with x * (448 / amax) (the
// reference's arithmetic; jitkern divides exactly), to see what the exact division costs.
template <int kTrigger>
__global__ void __launch_bounds__(1024) group_multiply_kernel(const bf16* in, uint8_t* q, float* scales, int64_t total_groups) {
#ifdef __CUDACC__
  constexpr int kLanes = 8;
  const int lane = static_cast<int>(threadIdx.x % kLanes);
  const int64_t group = int64_t{blockIdx.x} * (blockDim.x / kLanes) + threadIdx.x / kLanes;
  const bool valid = group < total_groups;
  const int64_t at = group * 128 + lane * 2 * kV;
  device::AlignedVector<bf16, kV> x[2];
  wait_and_trigger<kTrigger>();
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    if (valid) x[j].load(in + at + j * kV);
#pragma unroll
    for (int e = 0; e < kV; ++e) amax = valid ? fmaxf(amax, fabsf(device::cast<float>(x[j][e]))) : amax;
  }
  amax = fmaxf(device::warp::reduce_max_nonnegative<kLanes>(amax, 0xffffffffu), 1e-10f);
  const float inv = 448.0f / amax;
  if (!valid) return;
  device::AlignedVector<uint32_t, 4> words;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const auto pair = [&](int k) {
      const bf16* v = &x[k / kV][k % kV];
      return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(device::cast<float>(v[0]) * inv, device::cast<float>(v[1]) * inv),
                                                            __NV_SATFINITE, __NV_E4M3));
    };
    words[w] = pair(4 * w) | (pair(4 * w + 2) << 16);
  }
  words.store(reinterpret_cast<uint32_t*>(q + at));
  if (lane == 0) scales[group] = amax / 448.0f;
  if constexpr (kTrigger == 2) device::pdl_trigger_secondary();
#endif
}

#ifndef __CUDACC_RTC__
void group_quant_schedule(jitkern::TensorView x, jitkern::TensorView q, jitkern::TensorView s, int64_t threads, int64_t trigger,
                          int64_t contiguous) {
  using namespace host;
  RuntimeCheck(x.dim() == 2 && x.size(1) % 128 == 0, "group_quant_schedule: [N, H], H a multiple of 128");
  const int64_t groups = x.size(1) / 128, total = x.size(0) * groups;
  const device::quant::GroupScales scales{s.data_ptr(), groups, 1, true};
  const unsigned grid = static_cast<unsigned>(div_ceil(total, threads / 8));
  LaunchKernel launch(grid, static_cast<unsigned>(threads), x.device());
  launch.enable_pdl();
  const auto* in = static_cast<const bf16*>(x.data_ptr());
  auto* out = static_cast<uint8_t*>(q.data_ptr());
  const auto go = [&](auto t) {
    constexpr int kT = decltype(t)::value;
    if (contiguous == 2) {
      launch(group_multiply_kernel<kT>, in, out, static_cast<float*>(s.data_ptr()), total);
    } else if (contiguous) {
      launch(group_schedule_kernel<kT, true>, in, out, scales, groups, total);
    } else {
      launch(group_schedule_kernel<kT, false>, in, out, scales, groups, total);
    }
  };
  if (trigger == 0) go(std::integral_constant<int, 0>{});
  if (trigger == 1) go(std::integral_constant<int, 1>{});
  if (trigger == 2) go(std::integral_constant<int, 2>{});
}
#endif  // __CUDACC_RTC__

}  // namespace bench_schedules
