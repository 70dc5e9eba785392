// Launch schedules of the MoE combine side by side (bench_moe_combine.py --schedules), bf16: the product's kernel
// (csrc/moe_combine.cuh) at other CTA widths, PDL trigger places, vector widths and experts loaded at once than its
// launch rule picks, and the kernel it replaced, which loads one expert's row at a time (each expert a memory
// latency). Each struct's entry points have the product's signatures, their operands checked by MoeCombineOps.
#pragma once

#include <moe_combine.cuh>

namespace bench_moe_combine {

using namespace jitkern_moe_combine;

// The replaced kernel: 128 threads a CTA, a vector each, the experts' rows loaded one after another (a weight
// and id read before each), the next launch triggered at the start.
template <typename T, int kVec>
__global__ void __launch_bounds__(128) one_expert_at_a_time_kernel(const Combine<T> p) {
#ifdef __CUDACC__
  const int64_t token = blockIdx.x;
  const int64_t v = int64_t{blockIdx.y} * 128 + threadIdx.x;
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

// The product's kernel at kCtaThreads threads a CTA, kAtOnce experts loaded at once, vectors of kVecBytes bytes (0:
// the product's choice); kTrigger: a Trigger's value, or -1 for the product's rule.
template <int kCtaThreads, int kTrigger, int kAtOnce = kExpertsAtOnce, int kVecBytes = 0>
struct Schedule {
  static const Trigger* forced() {
    static const Trigger trigger = static_cast<Trigger>(kTrigger < 0 ? 0 : kTrigger);
    return kTrigger < 0 ? nullptr : &trigger;
  }
  template <bool kWeighted>
  static void launch(Ops::Operands ops) {
    if constexpr (kVecBytes == 0) {
      Ops::launch<kWeighted, kCtaThreads, kAtOnce>(ops, forced());
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

struct OneExpertAtATime {
  static void launch(Ops::Operands ops) {
    using namespace host;
    Combine<bf16_t>& p = ops.p;
    if (p.tokens * p.hidden == 0) return;
    constexpr int kVec = device::kVec16<bf16_t>;
    RuntimeCheck(Ops::vectors_fit(p), "the replaced kernel's schedule takes 16-byte aligned rows only");
    p.row_vecs = p.hidden / kVec;
    LaunchKernel(dim3(static_cast<unsigned>(p.tokens), static_cast<unsigned>(div_ceil(p.row_vecs, int64_t{128}))), 128, ops.device)
        .enable_pdl()(one_expert_at_a_time_kernel<bf16_t, kVec>, p);
  }
  static void moe_sum(jitkern::TensorView input, jitkern::TensorView output) { launch(Ops::sum_operands(input, output)); }
  static void moe_weighted_sum(jitkern::TensorView input, jitkern::TensorView output, jitkern::TensorView topk_weights,
                               jitkern::Optional<jitkern::TensorView> topk_ids, jitkern::Optional<jitkern::TensorView> shared_output,
                               double routed_scaling_factor) {
    launch(Ops::weighted_operands(input, output, topk_weights, topk_ids, shared_output, routed_scaling_factor));
  }
};
#endif  // __CUDACC_RTC__

}  // namespace bench_moe_combine
