// Schedules of topk_sigmoid side by side (bench_moe.py sigmoid): the product's per-token body (csrc/moe.cuh)
// under other launches, and its previous body, on the product's checked parameters (MoeOps::sigmoid_params).
#pragma once

#include <moe.cuh>

namespace bench_moe_topk {

using namespace jitkern_moe;

// The product's per-token body before its group masks by chunk and its weights read back by the k lanes
// (shuffle groups only), for the side-by-side column.
template <typename T, int kV>
__device__ __forceinline__ void previous_sigmoid_token(const TopkParams& p, int64_t token, int lane) {
#ifdef __CUDACC__
  constexpr int kChunk = kTopkChunk<T, kV>, kChunks = kV / kChunk;
  const int E = p.experts;
  const auto expert_of = [&](int s) { return (s / kChunk * 32 + lane) * kChunk + s % kChunk; };  // slot s = c * kChunk + j
  const T* row = static_cast<const T*>(p.gating) + token * p.gating_stride;
  device::prefetch_before_wait(row + (expert_of(0) < E ? expert_of(0) : 0));
  device::pdl_wait_primary();
  T v[kV];
  float b[kV];
#pragma unroll
  for (int s = 0; s < kV; s += kChunk) {
    if (p.vector_rows && expert_of(s) + kChunk <= E) {
      device::AlignedVector<T, kChunk> vec;
      vec.load(row + expert_of(s));
#pragma unroll
      for (int j = 0; j < kChunk; ++j) v[s + j] = vec[j], b[s + j] = 0.0f;
      if (p.bias != nullptr) {
#pragma unroll
        for (int j = 0; j < kChunk; j += kSigmoidBiasVec<T, kV>) {
          device::AlignedVector<float, kSigmoidBiasVec<T, kV>> bvec;
          bvec.load(p.bias + expert_of(s) + j);
#pragma unroll
          for (int i = 0; i < kSigmoidBiasVec<T, kV>; ++i) b[s + j + i] = bvec[i];
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const int e = expert_of(s + j);
        v[s + j] = e < E ? row[e] : T{};
        b[s + j] = e < E && p.bias != nullptr ? p.bias[e] : 0.0f;
      }
    }
  }
  float score[kV];  // a selected expert's weight
  uint32_t key[kV];
#pragma unroll
  for (int s = 0; s < kV; ++s) {
    score[s] = 1.0f / (1.0f + expf(-device::cast<float>(v[s])));
    const float c = score[s] + b[s];
    key[s] = expert_of(s) < E ? order_key<32>(__float_as_uint(c), c != c) : kGoneKey;
  }
  if (p.groups > 1) {
    const int per_group = E / p.groups;
    const auto choice = [&](int s) {  // the biased score, NaN and padding as -inf
      return key[s] > kNanKey ? __uint_as_float(key_bits<32>(key[s])) : -kMoeInf;
    };
    const auto top2_key = [](float first, float second) {
      const float sum = first + second;
      return order_key<32>(__float_as_uint(sum), sum != sum);
    };
    uint32_t group_key = kGoneKey;  // lane g < groups: group g's
    {  // a group: per_group / kChunk lanes (a power of two) of one chunk
      const int lanes = per_group / kChunk;
      float first[kChunks], second[kChunks];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        first[c] = second[c] = -kMoeInf;
#pragma unroll
        for (int j = 0; j < kChunk; ++j) {
          const float x = choice(c * kChunk + j);
          second[c] = fmaxf(second[c], fminf(first[c], x)), first[c] = fmaxf(first[c], x);
        }
      }
      for (int offset = 1; offset < lanes; offset *= 2) {
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const float f = __shfl_xor_sync(0xffffffffu, first[c], offset), g = __shfl_xor_sync(0xffffffffu, second[c], offset);
          second[c] = fmaxf(fmaxf(second[c], g), fminf(first[c], f)), first[c] = fmaxf(first[c], f);
        }
      }
      // Group g (lane g) starts in chunk g * lanes / 32 at lane g * lanes % 32.
      const int g_lane = lane * lanes;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const uint32_t k = top2_key(first[c], second[c]);
        const uint32_t theirs = __shfl_sync(0xffffffffu, k, g_lane % 32);
        if (g_lane / 32 == c && lane < p.groups) group_key = theirs;
      }
    }
    int rank = 0;  // the groups above this lane's: a larger key, or the same key and a lower index
    for (int g = 0; g < p.groups; ++g) {
      const uint32_t k = __shfl_sync(0xffffffffu, group_key, g);
      rank += k > group_key || (k == group_key && g < lane);
    }
    const uint32_t chosen = __ballot_sync(0xffffffffu, lane < p.groups && rank < p.topk_group);
#pragma unroll
    for (int s = 0; s < kV; ++s)
      if (!((chosen >> min(expert_of(s) / per_group, 31)) & 1u)) key[s] = kGoneKey;
  }
  // k rounds: the largest key left; lane i keeps round i's expert and weight.
  int my_id = 0;
  float my_weight = 0.0f;
  for (int i = 0; i < p.k; ++i) {
    const uint32_t m = warp_max(max_of(key));
    const uint32_t expert = take_lowest(key, m, expert_of);
    float w = 0.0f;
#pragma unroll
    for (int s = 0; s < kV; ++s) w = static_cast<uint32_t>(expert_of(s)) == expert ? score[s] : w;
    w = __shfl_sync(0xffffffffu, w, static_cast<int>(expert) / kChunk % 32);
    if (lane == i) my_id = static_cast<int>(expert), my_weight = w;
  }
  if (p.renormalize) {
    const float total = device::warp::reduce_sum<kMoeMaxTopk>(lane < p.k ? my_weight : 0.0f);
    if (total > 0.0f) my_weight /= total;
  }
  if (lane < p.k) store_choice(p, token, lane, my_weight * p.scaling, my_id);
