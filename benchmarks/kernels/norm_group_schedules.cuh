// Schedules of the norm + group fp8 ops side by side (bench_quant.py `group`): the product's entry points
// (csrc/quant.cuh, QuantOps) under other NormGroupSchedules, bf16. Sched<kLaneVecs, kFusedLaneVecs, kFewLaneVecs,
// kFusedFewLaneVecs, kPairs, kEarlyTriggerMaxRows, kFusedEarlyTriggerMaxRows, kClusterMaxRows, kFusedClusterMaxRows,
// kPinnedStores, kFusedPinnedStores, kFewEarlyInvHidden, kManyBoundThreads, kManyMinBlocks, kManyBoundFrom, kFewRowsPerCta,
// kFewRowsFromThreads>:
// NormGroupSchedule's members, in its order (kManyRowsPerSm: the product's).
// Beside them, StreamRows (the plain op's many rows through a persistent grid fed by bulk copies) and pattern_rows
// (the plain op's access pattern without its arithmetic: a yardstick).
#pragma once

#include <quant.cuh>

namespace bench_norm_group {

#ifndef __CUDACC_RTC__
template <int kLaneVecsArg, int kFusedLaneVecsArg, int kFewLaneVecsArg, int kFusedFewLaneVecsArg, int kPairsArg, int kEarlyTriggerMaxRowsArg,
          int kFusedEarlyTriggerMaxRowsArg, int kClusterMaxRowsArg, int kFusedClusterMaxRowsArg, int kPinnedStoresArg, int kFusedPinnedStoresArg,
          int kFewEarlyInvHiddenArg, int kManyBoundThreadsArg, int kManyMinBlocksArg, int kManyBoundFromArg, int kFewRowsPerCtaArg,
          int kFewRowsFromThreadsArg>
struct Sched {
  static constexpr int kLaneVecs = kLaneVecsArg, kFusedLaneVecs = kFusedLaneVecsArg, kFewLaneVecs = kFewLaneVecsArg,
                       kFusedFewLaneVecs = kFusedFewLaneVecsArg;
  static constexpr int64_t kManyRowsPerSm = jitkern_quant::NormGroupSchedule::kManyRowsPerSm;
  static constexpr bool kPairs = kPairsArg != 0;
  static constexpr int64_t kEarlyTriggerMaxRows = kEarlyTriggerMaxRowsArg, kFusedEarlyTriggerMaxRows = kFusedEarlyTriggerMaxRowsArg;
  static constexpr int64_t kClusterMaxRows = kClusterMaxRowsArg, kFusedClusterMaxRows = kFusedClusterMaxRowsArg;
  static constexpr bool kPinnedStores = kPinnedStoresArg != 0, kFusedPinnedStores = kFusedPinnedStoresArg != 0;
  static constexpr bool kFewEarlyInvHidden = kFewEarlyInvHiddenArg != 0;
  static constexpr int kManyBoundThreads = kManyBoundThreadsArg, kManyMinBlocks = kManyMinBlocksArg, kManyBoundFrom = kManyBoundFromArg;
  static constexpr int kFewRowsPerCta = kFewRowsPerCtaArg, kFewRowsFromThreads = kFewRowsFromThreadsArg;
};

template <int... kArgs>
using Ops = jitkern_quant::QuantOps<bf16_t, Sched<kArgs...>>;
#endif  // __CUDACC_RTC__

using device::AlignedVector;
using jitkern_quant::quant::QuantizeGroups;
using jitkern_quant::quant::Rounding;
constexpr int kVec = device::kVec16<bf16_t>, kGroup = 128;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// A row's bulk copy into shared memory, expected by its mbarrier.
JITKERN_DEVICE void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  device::ptx::mbarrier_arrive_expect_tx(bar, bytes);
  device::ptx::bulk_load(dst, src, bytes, bar);
}
using device::ptx::mbarrier_init_one;
JITKERN_DEVICE void mbarrier_wait(uint64_t* bar, uint32_t parity) { device::ptx::mbarrier_wait_parity(bar, parity); }
#endif

