// Launch schedules of the MoE combine side by side (bench_moe_combine.py --schedules), bf16: the product's kernels
// (csrc/moe_combine.cuh) at other CTA widths, PDL trigger places, vector widths and experts loaded at once than its
// launch rule picks, and its one-expert-at-a-time kernel at every size; candidate kernels (--variants: Lean).
// Each struct's entry points have the product's signatures, their operands checked by MoeCombineOps.
#pragma once

#include <moe_combine.cuh>

namespace bench_moe_combine {

using namespace jitkern_moe_combine;

// Candidate kernels (lean_kernel): kCta threads, a vector of kBytes of the row each; kRowPerX: the grid
// x = the CTAs of one token's row, y = the token (a token's CTAs consecutive, SGLang's order), else the product's
// (x = token); threads past the row end leave before the PDL wait. kForm: how the experts' loads are issued,
// the adds always in the experts' order (the product's bits):
//   kPlain: one expert a step, as written (the unrolling and load hoisting left to the compiler);
//   kRing: kDepth loads kept in flight, each slot refilled with the expert kDepth ahead once it is added.
// kMinBlocks caps the registers (__launch_bounds__).
enum Form : int { kPlain, kRing };
// A vector of kBytes as raw 32-bit words.
template <int kBytes>
struct RawWords {
  using type = uint4;
};
template <>
struct RawWords<8> {
  using type = uint2;
};

template <typename T, int kCta, bool kWeighted, int kForm, int kDepth, int kMinBlocks, bool kRowPerX, int kBytes>
__global__ void __launch_bounds__(kCta, kMinBlocks) lean_kernel(const __grid_constant__ Combine<T> p) {
#ifdef __CUDACC__
  constexpr int kVec = kBytes / static_cast<int>(sizeof(T));
  using Raw = typename RawWords<kBytes>::type;
  const int64_t token = kRowPerX ? blockIdx.y : blockIdx.x;
  const int64_t v = int64_t{kRowPerX ? blockIdx.x : blockIdx.y} * kCta + threadIdx.x;
  if (v >= p.row_vecs) return;
  const int64_t col = v * kVec;
  const T* row = p.in + token * p.in_token_stride + col;
  device::pdl_trigger_at(p.trigger, Trigger::kStart);
  device::pdl_wait_primary(p.trigger);
  float acc[kVec] = {};
  const auto add = [&](float w, const AlignedVector<T, kVec>& x) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[e] = kWeighted ? fmaf(w, device::cast<float>(x[e]), acc[e]) : acc[e] + device::cast<float>(x[e]);
  };
  // Expert j's weight (1 without weights) and whether it is added (its id >= 0).
  const auto weight = [&](int j) { return kWeighted ? p.weights[token * p.weights_stride + j] * p.scale : 1.0f; };
  const auto used = [&](int j) {
    if (!kWeighted || p.ids == nullptr) return true;
    const int64_t at = token * p.ids_stride + j;
    return (p.ids64 ? static_cast<const int64_t*>(p.ids)[at] : static_cast<const int32_t*>(p.ids)[at]) >= 0;
  };
  if constexpr (kForm == kPlain) {
    for (int j = 0; j < p.k; ++j) {
      if (!used(j)) continue;
      AlignedVector<T, kVec> x;
      x.load(row + j * p.in_k_stride);
      add(weight(j), x);
    }
  } else {
    // The slots hold the rows' raw words: a vector of elements kept across iterations took a register per element.
    bool use[kDepth];
    Raw x[kDepth];
    float w[kDepth];
    const T* next = row;  // expert j's vector, j the next fetched
    const auto fetch = [&](int slot, int j) {
      use[slot] = j < p.k && used(j);
      if (use[slot]) {
        x[slot] = *reinterpret_cast<const Raw*>(next);
        w[slot] = weight(j);
      }
      next += p.in_k_stride;
    };
#pragma unroll
    for (int i = 0; i < kDepth; ++i) fetch(i, i);
#pragma unroll 1
    for (int j0 = 0; j0 < p.k; j0 += kDepth) {
#pragma unroll
      for (int i = 0; i < kDepth; ++i) {
        if (use[i]) {
          AlignedVector<T, kVec> v;
          __builtin_memcpy(&v, &x[i], sizeof(v));
          add(w[i], v);
        }
        fetch(i, j0 + i + kDepth);
      }
    }
  }
  AlignedVector<T, kVec> s;
  const bool add_shared = kWeighted && p.shared != nullptr;
  if (add_shared) s.load(p.shared + token * p.shared_stride + col);
  store_sum(p, token, col, acc, add_shared, s);
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

// Launches lean_kernel<kCta, kForm, kDepth, kMinBlocks, kRowPerX> over vectors of kBytes (16 or 8), the PDL
// trigger by the product's rule.
template <int kCta, int kForm, int kDepth, int kMinBlocks, bool kRowPerX, int kBytes = 16>
struct Lean {
  template <bool kWeighted>
  static void launch(Ops::Operands ops) {
    using namespace host;
    RuntimeCheck(Ops::vectors_fit(ops.p), "this candidate takes 16-byte aligned rows only");
    Combine<bf16_t>& p = ops.p;
    const int64_t blocks = Ops::checked_blocks(p, kBytes / static_cast<int>(sizeof(bf16_t)), kCta);
    if (blocks == 0) return;
    p.trigger = pdl_trigger_for(p.tokens * blocks, kCta, runtime::get_sm_count(ops.device.device_id), row_policy(ops.device).threads_per_sm);
    const auto tokens = static_cast<unsigned>(p.tokens), row = static_cast<unsigned>(blocks);
    LaunchKernel(kRowPerX ? dim3(row, tokens) : dim3(tokens, row), kCta, ops.device)
        .enable_pdl()(lean_kernel<bf16_t, kCta, kWeighted, kForm, kDepth, kMinBlocks, kRowPerX, kBytes>, p);
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
