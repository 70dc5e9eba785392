// The masked group form of the MoE activations (csrc/moe_act.cuh) by each of its kernels for at most 32 experts,
// whatever the launch rule would pick (tests/python/ops/test_moe_act.py): the interleaved rows' and the one over
// the computed rows that a warp's scan counts, the arguments checked by the product's own code.
#pragma once

#include <moe_act.cuh>  // csrc/

// A named namespace: the module is built with host_without_nvcc (its host code by the host compiler alone).
namespace moe_act_launches_test {

using device::quant::Rounding;

template <typename T, Rounding kRounding>
void interleaved(jitkern::TensorView input, jitkern::TensorView masked_m, jitkern::TensorView output_q, jitkern::TensorView output_s,
                 int64_t group_size, double eps) {
  using Ops = jitkern_moe_act::MoeActOps<T>;
  const auto m = Ops::masked_group(input, masked_m, output_q, output_s, group_size, eps);
  jitkern_moe_act::InterleavedRows rows;
  host::RuntimeCheck(Ops::template interleaved<kRounding>(m, rows), "the interleaved rows do not take this layout");
  Ops::template group_quant_interleaved<kRounding>(rows, m.op);
}

template <typename T, Rounding kRounding>
void scanned(jitkern::TensorView input, jitkern::TensorView masked_m, jitkern::TensorView output_q, jitkern::TensorView output_s,
             int64_t group_size, double eps) {
  using Ops = jitkern_moe_act::MoeActOps<T>;
  const auto m = Ops::masked_group(input, masked_m, output_q, output_s, group_size, eps);
  host::RuntimeCheck(m.experts <= jitkern_moe_act::MaskedRowsWarp::kMaxWarpExperts, "at most 32 experts");
  Ops::template group_quant<kRounding>(jitkern_moe_act::MaskedRowsWarp{m.rows}, m.op);
}

}  // namespace moe_act_launches_test
