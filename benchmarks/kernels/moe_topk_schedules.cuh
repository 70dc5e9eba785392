// Launches of topk_sigmoid side by side (bench_moe.py sigmoid): the product's kernel and parameters
// (csrc/moe.cuh) with the PDL trigger forced to one place instead of the one MoeOps::launch picks.
#pragma once

#include <moe.cuh>

namespace bench_moe_topk {

using namespace jitkern_moe;

// topk_sigmoid (fp32 gating) with the trigger `trigger`: 0 at the start, 1 after the wait, 2 after the stores.
template <typename = void>
void sigmoid_trigger(jitkern::TensorView topk_weights, jitkern::TensorView topk_ids, jitkern::TensorView gating_output,
                     jitkern::Optional<jitkern::TensorView> correction_bias, bool renormalize, int64_t num_expert_group, int64_t topk_group,
                     double routed_scaling_factor, int64_t trigger) {
  host::RuntimeCheck(trigger >= 0 && trigger <= 2, "trigger must be 0-2, got ", trigger);
  DLDevice dev;
  const TopkParams p = MoeOps<float>::sigmoid_params(topk_weights, topk_ids, gating_output, correction_bias, renormalize, num_expert_group,
                                                     topk_group, routed_scaling_factor, dev);
  const Trigger forced = static_cast<Trigger>(trigger);
  MoeOps<float>::launch<true>(p, dev, &forced);
}

}  // namespace bench_moe_topk
