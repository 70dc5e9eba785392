// The MoE combine's schedules side by side (bench_moe_combine.py --variants), bf16: the product's combine_kernel
// (csrc/moe_combine.cuh) at other vector widths, CTA widths, loads in flight and register caps than its launch rule
// picks (Ring), and the launch rule moe_sum's replaced (Batched: moe_weighted_sum's still). Each struct's entry
// points have the product's signatures, their operands checked by MoeCombineOps.
#pragma once

#include <moe_combine.cuh>

namespace bench_moe_combine {

using namespace jitkern_moe_combine;

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
using Ops = MoeCombineOps<bf16_t>;

// The launch rule moe_sum replaced (MoeCombineOps::launch_batched, moe_weighted_sum's).
struct Batched {
  static void moe_sum(jitkern::TensorView input, jitkern::TensorView output) { Ops::launch_batched<false>(Ops::sum_operands(input, output)); }
  static void moe_weighted_sum(jitkern::TensorView input, jitkern::TensorView output, jitkern::TensorView topk_weights,
                               jitkern::Optional<jitkern::TensorView> topk_ids, jitkern::Optional<jitkern::TensorView> shared_output,
                               double routed_scaling_factor) {
    Ops::launch_batched<true>(Ops::weighted_operands(input, output, topk_weights, topk_ids, shared_output, routed_scaling_factor));
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