// Many token rows of rmsnorm_group_quant, each exactly kPerLane vectors a thread of whole warps, through a persistent
// grid: a CTA takes rows blockIdx.x, + gridDim.x, ...; its thread 0 keeps kStages of them in flight in shared memory,
// one bulk copy a row (no registers held by the loads, unlike a row a CTA), and the weights are loaded once. Each
// row then as norm_group_rows_kernel (norm_group_row: the same bits). Dynamic shared memory: kStages rows, then
// kStages mbarriers. kMinBlocks: __launch_bounds__'s CTAs an SM.
template <typename T, int kVec, int kGroup, int kPerLane, int kStages, bool kUE8M0, Rounding kRounding, bool kPairs, int kMinBlocks>
__global__ void __launch_bounds__(host::kRowKernels.max_cta_threads / kPerLane, kMinBlocks)
    norm_group_stream_kernel(const __grid_constant__ device::norm::NormParams<T> p,
                             const __grid_constant__ QuantizeGroups<kGroup, kUE8M0, kRounding> epi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Vec = AlignedVector<T, kVec>;
  constexpr int kLanes = kGroup / kVec / kPerLane;
  extern __shared__ __align__(128) uint8_t stages[];
  __shared__ float partial[2][device::kWarpThreads];  // by the row's parity: a row's writes never meet the last one's reads
  const int nvec = static_cast<int>(p.hidden / kVec), g = static_cast<int>(threadIdx.x) / kLanes;
  const int first = g * (kGroup / kVec) + static_cast<int>(threadIdx.x) % kLanes;
  const uint32_t row_bytes = static_cast<uint32_t>(p.hidden * sizeof(T));
  uint64_t* full = reinterpret_cast<uint64_t*>(stages + kStages * row_bytes);
  const device::norm::RowProblem<T>& rows = p.problem[0];
  const int total = p.total_rows, step = static_cast<int>(gridDim.x);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) mbarrier_init_one(&full[s]);
    device::ptx::fence_mbarrier_init();
  }
  __syncthreads();
  device::pdl_wait_primary();
  device::pdl_trigger_secondary();
  if (threadIdx.x == 0) {
    for (int s = 0, r = static_cast<int>(blockIdx.x); s < kStages && r < total; ++s, r += step)
      bulk_load(stages + s * row_bytes, rows.in + r * rows.in_token, row_bytes, &full[s]);
  }
  Vec ws[kPerLane], rs[1];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) ws[r].load_global(rows.weight + (first + r * kLanes) * kVec);
  const float inv_hidden = 1.0f / static_cast<float>(p.hidden);
  int s = 0;
  uint32_t parity = 0;
  for (int i = 0, row = static_cast<int>(blockIdx.x); row < total; ++i, row += step) {
    mbarrier_wait(&full[s], parity);
    Vec xs[kPerLane];
    uint8_t* stage = stages + s * row_bytes;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) xs[r] = reinterpret_cast<const Vec*>(stage)[first + r * kLanes];  // 16-byte loads
    const int next = row + kStages * step;
    uint64_t* bar = &full[s];
    jitkern_quant::norm_group_row<T, kVec, kGroup, kPerLane, false, kUE8M0, kRounding, kPairs>(
        xs, ws, rs, true, first, nvec, inv_hidden, p.eps, nullptr, epi.q + row * epi.q_row_stride,
        jitkern_quant::row_of_scales(epi.scales, epi.first_row + row), epi, partial[i & 1], [&] {  // every thread has read the stage
          if (threadIdx.x == 0 && next < total) bulk_load(stage, rows.in + next * rows.in_token, row_bytes, bar);
        });
    if (++s == kStages) s = 0, parity ^= 1;
  }
#endif
}

