// per_token_group_quant's fp8 exports (fp32 or UE8M0 scales) through per_group_lean_kernel at a CTA size and trigger the launch rule gives it
// (tests/python/ops/test_quant.py), whatever the grid: the product's operand checks and launch.
#pragma once

#include <quant.cuh>  // csrc/

// A named namespace: the module is built with host_without_nvcc (its host code by the host compiler alone).
namespace quant_group_lean_test {

#ifndef __CUDACC_RTC__
template <typename T, bool kUE8M0, int kThreads, int kTrigger, device::quant::Rounding kRounding>
void group_quant_lean(jitkern::TensorView input, jitkern::TensorView output_q, jitkern::TensorView output_s, int64_t group_size, double eps) {
  using Ops = jitkern_quant::QuantOps<T>;
  constexpr auto kFormat = kUE8M0 ? Ops::GroupFormat::kFp8Ue8m0 : Ops::GroupFormat::kFp8;
  const auto g = Ops::template group_operands<kFormat>(input, output_q, output_s, group_size, eps);
  host::RuntimeCheck(Ops::template lean_applies<kRounding>(g), "group_quant_lean: the lean kernel does not take these operands");
  if (g.total_groups > 0) Ops::template launch_lean<kUE8M0, kRounding, kThreads, kTrigger>(g);
}
#endif  // __CUDACC_RTC__

}  // namespace quant_group_lean_test
