// The MoE combine's schedules side by side (bench_moe_combine.py --variants), bf16: the product's combine_kernel
// (csrc/moe_combine.cuh) at other vector widths, CTA widths, loads in flight and register caps than its launch rule
// picks (Ring), and the kernels and launch rule it replaced (Previous). Each struct's entry points have the
// product's signatures, their operands checked by MoeCombineOps.
#pragma once

#include <moe_combine.cuh>

namespace bench_moe_combine {

using namespace jitkern_moe_combine;

// The replaced kernels: a token per grid x and 128-thread CTAs of its row per y, kAtOnce experts' rows loaded (their
// weights and ids read first) before the first is added; and one expert at a time, the shared row loaded first.
constexpr int kPreviousThreads = 128;

template <typename T, int kVec>
__device__ __forceinline__ void store_sum(const Combine<T>& p, int64_t token, int64_t col, float (&acc)[kVec], bool add_shared,
                                          const AlignedVector<T, kVec>& shared) {
  if (add_shared) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[e] += device::cast<float>(shared[e]);
  }
  AlignedVector<T, kVec> y;
#pragma unroll
  for (int e = 0; e < kVec; ++e) y[e] = device::cast<T>(acc[e]);
  y.store(p.out + token * p.out_stride + col);
}

template <typename T, int kVec, bool kWeighted, int kAtOnce>
__global__ void __launch_bounds__(kPreviousThreads) batched_kernel(const __grid_constant__ Combine<T> p) {
#ifdef __CUDACC__
  const int64_t token = blockIdx.x;
  const int64_t v = int64_t{blockIdx.y} * kPreviousThreads + threadIdx.x;
  const int64_t col = v * kVec;
  device::pdl_trigger_at(p.trigger, Trigger::kStart);
  device::pdl_wait_primary(p.trigger);
  if (v < p.row_vecs) {
    AlignedVector<T, kVec> s;
    if (kWeighted && p.shared != nullptr) s.load(p.shared + token * p.shared_stride + col);
    float acc[kVec] = {};
    const T* row = p.in + token * p.in_token_stride + col;
    for (int j0 = 0; j0 < p.k; j0 += kAtOnce) {
      float w[kAtOnce];
      bool use[kAtOnce];
#pragma unroll
      for (int i = 0; i < kAtOnce; ++i) {
        const int j = j0 + i;
        use[i] = j < p.k;
        w[i] = 1.0f;
        if (kWeighted && use[i]) w[i] = p.weights[token * p.weights_stride + j] * p.scale;
        if (kWeighted && use[i] && p.ids != nullptr) {
          const int64_t at = token * p.ids_stride + j;
          use[i] = (p.ids64 ? static_cast<const int64_t*>(p.ids)[at] : static_cast<const int32_t*>(p.ids)[at]) >= 0;
        }
      }
      AlignedVector<T, kVec> x[kAtOnce];
#pragma unroll
      for (int i = 0; i < kAtOnce; ++i) {
        if (use[i]) x[i].load(row + (j0 + i) * p.in_k_stride);
      }
#pragma unroll
      for (int i = 0; i < kAtOnce; ++i) {
        if (!use[i]) continue;
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[e] = fmaf(w[i], device::cast<float>(x[i][e]), acc[e]);
      }
    }
    store_sum(p, token, col, acc, kWeighted && p.shared != nullptr, s);
  }
  device::pdl_trigger_at(p.trigger, Trigger::kAfterStores);
#endif
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kPreviousThreads) one_expert_at_a_time_kernel(const Combine<T> p) {
#ifdef __CUDACC__
  const int64_t token = blockIdx.x;
  const int64_t v = int64_t{blockIdx.y} * kPreviousThreads + threadIdx.x;
  const int64_t col = v * kVec;
  device::pdl_wait_primary();
  device::pdl_trigger_secondary();
  if (v >= p.row_vecs) return;
  float acc[kVec] = {};
  const T* row = p.in + token * p.in_token_stride + col;
  for (int j = 0; j < p.k; ++j) {
    float w = 1.0f;
    if (p.weights != nullptr) w = p.weights[token * p.weights_stride + j] * p.scale;
    if (p.ids != nullptr) {
      const int64_t at = token * p.ids_stride + j;
      const int64_t id = p.ids64 ? static_cast<const int64_t*>(p.ids)[at] : static_cast<const int32_t*>(p.ids)[at];
      if (id < 0) continue;
    }
    AlignedVector<T, kVec> x;
    x.load(row + j * p.in_k_stride);
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[e] = fmaf(w, device::cast<float>(x[e]), acc[e]);
  }
  AlignedVector<T, kVec> s;
  if (p.shared != nullptr) s.load(p.shared + token * p.shared_stride + col);
  store_sum(p, token, col, acc, p.shared != nullptr, s);
#endif
}

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
using Ops = MoeCombineOps<bf16_t>;