// The plain op's access pattern without its arithmetic: one row a CTA, kLaneVecs vectors of the input and the weights
// a thread (norm_group_rows_kernel's layout), one CTA reduction (the words' xor), then the codes (the values' high
// bytes) and one scale a group (the reduction's result) stored where the op stores them; the next launch triggered as
// the op triggers it. kScales: the scales stored (else not: what they cost).
template <int kLaneVecs, bool kUE8M0, bool kScales = true>
__global__ void __launch_bounds__(host::kRowKernels.max_cta_threads / kLaneVecs)
    norm_group_pattern_kernel(const __grid_constant__ device::norm::NormParams<bf16_t> p,
                              const __grid_constant__ QuantizeGroups<kGroup, kUE8M0, Rounding::kExact> epi) {
#ifdef __CUDACC__
  using Vec = AlignedVector<uint32_t, 4>;
  constexpr int kRowLanes = kGroup / kVec / kLaneVecs;
  const device::norm::RowProblem<bf16_t>& rows = p.problem[0];
  const int g = static_cast<int>(threadIdx.x) / kRowLanes, first = g * (kGroup / kVec) + static_cast<int>(threadIdx.x) % kRowLanes;
  const bf16_t* in = rows.in + blockIdx.x * rows.in_token;
  if (p.early_trigger) device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  if (!p.early_trigger) device::pdl_trigger_secondary();
  Vec xs[kLaneVecs], ws[kLaneVecs];
#pragma unroll
  for (int r = 0; r < kLaneVecs; ++r) {
    xs[r].load_global(reinterpret_cast<const uint32_t*>(in + (first + r * kRowLanes) * kVec));
    ws[r].load_global(reinterpret_cast<const uint32_t*>(rows.weight + (first + r * kRowLanes) * kVec));
  }
  uint32_t fold = 0;
#pragma unroll
  for (int r = 0; r < kLaneVecs; ++r)
    for (int k = 0; k < 4; ++k) fold ^= xs[r][k] ^ ws[r][k];
#pragma unroll
  for (int offset = device::kWarpThreads / 2; offset >= 1; offset /= 2) fold ^= __shfl_xor_sync(0xffffffffu, fold, offset);
  __shared__ uint32_t partial[device::kWarpThreads];
  const int lane = static_cast<int>(threadIdx.x % device::kWarpThreads);
  if (lane == 0) partial[threadIdx.x / device::kWarpThreads] = fold;
  __syncthreads();
  fold = lane < static_cast<int>(blockDim.x / device::kWarpThreads) ? partial[lane] : 0u;
#pragma unroll
  for (int offset = device::kWarpThreads / 2; offset >= 1; offset /= 2) fold ^= __shfl_xor_sync(0xffffffffu, fold, offset);
  uint8_t* q = epi.q + blockIdx.x * epi.q_row_stride;
#pragma unroll
  for (int r = 0; r < kLaneVecs; ++r)  // the high byte of each value
    AlignedVector<uint32_t, 2>{{__byte_perm(xs[r][0], xs[r][1], 0x7531), __byte_perm(xs[r][2], xs[r][3], 0x7531)}}.store_global(
        reinterpret_cast<uint32_t*>(q + (first + r * kRowLanes) * kVec));
  if (kScales && threadIdx.x % kRowLanes == 0)
    epi.scales.template store_at<kUE8M0>(epi.first_row + blockIdx.x, g, epi.groups_per_row, __uint_as_float(fold), fold);
#endif
}

#ifndef __CUDACC_RTC__
// The plain op's operands (rmsnorm_group_quant's signature, 1x128 groups, fp32 scales, the exact rounding) given to
// kernel(p, epi, rows, threads) where each row is exactly kLaneVecs vectors of whole warps of threads; false where
// they are not such rows or kernel declines them (false).
template <int kLaneVecs, typename Kernel>
bool plain_with(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output_q, jitkern::TensorView output_s,
                int64_t group_size, double eps, const Kernel& kernel) {
  using namespace host;
  const host::norm::TokenRows<bf16_t> rows(input, weight, nullptr, nullptr, eps);
  const int64_t hidden = rows.params.hidden, nvec = hidden / kVec;
  const int threads = static_cast<int>(nvec / kLaneVecs);
  auto device = SymbolicDevice{};
  device.set_value(rows.device);
  const host::quant::CheckedGroupScales checked = host::quant::verify_group_scales(output_s, rows.tokens, hidden / kGroup, device);
  const int64_t q_stride = rows.tokens > 1 ? output_q.stride(0) : hidden;
  const QuantizeGroups<kGroup, false, Rounding::kExact> epi{static_cast<uint8_t*>(output_q.data_ptr()), q_stride, checked.scales, hidden / kGroup, 0,
                                                           jitkern_quant::quant::kDefaultScaleEps};
  device::norm::NormParams<bf16_t> p = rows.params;
  p.total_rows = static_cast<int32_t>(rows.tokens);
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  p.early_trigger = rows.tokens <= jitkern_quant::NormGroupSchedule::kEarlyTriggerMaxRows;
  const bool fits = group_size == kGroup && !checked.ue8m0 && hidden % kGroup == 0 && nvec == int64_t{kLaneVecs} * threads &&
                    threads <= host::kRowKernels.max_cta_threads / kLaneVecs && threads % device::kWarpThreads == 0 &&
                    rows.tokens <= 0x7fffffff &&
                    aligned(p.problem[0].in) && aligned(p.problem[0].weight) && aligned(epi.q) && p.problem[0].in_token % kVec == 0 &&
                    q_stride % kVec == 0;
  return fits && kernel(p, epi, rows, threads);
}