#endif
}

// The product's per-token body (topk_sigmoid_token) under other launches: kWarps tokens per CTA, and the
// PDL trigger at the kernel's start (the product's), after the wait, after its stores, or no PDL attribute.
enum class Trigger { kStart, kAfterWait, kEnd, kNone };

template <int kWarps, Trigger kTrigger, bool kPrevious = false>
__global__ void __launch_bounds__(kWarps * 32) launch_schedule_kernel(const __grid_constant__ TopkParams p) {
#ifdef __CUDACC__
  if constexpr (kTrigger == Trigger::kStart) device::pdl_trigger_secondary();
  if constexpr (kTrigger == Trigger::kAfterWait) device::pdl_wait_primary(), device::pdl_trigger_secondary();  // the body's wait: a no-op
  const int warp = threadIdx.x / 32;
  const int64_t token = int64_t{blockIdx.x} * kWarps + warp;
  if (token < p.tokens) {
    if constexpr (kPrevious) {
      previous_sigmoid_token<float, 8>(p, token, threadIdx.x % 32);
    } else {
      topk_sigmoid_token<float, 8, false, kWarps>(p, token, threadIdx.x % 32, warp);
    }
  }
  if constexpr (kTrigger == Trigger::kEnd) device::pdl_trigger_secondary();
#endif
}

// topk_sigmoid's entry point (fp32 gating, 129-256 experts) on schedule `schedule`: 0 the previous body
// launched as the product; 1-5 the product's body with 4 warps a CTA without PDL, 4 warps triggering at the end, 1 and 8
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
  host::RuntimeCheck(reinterpret_cast<uintptr_t>(p.gating) % 16 == 0 && p.gating_stride % 4 == 0 && reinterpret_cast<uintptr_t>(p.bias) % 16 == 0,
                     "the product's body here needs 16-byte aligned rows and bias");
  host::RuntimeCheck(p.groups == 1 || groups_by_shuffle<float, 8>(p.experts / p.groups), "these schedules take the shuffle groups");
  p.vector_rows = true;
  switch (schedule) {
    case 0: return go(launch_schedule_kernel<4, Trigger::kStart, true>, 4, true);
    case 1: return go(launch_schedule_kernel<4, Trigger::kNone>, 4, false);
    case 2: return go(launch_schedule_kernel<4, Trigger::kEnd>, 4, true);
    case 3: return go(launch_schedule_kernel<1, Trigger::kStart>, 1, true);
    case 4: return go(launch_schedule_kernel<8, Trigger::kStart>, 8, true);
    case 5: return go(launch_schedule_kernel<4, Trigger::kAfterWait>, 4, true);
    default: host::RuntimeCheck(false, "no schedule ", schedule);
  }
}

}  // namespace bench_moe_topk
