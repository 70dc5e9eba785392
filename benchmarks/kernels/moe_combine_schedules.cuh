// The MoE combine's schedules side by side (bench_moe_combine.py --variants), bf16: the product's combine_kernel
// (csrc/moe_combine.cuh) at other vector widths, CTA widths, loads in flight and register caps than its launch rule
// picks (Ring), and the launch rule the ring kernel replaced (Batched). Each struct's entry points have the product's
// signatures, their operands checked by MoeCombineOps.
#pragma once

#include <moe_combine.cuh>

namespace bench_moe_combine {

using namespace jitkern_moe_combine;

// The sum loading one expert's row at a time (its weight and id read before it), the batched rule's kernel for the
// weighted sum's grids of several waves: few registers, so full occupancy.
template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads) one_expert_at_a_time_kernel(const Combine<T> p) {
#ifdef __CUDACC__
  const int64_t token = blockIdx.x;
  const int64_t v = int64_t{blockIdx.y} * kThreads + threadIdx.x;
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

// The launch rule the ring kernel replaced, by the threads of one 16-byte vector each: at most 256 per SM (decode
// batches) 8-byte vectors, 8 experts at once; more, 16-byte vectors, 4 experts at once, except the weighted sum's grids
// of several waves, one expert at a time. Rows without 16-byte vectors: one element a thread, 8 experts at once.
struct Batched {
  template <bool kWeighted>
  static void launch(Ops::Operands ops) {
    using namespace host;
    constexpr int kVec = device::kVec16<bf16_t>;
    if (!Ops::vectors_fit(ops.p)) return Ops::launch_vectors<kWeighted, kThreads, kExpertsAtOnce, 1>(ops, nullptr);
    const int64_t threads = ops.p.tokens * div_ceil(ops.p.hidden / kVec, int64_t{kThreads}) * kThreads;
    const int64_t sms = runtime::get_sm_count(ops.device.device_id);
    if (threads <= kPdlLateTriggerThreadsPerSm * sms) return Ops::launch_vectors<kWeighted, kThreads, kExpertsAtOnce, kVec / 2>(ops, nullptr);
    if (kWeighted && threads > row_policy(ops.device).threads_per_sm * sms) {
      Ops::Operands one = ops;
      const int64_t blocks = Ops::checked_blocks(one.p, kVec, kThreads);
      if (blocks == 0) return;
      LaunchKernel(dim3(static_cast<unsigned>(one.p.tokens), static_cast<unsigned>(blocks)), kThreads, one.device)
          .enable_pdl()(one_expert_at_a_time_kernel<bf16_t, kVec>, one.p);
      return;
    }
    Ops::launch_vectors<kWeighted, kThreads, kExpertsAtOnce / 2, kVec>(ops, nullptr);
  }
  static void moe_sum(jitkern::TensorView input, jitkern::TensorView output) { launch<false>(Ops::sum_operands(input, output)); }
  static void moe_weighted_sum(jitkern::TensorView input, jitkern::TensorView output, jitkern::TensorView topk_weights,
                               jitkern::Optional<jitkern::TensorView> topk_ids, jitkern::Optional<jitkern::TensorView> shared_output,
                               double routed_scaling_factor) {
    launch<true>(Ops::weighted_operands(input, output, topk_weights, topk_ids, shared_output, routed_scaling_factor));
  }
};

// The product's combine_kernel over vectors of kBytes (16-byte aligned rows), a token's row split over CTAs of at
// most kMost threads (at most kCta, the launch bound; -1: the product's pick), kMinCtas of kCta an SM (a register
// cap), kDepth loads in flight; kK > 0: its kernel for k = kK without ids or shared row.
template <int kBytes, int kCta, int kMinCtas, int kDepth, int kMost = 0, int kK = 0>
struct Ring {
  template <bool kWeighted>
  static void launch(Ops::Operands ops) {
    host::RuntimeCheck(Ops::vectors_fit(ops.p), "this schedule takes 16-byte aligned rows only");
    host::RuntimeCheck(kK == 0 || (ops.p.k == kK && ops.p.ids == nullptr && ops.p.shared == nullptr), "this schedule takes k = ", kK,
                       " without ids or shared row only");
    Ops::launch_ring<kWeighted, kBytes, kCta, kMinCtas, kDepth, kK>(ops, kMost < 0 ? Ops::row_cta(ops) : kMost);
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
