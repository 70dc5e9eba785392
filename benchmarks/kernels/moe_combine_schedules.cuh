// Launch schedules of the MoE combine side by side (bench_moe_combine.py --schedules), bf16: the product's kernels
// (csrc/moe_combine.cuh) at other CTA widths, PDL trigger places, vector widths and experts loaded at once than its
// launch rule picks, and its one-expert-at-a-time kernel at every size. Each struct's entry points have the
// product's signatures, their operands checked by MoeCombineOps.
#pragma once

#include <moe_combine.cuh>

namespace bench_moe_combine {

using namespace jitkern_moe_combine;

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
