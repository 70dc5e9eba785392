// Schedules of topk_sigmoid side by side (bench_moe.py sigmoid, launches): the product's per-token body
// (csrc/moe.cuh) under other launches, and the (score, expert) pair arg-max kernel it replaced, on the
// product's checked parameters (MoeOps::sigmoid_params).
#pragma once

#include <moe.cuh>

#include <climits>

namespace bench_moe_topk {

using namespace jitkern_moe;

// A candidate for the arg-max: larger value first, then the lower key. Keys are the expert index,
// + E for NaN (below every number), + 2E for experts outside the selected groups, INT_MAX for none.
struct Candidate {
  float value;
  int key;
};

__device__ __forceinline__ bool better(const Candidate& a, const Candidate& b) {
  return a.value > b.value || (a.value == b.value && a.key < b.key);
}

__device__ __forceinline__ Candidate warp_best(Candidate c) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const Candidate o{__shfl_xor_sync(0xffffffffu, c.value, offset), __shfl_xor_sync(0xffffffffu, c.key, offset)};
    if (better(o, c)) c = o;
  }
  return c;
}

// The product's topk_sigmoid kernel before the order keys: lane l holds experts l, l + 32, ... (kV of them:
// ceil(experts / 32) rounded up to a power of two); k rounds of a warp arg-max of (score, expert) pairs, the
// group scores by a lane per group scanning shared memory.
template <typename T, int kV>
__global__ void __launch_bounds__(kMoeTopkWarps * 32) pairs_sigmoid_kernel(const __grid_constant__ TopkParams p) {
#ifdef __CUDACC__
  __shared__ float choice_smem[kMoeTopkWarps][kMoeMaxExperts];
  device::pdl_trigger_secondary();  // the next kernel reads what this one writes only after its own wait
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t token = int64_t{blockIdx.x} * kMoeTopkWarps + warp;
  if (token >= p.tokens) return;  // whole warps leave: no shuffle misses a lane
  const T* row = static_cast<const T*>(p.gating) + token * p.gating_stride;
  const int E = p.experts;
  device::pdl_wait_primary();
  float x[kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    const int e = j * 32 + lane;
    x[j] = e < E ? device::cast<float>(row[e]) : -kMoeInf;
  }
  float weight[kV];  // what a selected expert's weight is
  Candidate c[kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    const int e = j * 32 + lane;
    weight[j] = 1.0f / (1.0f + expf(-x[j]));
    c[j] = {e < E ? weight[j] + (p.bias != nullptr ? p.bias[e] : 0.0f) : -kMoeInf, e};
  }
  if (p.groups > 1) {  // keep the experts of the topk_group groups whose two best scores sum highest
    float* smem = choice_smem[warp];
#pragma unroll
    for (int j = 0; j < kV; ++j)
      if (j * 32 + lane < E) smem[j * 32 + lane] = c[j].value != c[j].value ? -kMoeInf : c[j].value;
    __syncwarp();
    const int per_group = E / p.groups;
    Candidate group{-kMoeInf, INT_MAX};
    if (lane < p.groups) {
      float first = -kMoeInf, second = -kMoeInf;
      for (int i = 0; i < per_group; ++i) {
        const float v = smem[lane * per_group + i];
        if (v > first) {
          second = first, first = v;
        } else if (v > second) {
          second = v;
        }
      }
      group = {first + second, lane};
    }
    uint32_t chosen = 0;
    for (int i = 0; i < p.topk_group; ++i) {
      const Candidate best = warp_best(group);
      chosen |= 1u << best.key;
      if (lane == best.key) group = {-kMoeInf, INT_MAX};
    }
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const int e = j * 32 + lane;
      if (e < E && !((chosen >> (e / per_group)) & 1u)) c[j] = {-kMoeInf, e + 2 * E};
    }
  }
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    const int e = j * 32 + lane;
    if (e >= E) c[j] = {-kMoeInf, INT_MAX};
    else if (c[j].value != c[j].value) c[j] = {-kMoeInf, e + E};
  }
  // k rounds: the best remaining expert; lane i keeps round i's expert and weight.
  int my_id = 0;
  float my_weight = 0.0f;
  for (int i = 0; i < p.k; ++i) {
    Candidate local = c[0];
    float local_weight = weight[0];
    int local_j = 0;
#pragma unroll
    for (int j = 1; j < kV; ++j) {
      if (better(c[j], local)) local = c[j], local_weight = weight[j], local_j = j;
    }
    const Candidate best = warp_best(local);
    const int e = best.key % E;  // keys of NaN and masked experts carry E or 2E more
    const float w = __shfl_sync(0xffffffffu, local_weight, e % 32);
#pragma unroll
    for (int j = 0; j < kV; ++j)
      if (j == local_j && local.key == best.key) c[j] = {-kMoeInf, INT_MAX};  // taken
    if (lane == i) my_id = e, my_weight = w;
  }
  if (p.renormalize) {
    const float total = device::warp::reduce_sum(lane < p.k ? my_weight : 0.0f);
    if (total > 0.0f) my_weight /= total;
  }
  if (lane < p.k) store_choice(p, token, lane, my_weight * p.scaling, my_id);
