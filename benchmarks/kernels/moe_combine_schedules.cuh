// Launch schedules of the MoE combine side by side (bench_moe_combine.py --schedules), bf16: the product's kernels
// (csrc/moe_combine.cuh) at other CTA widths, PDL trigger places, vector widths and experts loaded at once than its
// launch rule picks, and its one-expert-at-a-time kernel at every size; candidate kernels (--variants: Variant).
// Each struct's entry points have the product's signatures, their operands checked by MoeCombineOps.
#pragma once

#include <moe_combine.cuh>

namespace bench_moe_combine {

using namespace jitkern_moe_combine;

// The token and row vector of this thread: column-major, a 1-D grid whose consecutive CTAs cover a token's row
// (its k rows read by neighbouring CTAs); else the product's grid (a token per x, its row's CTAs per y).
struct Place {
  int64_t token, v;
};
template <int kCtaThreads, bool kColumnMajor, typename T>
__device__ __forceinline__ Place cta_place(const Combine<T>& p) {
  if constexpr (kColumnMajor) {
    const auto blocks = static_cast<uint32_t>((p.row_vecs + kCtaThreads - 1) / kCtaThreads);
    return {blockIdx.x / blocks, int64_t{blockIdx.x % blocks} * kCtaThreads + threadIdx.x};
  } else {
    return {blockIdx.x, int64_t{blockIdx.y} * kCtaThreads + threadIdx.x};
  }
}

// Candidate kernels for 32-512 tokens. The product's sum with: the token-order grid (cta_place), a register cap (__launch_bounds__ min blocks: more CTAs resident), and the rows'
// loads issued before the weights are read (without ids the loads depend on nothing).
template <typename T, int kVec, int kCtaThreads, bool kWeighted, int kAtOnce, int kMinBlocks, bool kColumnMajor>
__global__ void __launch_bounds__(kCtaThreads, kMinBlocks) variant_kernel(const __grid_constant__ Combine<T> p) {
#ifdef __CUDACC__
  const auto [token, v] = cta_place<kCtaThreads, kColumnMajor>(p);
  const int64_t col = v * kVec;
  device::pdl_trigger_at(p.trigger, Trigger::kStart);
  device::pdl_wait_primary(p.trigger);
  if (v < p.row_vecs) {
    float acc[kVec] = {};
    const T* row = p.in + token * p.in_token_stride + col;
    const bool gated = kWeighted && p.ids != nullptr;
#pragma unroll 1
    for (int j0 = 0; j0 < p.k; j0 += kAtOnce) {
      bool use[kAtOnce];
#pragma unroll
      for (int i = 0; i < kAtOnce; ++i) {
        use[i] = j0 + i < p.k;
        if (gated && use[i]) {
          const int64_t at = token * p.ids_stride + j0 + i;
          use[i] = (p.ids64 ? static_cast<const int64_t*>(p.ids)[at] : static_cast<const int32_t*>(p.ids)[at]) >= 0;
        }
      }
      AlignedVector<T, kVec> x[kAtOnce];
#pragma unroll
      for (int i = 0; i < kAtOnce; ++i) {
        if (use[i]) x[i].load(row + (j0 + i) * p.in_k_stride);
      }
      float w[kAtOnce];
#pragma unroll
      for (int i = 0; i < kAtOnce; ++i) w[i] = (kWeighted && use[i]) ? p.weights[token * p.weights_stride + j0 + i] * p.scale : 1.0f;
#pragma unroll
      for (int i = 0; i < kAtOnce; ++i) {
        if (!use[i]) continue;
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[e] = fmaf(w[i], device::cast<float>(x[i][e]), acc[e]);
      }
    }
    AlignedVector<T, kVec> s;
    const bool add_shared = kWeighted && p.shared != nullptr;
    if (add_shared) s.load(p.shared + token * p.shared_stride + col);
    store_sum(p, token, col, acc, add_shared, s);
  }
  device::pdl_trigger_at(p.trigger, Trigger::kAfterStores);
#endif
}

// The same sum with each thread's kStage experts' 16-byte vectors copied to shared memory by cp.async (no registers
// held while they are in flight), then added in order. Needs 16-byte vectors (vectors_fit). Capped at 40 registers
// (12 CTAs an SM; its shared memory holds 13 of 16 KiB).
template <typename T, int kCtaThreads, bool kWeighted, int kStage, bool kColumnMajor>
__global__ void __launch_bounds__(kCtaThreads, 12) staged_kernel(const __grid_constant__ Combine<T> p) {
#ifdef __CUDACC__
  constexpr int kVec = device::kVec16<T>;
  __shared__ AlignedVector<T, kVec> buf[kStage][kCtaThreads];
  const auto [token, v] = cta_place<kCtaThreads, kColumnMajor>(p);
  const int64_t col = v * kVec;
  device::pdl_trigger_at(p.trigger, Trigger::kStart);
  device::pdl_wait_primary(p.trigger);
  if (v < p.row_vecs) {
    float acc[kVec] = {};
    const T* row = p.in + token * p.in_token_stride + col;
    for (int j0 = 0; j0 < p.k; j0 += kStage) {
#pragma unroll
      for (int i = 0; i < kStage; ++i) {
        if (j0 + i < p.k) device::ptx::cp_async_16(&buf[i][threadIdx.x], row + (j0 + i) * p.in_k_stride);
      }
      device::ptx::cp_async_wait_all();
#pragma unroll
      for (int i = 0; i < kStage; ++i) {
        const int j = j0 + i;
        if (j >= p.k) break;
        if (kWeighted && p.ids != nullptr) {
          const int64_t at = token * p.ids_stride + j;
          if ((p.ids64 ? static_cast<const int64_t*>(p.ids)[at] : static_cast<const int32_t*>(p.ids)[at]) < 0) continue;
        }
        const float w = kWeighted ? p.weights[token * p.weights_stride + j] * p.scale : 1.0f;
        const AlignedVector<T, kVec> x = buf[i][threadIdx.x];
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[e] = fmaf(w, device::cast<float>(x[e]), acc[e]);
      }
    }
    AlignedVector<T, kVec> s;
    const bool add_shared = kWeighted && p.shared != nullptr;
    if (add_shared) s.load(p.shared + token * p.shared_stride + col);
    store_sum(p, token, col, acc, add_shared, s);
  }
  device::pdl_trigger_at(p.trigger, Trigger::kAfterStores);
#endif
}

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
using Ops = MoeCombineOps<bf16_t>;

// The product's batched kernel at kCtaThreads threads a CTA, kAtOnce experts loaded at once, vectors of kVecBytes
// bytes (0: the widest the rows allow); kTrigger: a Trigger's value, or -1 for the product's rule.
template <int kCtaThreads, int kTrigger, int kAtOnce = kExpertsAtOnce, int kVecBytes = 0>
struct Schedule {
  static const Trigger* forced() {
    static const Trigger trigger = static_cast<Trigger>(kTrigger < 0 ? 0 : kTrigger);
    return kTrigger < 0 ? nullptr : &trigger;
  }
  template <bool kWeighted>
  static void launch(Ops::Operands ops) {
    if constexpr (kVecBytes == 0) {
      Ops::launch_widest<kWeighted, kCtaThreads, kAtOnce>(ops, forced());
    } else {
      constexpr int kVec = kVecBytes / static_cast<int>(sizeof(bf16_t));
      host::RuntimeCheck(Ops::vectors_fit(ops.p), "this schedule takes 16-byte aligned rows only");
      Ops::launch_vectors<kWeighted, kCtaThreads, kAtOnce, kVec>(ops, forced());
    }
  }
  static void moe_sum(jitkern::TensorView input, jitkern::TensorView output) { launch<false>(Ops::sum_operands(input, output)); }
  static void moe_weighted_sum(jitkern::TensorView input, jitkern::TensorView output, jitkern::TensorView topk_weights,
                               jitkern::Optional<jitkern::TensorView> topk_ids, jitkern::Optional<jitkern::TensorView> shared_output,
                               double routed_scaling_factor) {
    launch<true>(Ops::weighted_operands(input, output, topk_weights, topk_ids, shared_output, routed_scaling_factor));
  }
};

// Launches a candidate over vectors of kVecBytes bytes (16 for staged_kernel), the product's PDL trigger rule.
// kStage > 0: staged_kernel with kStage experts staged; else variant_kernel.
template <int kCtaThreads, int kAtOnce, int kMinBlocks, bool kColumnMajor, int kVecBytes = 16, int kStage = 0>
struct Variant {
  template <bool kWeighted>
  static void launch(Ops::Operands ops) {
    using namespace host;
    constexpr int kVec = kVecBytes / static_cast<int>(sizeof(bf16_t));
    RuntimeCheck(Ops::vectors_fit(ops.p), "this variant takes 16-byte aligned rows only");
    Combine<bf16_t>& p = ops.p;
    const int64_t blocks = Ops::checked_blocks(p, kVec, kCtaThreads);
    if (blocks == 0) return;
    const int64_t grid = p.tokens * blocks;
    p.trigger = pdl_trigger_for(grid, kCtaThreads, runtime::get_sm_count(ops.device.device_id), row_policy(ops.device).threads_per_sm);
    RuntimeCheck(grid <= 0x7fffffff, "too many CTAs for one launch: ", grid);
    const dim3 dims = kColumnMajor ? dim3(static_cast<unsigned>(grid)) : dim3(static_cast<unsigned>(p.tokens), static_cast<unsigned>(blocks));
    if constexpr (kStage > 0) {
      LaunchKernel(dims, kCtaThreads, ops.device).enable_pdl()(staged_kernel<bf16_t, kCtaThreads, kWeighted, kStage, kColumnMajor>, p);
    } else {
      LaunchKernel(dims, kCtaThreads, ops.device)
          .enable_pdl()(variant_kernel<bf16_t, kVec, kCtaThreads, kWeighted, kAtOnce, kMinBlocks, kColumnMajor>, p);
    }
  }
  static void moe_sum(jitkern::TensorView input, jitkern::TensorView output) { launch<false>(Ops::sum_operands(input, output)); }
  static void moe_weighted_sum(jitkern::TensorView input, jitkern::TensorView output, jitkern::TensorView topk_weights,
                               jitkern::Optional<jitkern::TensorView> topk_ids, jitkern::Optional<jitkern::TensorView> shared_output,
                               double routed_scaling_factor) {
    launch<true>(Ops::weighted_operands(input, output, topk_weights, topk_ids, shared_output, routed_scaling_factor));
  }
};

// The product's one_expert_at_a_time_kernel at every size.
struct OneExpertAtATime {
  static void moe_sum(jitkern::TensorView input, jitkern::TensorView output) { Ops::launch_one_at_a_time(Ops::sum_operands(input, output)); }
  static void moe_weighted_sum(jitkern::TensorView input, jitkern::TensorView output, jitkern::TensorView topk_weights,
                               jitkern::Optional<jitkern::TensorView> topk_ids, jitkern::Optional<jitkern::TensorView> shared_output,
                               double routed_scaling_factor) {
    Ops::launch_one_at_a_time(Ops::weighted_operands(input, output, topk_weights, topk_ids, shared_output, routed_scaling_factor));
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
