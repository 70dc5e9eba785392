// per_token_group_quant's fp8 export with each lane layout of per_group_lean_kernel (tests/python/ops/test_quant.py):
// kPerLane 16-byte vectors a lane, contiguous or strided, under the product's launch rule.
#pragma once

#include <quant.cuh>  // csrc/

// A named namespace: the module is built with host_without_nvcc (its host code by the host compiler alone).
namespace quant_group_lean_test {

template <typename T, int kPerLane, bool kContiguous>
void group_quant_lean(jitkern::TensorView input, jitkern::TensorView output_q, jitkern::TensorView output_s, int64_t group_size, double eps) {
  using Ops = jitkern_quant::QuantOps<T>;
  Ops::template per_token_group_quant_with<typename Ops::template GroupLean<kPerLane, kContiguous>>(input, output_q, output_s, group_size, eps);
}

}  // namespace quant_group_lean_test