// norm_group_stream_kernel with kStages rows in flight a CTA for the plain op's many rows of 4 vectors a lane (the exact
// rounding, fp32 scales), as many CTAs as an SM holds; other rows and the fused add as the product takes them.
template <int kStages>
struct StreamRows {
  template <int kGroupSize>
  static void rmsnorm_group_quant(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output_q, jitkern::TensorView output_s,
                                  int64_t group_size, double eps) {
    static_assert(kGroupSize == kGroup);
    const auto stream = [](const auto& p, const auto& epi, const auto& rows, int threads) {
      using namespace host;
      const int64_t sm_count = runtime::get_sm_count(rows.device.device_id);
      if (rows.tokens < jitkern_quant::NormGroupSchedule::kManyRowsPerSm * sm_count || row_policy(rows.device).arch < 90) return false;
      // 4 CTAs of the widest rows an SM: 64 registers, as the rows kernel takes.
      const auto kernel = norm_group_stream_kernel<bf16_t, kVec, kGroup, 4, kStages, false, Rounding::kExact, true, 4>;
      const std::size_t smem = kStages * (p.hidden * sizeof(bf16_t) + sizeof(uint64_t));
      const void* handle = kernel_handle(kernel);
      int per_sm = 0;
      {
        const DeviceGuard guard(rows.device.device_id);
        RuntimeDeviceCheck(cudaFuncSetAttribute(handle, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        RuntimeDeviceCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, handle, threads, smem));
      }
      if (per_sm < 1) return false;
      LaunchKernel launch(static_cast<unsigned>(host::min<int64_t>(rows.tokens, per_sm * sm_count)), threads, rows.device, smem);
      launch.enable_pdl();
      launch(kernel, p, epi);
      return true;
    };
    if (!plain_with<4>(input, weight, output_q, output_s, group_size, eps, stream))
      jitkern_quant::QuantOps<bf16_t>::rmsnorm_group_quant<kGroup>(input, weight, output_q, output_s, group_size, eps);
  }
  template <int kGroupSize>
  static void fused_add_rmsnorm_group_quant(jitkern::TensorView input, jitkern::TensorView residual, jitkern::TensorView weight,
                                            jitkern::TensorView output_q, jitkern::TensorView output_s, int64_t group_size, double eps) {
    static_assert(kGroupSize == kGroup);
    jitkern_quant::QuantOps<bf16_t>::fused_add_rmsnorm_group_quant<kGroup>(input, residual, weight, output_q, output_s, group_size, eps);
  }
};

// norm_group_pattern_kernel with the product's vectors a lane (a yardstick: its output is not the op's), the scales
// stored or not (what they cost).
inline void pattern_rows_with(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output_q, jitkern::TensorView output_s,
                              bool scales) {
  using S = jitkern_quant::NormGroupSchedule;
  const auto launch = [&](auto lanes_tag) {
    constexpr int kLaneVecs = decltype(lanes_tag)::value;
    const auto pattern = [&](const auto& p, const auto& epi, const auto& rows, int threads) {
      host::LaunchKernel launch(static_cast<unsigned>(rows.tokens), threads, rows.device);
      launch.enable_pdl();
      launch(scales ? norm_group_pattern_kernel<kLaneVecs, false, true> : norm_group_pattern_kernel<kLaneVecs, false, false>, p, epi);
      return true;
    };
    return plain_with<kLaneVecs>(input, weight, output_q, output_s, kGroup, 1e-6, pattern);
  };
  const int64_t tokens = input.size(0), sms = host::runtime::get_sm_count(input.device().device_id);
  const bool done = tokens >= S::kManyRowsPerSm * sms ? launch(std::integral_constant<int, S::kLaneVecs>{})
                                                      : launch(std::integral_constant<int, S::kFewLaneVecs>{});
  host::RuntimeCheck(done, "pattern_rows: rows that are not whole warps of the product's vectors a lane");
}

// pattern_rows_with, the scales stored.
inline void pattern_rows(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output_q, jitkern::TensorView output_s) {
  pattern_rows_with(input, weight, output_q, output_s, true);
}
#endif  // __CUDACC_RTC__

}  // namespace bench_norm_group