#endif
}

// The product's per-token body (topk_sigmoid_token) under other launches: kWarps tokens per CTA, and the
// PDL trigger at the kernel's start (the product's), after the wait, after its stores, or no PDL attribute.
enum class Trigger { kStart, kAfterWait, kEnd, kNone };

template <int kWarps, Trigger kTrigger>
__global__ void __launch_bounds__(kWarps * 32) launch_schedule_kernel(const __grid_constant__ TopkParams p) {
#ifdef __CUDACC__
  if constexpr (kTrigger == Trigger::kStart) device::pdl_trigger_secondary();
  if constexpr (kTrigger == Trigger::kAfterWait) device::pdl_wait_primary(), device::pdl_trigger_secondary();  // the body's wait: a no-op
  const int warp = threadIdx.x / 32;
  const int64_t token = int64_t{blockIdx.x} * kWarps + warp;
  if (token < p.tokens) topk_sigmoid_token<float, 8, false, kWarps>(p, token, threadIdx.x % 32, warp);
  if constexpr (kTrigger == Trigger::kEnd) device::pdl_trigger_secondary();
#endif
}

// topk_sigmoid's entry point (fp32 gating, 129-256 experts) on schedule `schedule`: 0 the pair arg-max
// kernel; 1-5 the product's body with 4 warps a CTA without PDL, 4 warps triggering at the end, 1 and 8
// warps triggering at the start, 4 warps triggering after the wait. Rows and bias must be 16-byte aligned (vector loads).
template <typename = void>
void sigmoid_schedule(jitkern::TensorView topk_weights, jitkern::TensorView topk_ids, jitkern::TensorView gating_output,
                      jitkern::Optional<jitkern::TensorView> correction_bias, bool renormalize, int64_t num_expert_group, int64_t topk_group,
                      double routed_scaling_factor, int64_t schedule) {
  DLDevice dev;
  TopkParams p = MoeOps<float>::sigmoid_params(topk_weights, topk_ids, gating_output, correction_bias, renormalize, num_expert_group,
                                               topk_group, routed_scaling_factor, dev);
  if (p.tokens == 0) return;
  host::RuntimeCheck(p.experts > 128 && p.experts <= 256, "these schedules are built for 129-256 experts");
  const auto go = [&](auto kernel, int warps, bool pdl) {
    host::LaunchKernel run(static_cast<unsigned>(host::div_ceil(p.tokens, int64_t{warps})), warps * 32, dev);
    run.enable_pdl(pdl);
    run(kernel, p);
  };
  if (schedule == 0) return go(pairs_sigmoid_kernel<float, 8>, kMoeTopkWarps, true);
  host::RuntimeCheck(reinterpret_cast<uintptr_t>(p.gating) % 16 == 0 && p.gating_stride % 4 == 0 && reinterpret_cast<uintptr_t>(p.bias) % 16 == 0,
                     "the product's body here needs 16-byte aligned rows and bias");
  host::RuntimeCheck(p.groups == 1 || groups_by_shuffle<float, 8>(p.experts / p.groups), "these schedules take the shuffle groups");
  p.vector_rows = true;
  switch (schedule) {
    case 1: return go(launch_schedule_kernel<4, Trigger::kNone>, 4, false);
    case 2: return go(launch_schedule_kernel<4, Trigger::kEnd>, 4, true);
    case 3: return go(launch_schedule_kernel<1, Trigger::kStart>, 1, true);
    case 4: return go(launch_schedule_kernel<8, Trigger::kStart>, 8, true);
    case 5: return go(launch_schedule_kernel<4, Trigger::kAfterWait>, 4, true);
    default: host::RuntimeCheck(false, "no schedule ", schedule);
  }
}

}  // namespace bench_moe_topk
