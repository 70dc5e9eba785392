// The MoE combine's schedules side by side (bench_moe_combine.py --variants), bf16: the product's launch rule and its
// runtime-k schedules (the rule for every k before the unrolled kernels of k = 8). Each struct's entry points have the
// product's signatures, their operands checked by MoeCombineOps.
#pragma once

#include <moe_combine.cuh>

namespace bench_moe_combine {

using namespace jitkern_moe_combine;

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
using Ops = MoeCombineOps<bf16_t>;

// The product's runtime-k schedules (MoeCombineOps::launch_runtime_k) at every k.
struct RuntimeK {
  static void moe_sum(jitkern::TensorView input, jitkern::TensorView output) {
    Ops::launch_runtime_k<false>(Ops::sum_operands(input, output));
  }
  static void moe_weighted_sum(jitkern::TensorView input, jitkern::TensorView output, jitkern::TensorView topk_weights,
                               jitkern::Optional<jitkern::TensorView> topk_ids, jitkern::Optional<jitkern::TensorView> shared_output,
                               double routed_scaling_factor) {
    Ops::launch_runtime_k<true>(Ops::weighted_operands(input, output, topk_weights, topk_ids, shared_output, routed_scaling_factor));
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