// The replaced launch rule (16-byte aligned rows), by the threads of one 16-byte vector each: at most 256 per SM
// 8-byte vectors, 8 experts at once; more, 16-byte vectors, 4 at once, except the weighted sum's grids of several
// waves, one expert at a time.
struct Previous {
  template <bool kWeighted, int kVec, int kAtOnce>
  static void batched(Ops::Operands ops) {
    using namespace host;
    Combine<bf16_t>& p = ops.p;
    p.row_vecs = p.hidden / kVec;
    const int64_t blocks = div_ceil(p.row_vecs, int64_t{kPreviousThreads});
    p.trigger = pdl_trigger_for(p.tokens * blocks, kPreviousThreads, runtime::get_sm_count(ops.device.device_id),
                                row_policy(ops.device).threads_per_sm);
    LaunchKernel(dim3(static_cast<unsigned>(p.tokens), static_cast<unsigned>(blocks)), kPreviousThreads, ops.device)
        .enable_pdl()(batched_kernel<bf16_t, kVec, kWeighted, kAtOnce>, p);
  }
  template <bool kWeighted>
  static void launch(Ops::Operands ops) {
    using namespace host;
    RuntimeCheck(Ops::vectors_fit(ops.p), "the previous rule is timed on 16-byte aligned rows only");
    if (ops.p.tokens * ops.p.hidden == 0) return;
    Combine<bf16_t>& p = ops.p;
    const int64_t threads = p.tokens * div_ceil(p.hidden / 8, int64_t{kPreviousThreads}) * kPreviousThreads;
    const int64_t sms = runtime::get_sm_count(ops.device.device_id);
    if (threads <= kPdlLateTriggerThreadsPerSm * sms) return batched<kWeighted, 4, 8>(ops);
    if constexpr (kWeighted) {
      if (threads > row_policy(ops.device).threads_per_sm * sms) {
        p.row_vecs = p.hidden / 8;
        const int64_t blocks = div_ceil(p.row_vecs, int64_t{kPreviousThreads});
        LaunchKernel(dim3(static_cast<unsigned>(p.tokens), static_cast<unsigned>(blocks)), kPreviousThreads, ops.device)
            .enable_pdl()(one_expert_at_a_time_kernel<bf16_t, 8>, p);
        return;
      }
    }
    batched<kWeighted, 8, 4>(ops);
  }
  static void moe_sum(jitkern::TensorView input, jitkern::TensorView output) { launch<false>(Ops::sum_operands(input, output)); }
  static void moe_weighted_sum(jitkern::TensorView input, jitkern::TensorView output, jitkern::TensorView topk_weights,
                               jitkern::Optional<jitkern::TensorView> topk_ids, jitkern::Optional<jitkern::TensorView> shared_output,
                               double routed_scaling_factor) {
    launch<true>(Ops::weighted_operands(input, output, topk_weights, topk_ids, shared_output, routed_scaling_factor));
  }
};

// The product's combine_kernel over vectors of kBytes (16-byte aligned rows), a token's row split over CTAs of at
// most kMost threads (at most kCta, the launch bound), kMinCtas of kCta an SM (a register cap), kDepth loads in flight.
template <int kBytes, int kCta, int kMinCtas, int kDepth, int kMost = 0>
struct Ring {
  template <bool kWeighted>
  static void launch(Ops::Operands ops) {
    host::RuntimeCheck(Ops::vectors_fit(ops.p), "this schedule takes 16-byte aligned rows only");
    Ops::launch_ring<kWeighted, kBytes, kCta, kMinCtas, kDepth>(ops, kMost);
  }
  static void moe_sum(jitkern::TensorView input, jitkern::TensorView output) { launch<false>(Ops::sum_operands(input, output)); }
  static void moe_weighted_sum(jitkern::TensorView input, jitkern::TensorView output, jitkern::TensorView topk_weights,
                               jitkern::Optional<jitkern::TensorView> topk_ids, jitkern::Optional<jitkern::TensorView> shared_output,
                               double routed_scaling_factor) {
    launch<true>(Ops::weighted_operands(input, output, topk_weights, topk_ids, shared_output, routed_scaling_factor));
  }
};

// The product's entry points (its launch rule).
struct Product {
  static void moe_sum(jitkern::TensorView input, jitkern::TensorView output) { Ops::moe_sum(input, output); }
  static void moe_weighted_sum(jitkern::TensorView input, jitkern::TensorView output, jitkern::TensorView topk_weights,
                               jitkern::Optional<jitkern::TensorView> topk_ids, jitkern::Optional<jitkern::TensorView> shared_output,
                               double routed_scaling_factor) {
    Ops::moe_weighted_sum(input, output, topk_weights, topk_ids, shared_output, routed_scaling_factor);
  }
};
#endif  // __CUDACC_RTC__

}  // namespace bench_moe_combine
