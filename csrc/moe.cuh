// The MoE routing family: a router's top-k (softmax, with DeepSeek-V2's grouped selection, or sigmoid with a
// correction bias and DeepSeek-V3's) and the token sort by expert that grouped GEMMs read (moe_align_block_size).
//
// Top-k: one warp per token, 1-512 experts, k <= 32 rounds of a warp-wide maximum (the schedules are
// described at each kernel). Experts are ranked by their logit (softmax) or biased score (sigmoid); ties go to the
// lowest expert index, as torch.topk; NaN ranks below every number (selected only when fewer than k
// other experts remain). Weights are fp32.
//
// Alignment: one CTA, or a cluster of CTAs for many ids, stable (the entries of an expert keep the order of
// topk_ids), so the output is deterministic; ids outside [0, num_experts) (expert parallelism's -1) are left out.
#pragma once

#include <jitkern/cta.cuh>
#include <jitkern/optional.h>
#include <jitkern/policy.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/type.cuh>
#include <jitkern/utils.cuh>
#include <jitkern/vec.cuh>
#include <jitkern/warp.cuh>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace jitkern_moe {

constexpr int kMoeTopkWarps = 4;  // tokens per CTA
constexpr int kMoeMaxExperts = 512;
constexpr int kMoeMaxTopk = 32;  // a lane per choice (Qwen3-Next takes 10 of 512)
constexpr int kMoeMaxGroups = 32;  // a lane per group
constexpr float kMoeInf = __builtin_huge_valf();

// Where a top-k kernel triggers the next launch (MoeOps::launch picks it by the grid: host::pdl_trigger_for).
// At start on grids of 16 or more CTAs the launches queued behind it slowed the kernel by 3-5 us once the
// gating reached 256 KB (fp32 256 experts, 256 tokens: 5.70 us against 2.50 after the wait; H200, CUDA graph,
// bench_moe.py sigmoid).
using Trigger = device::PdlTrigger;

// The correction bias's element type (fp32, or a 16-bit checkpoint's buffer: read as its value in fp32).
enum class TopkBias : uint8_t { kFloat, kBf16, kHalf };

struct TopkParams {
  const void* gating;
  int64_t gating_stride;
  float* weights;
  int64_t weights_stride;
  void* ids;
  int64_t ids_stride;
  bool ids64;
  int64_t tokens;
  int experts, k;
  bool renormalize;
  bool vector_rows;  // softmax: a lane's experts load as vectors (every row aligned for them)
  Trigger trigger;
  const void* bias;  // topk_sigmoid's correction bias (null: none), of bias_type; the grouped forms' groups, topk_group, scaling
  TopkBias bias_type;
  int groups, topk_group;
  float scaling;
};

// Lane i < k's choice: topk_weights[token][i] and topk_ids[token][i].
__device__ __forceinline__ void store_choice(const TopkParams& p, int64_t token, int i, float weight, int id) {
  p.weights[token * p.weights_stride + i] = weight;
  if (p.ids64) {
    static_cast<int64_t*>(p.ids)[token * p.ids_stride + i] = id;
  } else {
    static_cast<int32_t*>(p.ids)[token * p.ids_stride + i] = id;
  }
}

// ---- topk_softmax: integer keys, one warp-wide max a round ----------------------------------------------
// Softmax is monotonic, so experts are ranked by their logit. Each logit becomes an unsigned key in the
// logits' order (sign-magnitude flipped to two's order), so a round is one warp max of integers
// (redux.sync) instead of five shuffle steps of (value, index) pairs. 16-bit logits fit in the key's upper
// half with 0xffff - expert below: every key is unique and names its expert. fp32 logits take the whole
// key; a warp-wide minimum of the experts holding the maximum then picks the lowest (torch.topk's tie rule).
constexpr uint32_t kGoneKey = 0;  // padding and experts already chosen
constexpr uint32_t kNanKey = 1;   // NaN: below every number

// The order key of a 32- or 16-bit float's bits (-0 ranks with +0: they tie, as in torch.topk).
template <int kBits>
__device__ __forceinline__ uint32_t order_key(uint32_t bits, bool nan) {
  constexpr uint32_t kSign = 1u << (kBits - 1), kAll = kBits == 32 ? 0xffffffffu : (1u << kBits) - 1;
  if (bits == kSign) bits = 0;
  return nan ? kNanKey : bits ^ (bits & kSign ? kAll : kSign);
}
template <int kBits>
__device__ __forceinline__ uint32_t key_bits(uint32_t key) {  // order_key's inverse (NaN: a NaN)
  constexpr uint32_t kSign = 1u << (kBits - 1), kAll = kBits == 32 ? 0xffffffffu : (1u << kBits) - 1;
  return key ^ (key & kSign ? kSign : kAll);
}

template <typename T>
struct SoftmaxKeys {
  static constexpr bool kPacked = sizeof(T) == 2;  // the key names its expert
  static __device__ __forceinline__ uint32_t key(T v, int expert) {
    const float x = device::cast<float>(v);
    if constexpr (kPacked) {
      uint16_t bits;
      __builtin_memcpy(&bits, &v, 2);
      return order_key<16>(bits, x != x) << 16 | (0xffffu - expert);
    } else {
      return order_key<32>(__float_as_uint(x), x != x);
    }
  }
  static __device__ __forceinline__ float value(uint32_t key) {
    if constexpr (kPacked) {
      const uint16_t bits = static_cast<uint16_t>(key_bits<16>(key >> 16));
      T v;
      __builtin_memcpy(&v, &bits, 2);
      return device::cast<float>(v);
    } else {
      return __uint_as_float(key_bits<32>(key));
    }
  }
  static __device__ __forceinline__ bool is_number(uint32_t key) { return (kPacked ? key >> 16 : key) > kNanKey; }
};

__device__ __forceinline__ uint32_t warp_max(uint32_t x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_max_sync(0xffffffffu, x);
#else
  return device::warp::reduce_max(x);
#endif
}
__device__ __forceinline__ uint32_t warp_min(uint32_t x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_min_sync(0xffffffffu, x);
#else
  return ~warp_max(~x);
#endif
}

template <int kN>
__device__ __forceinline__ uint32_t max_of(const uint32_t (&key)[kN]) {  // a tree: log2(kN) dependent steps
  uint32_t m[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) m[j] = key[j];
#pragma unroll
  for (int w = 1; w < kN; w *= 2)
#pragma unroll
    for (int j = 0; j + w < kN; j += 2 * w) m[j] = max(m[j], m[j + w]);
  return m[0];
}

// The lowest expert holding key m (each lane's lowest, then the warp's), its key then kGoneKey.
template <int kN, typename ExpertOf>
__device__ __forceinline__ uint32_t take_lowest(uint32_t (&key)[kN], uint32_t m, const ExpertOf& expert_of) {
  uint32_t mine = 0xffffffffu;  // none
#pragma unroll
  for (int s = kN - 1; s >= 0; --s) mine = key[s] == m ? static_cast<uint32_t>(expert_of(s)) : mine;
  const uint32_t expert = warp_min(mine);
#pragma unroll
  for (int s = 0; s < kN; ++s) key[s] = static_cast<uint32_t>(expert_of(s)) == expert ? kGoneKey : key[s];
  return expert;
}

// A softmax weight before normalisation: x == max weighs 1 (also for +-inf maxima, where x - max is
// NaN); NaN logits weigh 0.
__device__ __forceinline__ float softmax_term(float x, float max) { return x != x ? 0.0f : x == max ? 1.0f : expf(x - max); }

// kV = ceil(experts / 32) rounded up to a power of two: the experts a lane holds, in chunks of
// kTopkChunk<T, kV> consecutive ones (a vector load each where the rows are aligned for it); chunk c of
// lane l holds experts from (c * 32 + l) * kChunk, so that each chunk's loads cover consecutive bytes
// across the warp.
template <typename T, int kV>
constexpr int kTopkChunk = kV < device::kVec16<T> ? kV : device::kVec16<T>;

// kGrouped: DeepSeek-V2's grouped selection (groups ranked by their best logit: keep_chosen_groups) and the
// weights times p.scaling; kScanGroups as keep_chosen_groups'.
template <typename T, int kV, bool kGrouped = false, bool kScanGroups = false>
__global__ void __launch_bounds__(kMoeTopkWarps * 32) topk_softmax_kernel(const __grid_constant__ TopkParams p) {
#ifdef __CUDACC__
  using Keys = SoftmaxKeys<T>;
  constexpr int kChunk = kTopkChunk<T, kV>;
  device::pdl_trigger_at(p.trigger, Trigger::kStart);  // the next kernel reads what this one writes after its wait
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, E = p.experts;
  const auto expert_of = [&](int s) { return (s / kChunk * 32 + lane) * kChunk + s % kChunk; };  // slot s = c * kChunk + j
  const int64_t token = int64_t{blockIdx.x} * kMoeTopkWarps + warp;
  if (token >= p.tokens) return;  // whole warps leave: no warp-wide step misses a lane
  const T* row = static_cast<const T*>(p.gating) + token * p.gating_stride;
  device::prefetch_before_wait(row + (expert_of(0) < E ? expert_of(0) : 0));
  device::pdl_wait_primary(p.trigger);
  T v[kV];
#pragma unroll
  for (int s = 0; s < kV; s += kChunk) {
    if (p.vector_rows && expert_of(s) + kChunk <= E) {
      device::AlignedVector<T, kChunk> vec;
      vec.load(row + expert_of(s));
#pragma unroll
      for (int j = 0; j < kChunk; ++j) v[s + j] = vec[j];
    } else {
#pragma unroll
      for (int j = 0; j < kChunk; ++j) v[s + j] = expert_of(s + j) < E ? row[expert_of(s + j)] : T{};
    }
  }
  uint32_t key[kV];
#pragma unroll
  for (int s = 0; s < kV; ++s) key[s] = expert_of(s) < E ? Keys::key(v[s], expert_of(s)) : kGoneKey;
  // k rounds: the largest key left; lane i keeps round i's key and expert.
  uint32_t m = warp_max(max_of(key));
  const uint32_t top = m;
  const float row_max = Keys::is_number(top) ? Keys::value(top) : 0.0f;  // no number: every weight is 0
  if constexpr (kGrouped) {  // the softmax is over every expert: row_max and the full sum keep them all
    if (p.groups > 1) {
      keep_chosen_groups<T, kV, kScanGroups, false>(p, key, lane, warp, [&](int s) {  // the logit, NaN and padding as -inf
        return Keys::is_number(key[s]) ? Keys::value(key[s]) : -kMoeInf;
      }, expert_of);
      m = warp_max(max_of(key));
    }
  }
  uint32_t my_key = kGoneKey;
  int my_id = 0;
  for (int i = 0;;) {
    uint32_t expert;
    if constexpr (Keys::kPacked) {
      expert = 0xffffu - (m & 0xffffu);
#pragma unroll
      for (int s = 0; s < kV; ++s) key[s] = key[s] == m ? kGoneKey : key[s];
    } else {
      expert = take_lowest(key, m, expert_of);
    }
    if (lane == i) my_key = m, my_id = static_cast<int>(expert);
    if (++i == p.k) break;
    m = warp_max(max_of(key));
  }
  const float term = lane < p.k ? softmax_term(Keys::value(my_key), row_max) : 0.0f;
  float sum = 0.0f;  // of the chosen terms (lanes 0 to k - 1), or of every term
  if (p.renormalize) {
    sum = device::warp::reduce_sum<kMoeMaxTopk>(term);
  } else {
#pragma unroll
    for (int s = 0; s < kV; ++s) sum += expert_of(s) < E ? softmax_term(device::cast<float>(v[s]), row_max) : 0.0f;
    sum = device::warp::reduce_sum(sum);
  }
  const float weight = sum > 0.0f ? term / sum : 0.0f;  // 0: nothing but NaN
  if (lane < p.k) store_choice(p, token, lane, kGrouped ? weight * p.scaling : weight, my_id);
  device::pdl_trigger_at(p.trigger, Trigger::kAfterStores);
#endif
}

// ---- topk_sigmoid: the layout and rounds of topk_softmax's fp32 keys ------------------------------------
// Lane l holds the experts of topk_softmax's chunks; each biased score s + bias becomes its order key (NaN:
// kNanKey), experts outside the selected groups and padding kGoneKey, and k rounds take the largest key
// (the lowest expert holding it); lane i < k then reads its expert's logit again for the weight s. Groups:
// each group's two best scores (NaN as -inf), merged by shuffles across the lanes of a group where a group
// is whole chunks of 2^n lanes (kScanGroups: a lane per group scans shared memory otherwise); group g's key
// goes to lane g, which counts the groups ranking above it.
__device__ __forceinline__ float sigmoid_score(float x) { return 1.0f / (1.0f + expf(-x)); }
// Expert e's correction bias (p.bias not null).
__device__ __forceinline__ float bias_at(const TopkParams& p, int e) {
  if (p.bias_type == TopkBias::kBf16) return __bfloat162float(static_cast<const bf16_t*>(p.bias)[e]);
  if (p.bias_type == TopkBias::kHalf) return __half2float(static_cast<const fp16_t*>(p.bias)[e]);
  return static_cast<const float*>(p.bias)[e];
}
template <typename T, int kV>
constexpr int kSigmoidBiasVec = kTopkChunk<float, kTopkChunk<T, kV>>;  // the correction bias's vector (<= 16 bytes)
// The grouped selection's shuffle form takes groups of whole chunks in 2^n lanes.
template <typename T, int kV>
constexpr bool groups_by_shuffle(int per_group) {
  constexpr int kChunk = kTopkChunk<T, kV>;
  const int lanes = per_group / kChunk;
  return per_group % kChunk == 0 && lanes <= 32 && (lanes & (lanes - 1)) == 0;
}

// Grouped selection (DeepSeek's routers): only the experts of the topk_group groups (runs of E / groups experts)
// that rank highest keep their keys; the others' become kGoneKey. A group ranks by the sum of its two best values
// (kTop2: DeepSeek-V3) or by its best (DeepSeek-V2); value(s): slot s's value, -inf for NaN and padding (read
// before any key changes). Group g's key goes to lane g, which counts the groups ranking above it (ties: the
// lower group); kScanGroups: groups that are not whole chunks of 2^n lanes, scanned from shared memory.
template <typename T, int kV, bool kScanGroups, bool kTop2, typename Value, typename ExpertOf>
__device__ __forceinline__ void keep_chosen_groups(const TopkParams& p, uint32_t (&key)[kV], int lane, int warp, const Value& value,
                                                   const ExpertOf& expert_of) {
#ifdef __CUDACC__
  constexpr int kChunk = kTopkChunk<T, kV>, kChunks = kV / kChunk;
  const int per_group = p.experts / p.groups;
  const auto group_key_of = [](float first, float second) {
    const float rank = kTop2 ? first + second : first;
    return order_key<32>(__float_as_uint(rank), rank != rank);
  };
  uint32_t group_key = kGoneKey;  // lane g < groups: group g's
  if constexpr (kScanGroups) {
    __shared__ float value_smem[kMoeTopkWarps][kMoeMaxExperts];
    float* smem = value_smem[warp];
#pragma unroll
    for (int s = 0; s < kV; ++s)
      if (expert_of(s) < p.experts) smem[expert_of(s)] = value(s);
    __syncwarp();
    if (lane < p.groups) {
      float first = -kMoeInf, second = -kMoeInf;
      for (int i = 0; i < per_group; ++i) {
        const float x = smem[lane * per_group + i];
        if constexpr (kTop2) second = fmaxf(second, fminf(first, x));
        first = fmaxf(first, x);
      }
      group_key = group_key_of(first, second);
    }
  } else {  // a group: per_group / kChunk lanes (a power of two) of one chunk
    const int lanes = per_group / kChunk;
    float first[kChunks], second[kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      first[c] = second[c] = -kMoeInf;
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const float x = value(c * kChunk + j);
        if constexpr (kTop2) second[c] = fmaxf(second[c], fminf(first[c], x));
        first[c] = fmaxf(first[c], x);
      }
    }
    for (int offset = 1; offset < lanes; offset *= 2) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const float f = __shfl_xor_sync(0xffffffffu, first[c], offset);
        if constexpr (kTop2) second[c] = fmaxf(fmaxf(second[c], __shfl_xor_sync(0xffffffffu, second[c], offset)), fminf(first[c], f));
        first[c] = fmaxf(first[c], f);  // V2 ranks by the best alone: no second shuffle
      }
    }
    // Group g (lane g) starts in chunk g * lanes / 32 at lane g * lanes % 32.
    const int g_lane = lane * lanes;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const uint32_t k = group_key_of(first[c], second[c]);
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
  if constexpr (kScanGroups) {
#pragma unroll
    for (int s = 0; s < kV; ++s)
      if (!((chosen >> min(expert_of(s) / per_group, 31)) & 1u)) key[s] = kGoneKey;
  } else {  // a chunk lies in one group: chunk c of this lane in group (c * 32 + lane) / lanes
    const int shift = __ffs(per_group / kChunk) - 1;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      if ((chosen >> min((c * 32 + lane) >> shift, 31)) & 1u) continue;
#pragma unroll
      for (int j = 0; j < kChunk; ++j) key[c * kChunk + j] = kGoneKey;
    }
  }
#endif
}

// One token's top-k by one whole warp (warp: its index in the CTA, for kScanGroups' shared memory), the
// PDL wait (and the trigger placed after it) before the first read of the gating row.
template <typename T, int kV, bool kScanGroups>
__device__ __forceinline__ void topk_sigmoid_token(const TopkParams& p, int64_t token, int lane, int warp) {
#ifdef __CUDACC__
  constexpr int kChunk = kTopkChunk<T, kV>;
  const int E = p.experts;
  const auto expert_of = [&](int s) { return (s / kChunk * 32 + lane) * kChunk + s % kChunk; };  // slot s = c * kChunk + j
  const T* row = static_cast<const T*>(p.gating) + token * p.gating_stride;
  device::prefetch_before_wait(row + (expert_of(0) < E ? expert_of(0) : 0));
  device::pdl_wait_primary(p.trigger);
  T v[kV];
  float b[kV];
#pragma unroll
  for (int s = 0; s < kV; s += kChunk) {
    if (p.vector_rows && expert_of(s) + kChunk <= E) {
      device::AlignedVector<T, kChunk> vec;
      vec.load(row + expert_of(s));
#pragma unroll
      for (int j = 0; j < kChunk; ++j) v[s + j] = vec[j], b[s + j] = 0.0f;
      if (p.bias != nullptr && p.bias_type == TopkBias::kFloat) {
#pragma unroll
        for (int j = 0; j < kChunk; j += kSigmoidBiasVec<T, kV>) {
          device::AlignedVector<float, kSigmoidBiasVec<T, kV>> bvec;
          bvec.load(static_cast<const float*>(p.bias) + expert_of(s) + j);
#pragma unroll
          for (int i = 0; i < kSigmoidBiasVec<T, kV>; ++i) b[s + j + i] = bvec[i];
        }
      } else if (p.bias != nullptr) {
#pragma unroll
        for (int j = 0; j < kChunk; ++j) b[s + j] = bias_at(p, expert_of(s + j));
      }
    } else {
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const int e = expert_of(s + j);
        v[s + j] = e < E ? row[e] : T{};
        b[s + j] = e < E && p.bias != nullptr ? bias_at(p, e) : 0.0f;
      }
    }
  }
  uint32_t key[kV];
#pragma unroll
  for (int s = 0; s < kV; ++s) {
    const float c = sigmoid_score(device::cast<float>(v[s])) + b[s];
    key[s] = expert_of(s) < E ? order_key<32>(__float_as_uint(c), c != c) : kGoneKey;
  }
  if (p.groups > 1)
    keep_chosen_groups<T, kV, kScanGroups, true>(p, key, lane, warp, [&](int s) {  // the biased score, NaN and padding as -inf
      return key[s] > kNanKey ? __uint_as_float(key_bits<32>(key[s])) : -kMoeInf;
    }, expert_of);
  // k rounds: the largest key left; lane i keeps round i's expert, then reads its score again.
  int my_id = 0;
  for (int i = 0; i < p.k; ++i) {
    const uint32_t expert = take_lowest(key, warp_max(max_of(key)), expert_of);
    if (lane == i) my_id = static_cast<int>(expert);
  }
  float my_weight = lane < p.k ? sigmoid_score(device::cast<float>(row[my_id])) : 0.0f;
  if (p.renormalize) {
    const float total = device::warp::reduce_sum<kMoeMaxTopk>(lane < p.k ? my_weight : 0.0f);
    if (total > 0.0f) my_weight /= total;
  }
  if (lane < p.k) store_choice(p, token, lane, my_weight * p.scaling, my_id);
#endif
}

template <typename T, int kV, bool kScanGroups>
__global__ void __launch_bounds__(kMoeTopkWarps * 32) topk_sigmoid_kernel(const __grid_constant__ TopkParams p) {
#ifdef __CUDACC__
  device::pdl_trigger_at(p.trigger, Trigger::kStart);  // the next kernel reads what this one writes after its wait
  const int warp = threadIdx.x / 32;
  const int64_t token = int64_t{blockIdx.x} * kMoeTopkWarps + warp;
  if (token >= p.tokens) return;  // whole warps leave: no warp-wide step misses a lane
  topk_sigmoid_token<T, kV, kScanGroups>(p, token, threadIdx.x % 32, warp);
  device::pdl_trigger_at(p.trigger, Trigger::kAfterStores);
#endif
}

// ---- moe_align_block_size ---------------------------------------------------------------------------
// Up to kAlignWarpMaxIds ids one warp (moe_align_warp_kernel), below kAlignClusterMinIds the grid form
// (moe_align_grid_kernel; both described there). From there a cluster of kAlignClusterCtas, of kAlignWideCtas
// from kAlignWideMinIds (sm_90; one CTA below it), each CTA a contiguous slice of topk_ids and each warp a
// contiguous part of its CTA's. Two passes over a warp's ids, 32 at a time in order: the first counts them per
// expert in the warp's row (shared atomics), the second writes each id at its expert's base + the ids before it
// in the CTA, the warp and the round (the lanes of an expert in a round found by match_any or ballots). The
// bases come from the counts of every CTA (read through distributed shared memory): the experts' padded starts,
// plus the ids of earlier CTAs and warps. Stable, with no global atomics. Padding: one CTA fills the whole
// output first (coalesced); a cluster, whose CTAs would have to order that against each other's ids, writes
// each expert's padding with a warp after the scan.

constexpr int kAlignThreads = 512;
constexpr int kAlignWarps = kAlignThreads / 32;
// Rounds of 32 ids a warp loads before it ranks any (one CTA: a warp's ids of up to 256 tokens in one batch).
constexpr int kAlignBatch = 4, kAlignClusterBatch = 8;
// The launch by size (H200, top-8 of 256 experts, docs/benchmarks/moe.md): one warp up to 32 ids (T = 1 / 4: 1.45
// / 1.57 us, the grid form 2.09 / 2.02); the grid form below 4096 ids (T = 384: 4.63 us, the cluster 4.74; T = 512:
// 4.99 against 4.86), each of its CTAs counting all of them; a cluster of 8 with match_any from there; from 32768
// ids a cluster of 16 (where the GPU runs one, else 8) with ballots, where every round holds ids of ~32 experts and
// match_any takes longer (T = 4096 / 32768: 8.75 / 36.60 us, 8 CTAs 10.21 / 65.09).
constexpr int kAlignClusterCtas = 8, kAlignWideCtas = 16;
constexpr int32_t kAlignWarpMaxIds = 32, kAlignClusterMinIds = 4096, kAlignWideMinIds = 32768;

struct AlignParams {
  const void* ids;
  bool ids64;
  int32_t n;  // ids
  int experts, block_size;
  int32_t* sorted;
  int64_t sorted_len;
  int32_t* expert_ids;
  int64_t expert_ids_len;
  int32_t* total_out;
  Trigger trigger;  // at the start or after the wait (align_trigger)
  int32_t reach, reach_blocks;  // align_reach: the entries of sorted_token_ids the ids can take, and their blocks
};

// The most entries of sorted_token_ids n ids of E experts can take (each expert present pads by under a block):
// the outputs' least sizes, and where the entries every call pads begin.
constexpr int64_t align_reach(int64_t n, int64_t experts, int64_t block_size) {
  return n + (n < experts ? n : experts) * (block_size - 1);
}

__device__ __forceinline__ int expert_of(const AlignParams& p, int32_t i) {
  const int64_t v = p.ids64 ? static_cast<const int64_t*>(p.ids)[i] : static_cast<const int32_t*>(p.ids)[i];
  return v >= 0 && v < p.experts ? static_cast<int>(v) : -1;
}

#if defined(__CUDACC__) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900)
#define JITKERN_ALIGN_CLUSTER_OF(n) __cluster_dims__(n, 1, 1)
#else  // clusters are sm_90's: below it the cluster form is built as one CTA and never launched
#define JITKERN_ALIGN_CLUSTER_OF(n)
#endif

// The expert of the block at pos: the last one starting at or before it (empty experts share their successor's
// start), -1 past the total.
__device__ __forceinline__ int block_expert(const int* start, int E, int total, int64_t pos) {
  if (pos >= total) return -1;
  int lo = 0, hi = E - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (start[mid] <= pos) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Entries [from, to) of `out` set to `value` by thread t of `threads` (at least 3): 16-byte stores from the first aligned entry, the
// up to 3 entries before it and after the last whole vector one store each. I: the indices' type (int32_t where they
// fit: the warp form's stores wait behind its arithmetic).
template <typename I>
__device__ __forceinline__ void fill_entries(int32_t* out, I from, I to, int32_t value, I t, I threads) {
#ifdef __CUDACC__
  const I head = min(to - from, static_cast<I>((16 - reinterpret_cast<uintptr_t>(out + from) % 16) % 16 / 4));
  const I body = from + head, vectors = (to - body) / 4, end = body + vectors * 4;
  if (t < head) out[from + t] = value;
  if (t < to - end) out[end + t] = value;
  const int4 v = make_int4(value, value, value, value);
  for (I i = t; i < vectors; i += threads) reinterpret_cast<int4*>(out + body)[i] = v;
#endif
}

// Every entry of sorted_token_ids n, by the CTA's kAlignThreads threads.
__device__ __forceinline__ void align_fill(const AlignParams& p) { fill_entries<int64_t>(p.sorted, 0, p.sorted_len, p.n, threadIdx.x, kAlignThreads); }

// The experts of a batch of rounds from base (-1: past hi or out of range), lane l holding id base + r * 32 + l.
template <int kBatch>
__device__ __forceinline__ void load_batch(const AlignParams& p, int64_t base, int32_t hi, int (&e)[kBatch]) {
#ifdef __CUDACC__
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < kBatch; ++r) {
    const int64_t i = base + r * 32 + lane;  // 64-bit: a round may end past INT32_MAX
    e[r] = i < hi ? expert_of(p, static_cast<int32_t>(i)) : -1;
  }
#endif
}

// The lanes holding the same expert as this lane (-1 included): match_any (kBallots false), or one ballot per bit
// of expert + 1 (at most 10 for 512 experts).
template <bool kBallots>
__device__ __forceinline__ unsigned same_expert_lanes(int e, int experts) {
#ifdef __CUDACC__
  if constexpr (kBallots) {
    const unsigned v = static_cast<unsigned>(e + 1);
    unsigned peers = 0xffffffffu;
#pragma unroll
    for (int k = 0; (1 << k) <= kMoeMaxExperts; ++k) {
      const unsigned bit = 1u << k;
      if (bit > static_cast<unsigned>(experts)) break;  // e + 1 <= experts has no higher bit
      const unsigned set = __ballot_sync(0xffffffffu, v & bit);
      peers &= v & bit ? set : ~set;
    }
    return peers;
  } else {
    return __match_any_sync(0xffffffffu, e);
  }
#else
  return 0;
#endif
}

// A warp's ids [lo, hi) in batches of kBatch rounds of 32, in order (the first batch's experts given): f(the batch's
// first id, the lane's experts of its rounds).
template <int kBatch, typename F>
__device__ __forceinline__ void align_batches(const AlignParams& p, int32_t lo, int32_t hi, const int (&held)[kBatch], const F& f) {
  for (int64_t base = lo; base < hi; base += 32 * kBatch) {
    int e[kBatch];
    if (base == lo) {
#pragma unroll
      for (int r = 0; r < kBatch; ++r) e[r] = held[r];
    } else {
      load_batch(p, base, hi, e);
    }
    f(base, e);
  }
}

// A warp's ids [lo, hi) in rounds of 32, in order (the first batch's experts given): f(the lane's id, its expert or
// -1, lanes of the same expert, the expert's count in earlier rounds) after the round's count is added to row[expert].
template <int kBatch, bool kBallots, typename F>
__device__ __forceinline__ void align_walk(const AlignParams& p, int32_t lo, int32_t hi, const int (&held)[kBatch], uint32_t* row,
                                           const F& f) {
#ifdef __CUDACC__
  const int lane = threadIdx.x % 32;
  align_batches<kBatch>(p, lo, hi, held, [&](int64_t base, const int (&e)[kBatch]) {
#pragma unroll
    for (int r = 0; r < kBatch; ++r) {
      const unsigned peers = same_expert_lanes<kBallots>(e[r], p.experts);
      const uint32_t before = e[r] >= 0 ? row[e[r]] : 0;
      __syncwarp();
      if (e[r] >= 0 && (peers & ((1u << lane) - 1)) == 0) row[e[r]] = before + __popc(peers);
      __syncwarp();
      f(static_cast<int32_t>(base + r * 32 + lane), e[r], peers, before);
    }
  });
#endif
}

// A warp's ids [lo, hi) counted per expert into row (the first batch's experts given), by shared atomics: a
// count needs no order.
template <int kBatch>
__device__ __forceinline__ void align_count(const AlignParams& p, int32_t lo, int32_t hi, const int (&held)[kBatch], uint32_t* row) {
#ifdef __CUDACC__
  align_batches<kBatch>(p, lo, hi, held, [&](int64_t, const int (&e)[kBatch]) {
#pragma unroll
    for (int r = 0; r < kBatch; ++r)
      if (e[r] >= 0) atomicAdd(&row[e[r]], 1u);
  });
#endif
}

// Templates (kernel and launcher) so that only the module exporting the launcher compiles the kernel.
template <int kCtas, int kBatch, bool kBallots>
__global__ void JITKERN_ALIGN_CLUSTER_OF(kCtas) __launch_bounds__(kAlignThreads) moe_align_kernel(const __grid_constant__ AlignParams p) {
#ifdef __CUDACC__
  __shared__ uint32_t table[kAlignWarps][kMoeMaxExperts];  // per warp and expert: its ids, then the offset of its first
  __shared__ int cta_count[kMoeMaxExperts], start[kMoeMaxExperts], base[kMoeMaxExperts], pad_from[kMoeMaxExperts];
  device::pdl_trigger_at(p.trigger, Trigger::kStart);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, E = p.experts;
  const int cta = kCtas > 1 ? static_cast<int>(blockIdx.x) : 0;
  for (int i = tid; i < kAlignWarps * kMoeMaxExperts; i += kAlignThreads) (&table[0][0])[i] = 0;
  const auto share = [](int32_t lo, int32_t hi, int parts, int part) {  // part's piece of [lo, hi), whole rounds
    const int64_t each = ((int64_t{hi} - lo + parts - 1) / parts + 31) / 32 * 32;
    const int64_t a = min(int64_t{hi}, lo + part * each);
    return make_int2(static_cast<int>(a), static_cast<int>(min(int64_t{hi}, a + each)));
  };
  const int2 mine = share(0, p.n, kCtas, cta);
  const int2 ids = share(mine.x, mine.y, kAlignWarps, warp);
  device::pdl_wait_primary(p.trigger);
  int held[kBatch];  // the first batch's experts, for both passes
  load_batch(p, ids.x, ids.y, held);
  if constexpr (kCtas == 1) align_fill(p);  // the ids overwrite theirs after the barriers below (one CTA: ordered by them)
  __syncthreads();
  uint32_t* row = table[warp];
  align_count<kBatch>(p, ids.x, ids.y, held, row);
  __syncthreads();
  int count = 0, earlier = 0;  // thread e: expert e's ids, those in earlier CTAs
  if (tid < E) {               // the warps' counts -> each warp row's offset in the CTA
    uint32_t c[kAlignWarps];
#pragma unroll
    for (int w = 0; w < kAlignWarps; ++w) c[w] = table[w][tid];
#pragma unroll
    for (int w = 0; w < kAlignWarps; ++w) table[w][tid] = static_cast<uint32_t>(count), count += static_cast<int>(c[w]);
    if constexpr (kCtas > 1) cta_count[tid] = count;
  }
  if constexpr (kCtas > 1) {
    device::ptx::cluster_arrive();
    device::ptx::cluster_wait();
    if (tid < E) {
      count = 0;
#pragma unroll
      for (int c = 0; c < kCtas; ++c) {
        const int v = device::ptx::ld_shared_cluster_s32(&cta_count[tid], static_cast<uint32_t>(c));
        count += v;
        earlier += c < cta ? v : 0;
      }
    }
    device::ptx::cluster_arrive();  // this CTA's counts are read: the others may leave (wait at the end)
  }
  const int padded = (count + p.block_size - 1) / p.block_size * p.block_size;
  int total;
  const int first = device::cta::exclusive_sum_once(padded, total);  // its barriers publish the table's offsets
  if (tid < E) start[tid] = first, base[tid] = first + earlier, pad_from[tid] = first + count;
  if (cta == 0 && tid == 0) *p.total_out = total;
  const int64_t at = int64_t{cta} * kAlignThreads + tid, stride = int64_t{kCtas} * kAlignThreads;
  if constexpr (kCtas > 1)
    for (int64_t s = total + at; s < p.sorted_len; s += stride) p.sorted[s] = p.n;  // after the last expert
  __syncthreads();
  if constexpr (kCtas > 1) {
    // Each expert's slots after its ids: a warp an expert, so that the stores are consecutive.
    for (int e = cta * kAlignWarps + warp; e < E; e += kCtas * kAlignWarps) {
      const int end = e + 1 < E ? start[e + 1] : total;
      for (int s = pad_from[e] + lane; s < end; s += 32) p.sorted[s] = p.n;
    }
  }
  for (int64_t b = at; b < p.expert_ids_len; b += stride) p.expert_ids[b] = block_expert(start, E, total, b * p.block_size);
  const unsigned lanes_below = (1u << lane) - 1;
  align_walk<kBatch, kBallots>(p, ids.x, ids.y, held, row, [&](int32_t i, int e, unsigned peers, uint32_t before) {
    if (e >= 0) p.sorted[base[e] + static_cast<int>(before) + __popc(peers & lanes_below)] = i;
  });
  if constexpr (kCtas > 1) device::ptx::cluster_wait();
#endif
}

// The warp form, up to kAlignWarpMaxIds ids (a few tokens): one warp, a lane an id. The lanes of an expert by
// match_any; an expert's first block is the sum of the blocks of the smaller experts present, each counted once
// (by the lane that leads its expert). The entries past align_reach (padding whatever the ids: a caller's buffers
// sized for more tokens) are the other CTAs' (launch_align_warp), so that one warp's stores do not grow with them.
template <typename = void>
__global__ void __launch_bounds__(32) moe_align_warp_kernel(const __grid_constant__ AlignParams p) {
#ifdef __CUDACC__
  device::pdl_trigger_secondary();  // a few CTAs: at their start (host::pdl_early_trigger)
  const int lane = threadIdx.x, bs = p.block_size;
  device::pdl_wait_primary();
  if (blockIdx.x > 0) {
    const int64_t t = int64_t{blockIdx.x - 1} * 32 + lane, threads = int64_t{gridDim.x - 1} * 32;
    fill_entries<int64_t>(p.sorted, p.reach, p.sorted_len, p.n, t, threads);
    fill_entries<int64_t>(p.expert_ids, p.reach_blocks, p.expert_ids_len, -1, t, threads);
    return;
  }
  const int e = lane < p.n ? expert_of(p, lane) : -1;
  fill_entries<int>(p.sorted, 0, p.reach, p.n, lane, 32);  // while the load is in flight; the ids overwrite theirs after the __syncwarp below
  const unsigned peers = __match_any_sync(0xffffffffu, e);
  const int count = __popc(peers), rank = __popc(peers & ((1u << lane) - 1));
  // An expert's blocks (at most 32: 32 ids), counted by its leading lane, packed under its expert so that one
  // shuffle carries both and `word < e * 64` is `expert < e`.
  const int blocks = e >= 0 && rank == 0 ? (bs >= 32 ? 1 : (count + bs - 1) / bs) : 0;
  const int word = e * 64 + blocks;
  int start_blocks = 0;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int other = __shfl_sync(0xffffffffu, word, j);
    start_blocks += other < e * 64 ? other & 63 : 0;
  }
  const int total_blocks = static_cast<int>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(blocks)));
  const int start = start_blocks * bs, total = total_blocks * bs;
  __syncwarp();
  if (e >= 0) p.sorted[start + rank] = lane;
  for (int b = start_blocks; b < start_blocks + blocks; ++b) p.expert_ids[b] = e;
  for (int b = total_blocks + lane; b < p.reach_blocks; b += 32) p.expert_ids[b] = -1;
  if (lane == 0) *p.total_out = total;
#endif
}

// The grid form, below kAlignClusterMinIds ids: ceil(n / kAlignThreads) CTAs, no cluster. CTA c ranks the chunk
// [c * kAlignThreads, + kAlignThreads), an id a thread, and counts every id of the other chunks (shared atomics:
// those before its chunk apart), so that each CTA has every expert's start without the others. A warp's lanes of
// an expert are the bits they OR into the warp's row: an id's place is its expert's start + the ids of earlier
// chunks, of earlier warps of the chunk and of its lanes below. One CTA fills the output first (coalesced); more
// write each expert's padding with a warp (an id's CTA is not ordered against the others' stores).
template <typename = void>
__global__ void __launch_bounds__(kAlignThreads) moe_align_grid_kernel(const __grid_constant__ AlignParams p) {
#ifdef __CUDACC__
  static_assert(kAlignThreads >= kMoeMaxExperts, "a thread per expert");
  constexpr int kLoads = 8;  // chunks a thread loads before it counts any
  __shared__ __align__(16) uint32_t table[kAlignWarps][kMoeMaxExperts];  // per warp and expert: its lanes, then the place of its first
  __shared__ int before[kMoeMaxExperts], after[kMoeMaxExperts], start[kMoeMaxExperts], pad_from[kMoeMaxExperts];
  device::pdl_trigger_at(p.trigger, Trigger::kStart);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, E = p.experts, bs = p.block_size;
  const int chunk = static_cast<int>(blockIdx.x), chunks = static_cast<int>(gridDim.x);
  for (int i = tid; i < kAlignWarps * kMoeMaxExperts / 4; i += kAlignThreads) reinterpret_cast<uint4*>(&table[0][0])[i] = uint4{};
  if (tid < kMoeMaxExperts) before[tid] = after[tid] = 0;
  __syncthreads();
  device::pdl_wait_primary(p.trigger);
  int mine = -1;  // this thread's expert in the CTA's chunk
  for (int k0 = 0; k0 < chunks; k0 += kLoads) {
    int e[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int64_t i = int64_t{k0 + u} * kAlignThreads + tid;
      e[u] = k0 + u < chunks && i < p.n ? expert_of(p, static_cast<int32_t>(i)) : -1;
    }
    if (chunks == 1) align_fill(p);  // while the loads are in flight; the ids overwrite theirs after the barriers below
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      if (e[u] < 0) continue;
      if (k0 + u == chunk) {
        mine = e[u];
        atomicOr(&table[warp][e[u]], 1u << lane);
      } else {
        atomicAdd(k0 + u < chunk ? &before[e[u]] : &after[e[u]], 1);
      }
    }
  }
  __syncthreads();
  const unsigned peers = mine >= 0 ? table[warp][mine] : 0u;
  uint32_t lanes[kAlignWarps];
  int count = 0, earlier = 0;  // thread e: expert e's ids, those of earlier chunks
  if (tid < E) {
#pragma unroll
    for (int w = 0; w < kAlignWarps; ++w) lanes[w] = table[w][tid], count += __popc(lanes[w]);
    earlier = before[tid];
    count += earlier + after[tid];
  }
  const int padded = (count + bs - 1) / bs * bs;
  int total;
  const int first = device::cta::exclusive_sum_once(padded, total);  // its barriers: every peers read before the table is rewritten
  if (tid < E) {
    int at = first + earlier;
#pragma unroll
    for (int w = 0; w < kAlignWarps; ++w) table[w][tid] = static_cast<uint32_t>(at), at += __popc(lanes[w]);
    start[tid] = first, pad_from[tid] = first + count;
    for (int b = first / bs + chunk; b < (first + padded) / bs; b += chunks) p.expert_ids[b] = tid;
  }
  if (chunk == 0 && tid == 0) *p.total_out = total;
  const int64_t at = int64_t{chunk} * kAlignThreads + tid, stride = int64_t{chunks} * kAlignThreads;
  for (int64_t b = total / bs + at; b < p.expert_ids_len; b += stride) p.expert_ids[b] = -1;
  if (chunks > 1)
    for (int64_t s = total + at; s < p.sorted_len; s += stride) p.sorted[s] = p.n;  // after the last expert
  __syncthreads();
  if (mine >= 0) p.sorted[table[warp][mine] + __popc(peers & ((1u << lane) - 1))] = static_cast<int32_t>(at);
  if (chunks > 1) {
    // Each expert's slots after its ids, a warp an expert (consecutive stores): lane j holds the j-th expert of the warp.
    const int gw = chunk * kAlignWarps + warp, warps = chunks * kAlignWarps, held = gw + lane * warps;
    int from = 0, end = 0;
    if (held < E) from = pad_from[held], end = held + 1 < E ? start[held + 1] : total;
    for (int j = 0; j < 32 && gw + j * warps < E; ++j) {
      const int a = __shfl_sync(0xffffffffu, from, j), b = __shfl_sync(0xffffffffu, end, j);
      for (int s = a + lane; s < b; s += 32) p.sorted[s] = p.n;
    }
  }
#endif
}

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
template <typename T>
struct MoeOps {
  // topk_weights [T, k] fp32, topk_ids [T, k] int32/int64 <- the k experts of highest softmax(gating_output)
  // [T, E] per token (renormalize: the k weights divided by their sum).
  static void topk_softmax(jitkern::TensorView topk_weights, jitkern::TensorView topk_ids, jitkern::TensorView gating_output,
                           bool renormalize) {
    DLDevice device;
    const TopkParams p = params(topk_weights, topk_ids, gating_output, renormalize, device);
    launch<false>(p, device, nullptr);
  }

  // The grouped form (DeepSeek-V2): with num_expert_group > 1 only the experts of the topk_group groups whose
  // best logit ranks highest; weights the chosen experts' softmax over all experts (renormalized: divided by
  // their sum), times routed_scaling_factor.
  static void topk_softmax_grouped(jitkern::TensorView topk_weights, jitkern::TensorView topk_ids, jitkern::TensorView gating_output,
                                   bool renormalize, int64_t num_expert_group, int64_t topk_group, double routed_scaling_factor) {
    DLDevice device;
    TopkParams p = params(topk_weights, topk_ids, gating_output, renormalize, device);
    grouped_params(p, num_expert_group, topk_group, routed_scaling_factor);
    launch<false, true>(p, device, nullptr);
  }

  // The sigmoid form: scores s = sigmoid(gating_output), ranked by s + correction_bias ([E], optional; fp32,
  // bf16 or fp16, added as its value in fp32);
  // with num_expert_group > 1 only the experts of the topk_group groups (contiguous runs of E / groups)
  // whose two best biased scores sum highest; weights s of the chosen experts (renormalized: divided by
  // their sum), times routed_scaling_factor.
  static void topk_sigmoid(jitkern::TensorView topk_weights, jitkern::TensorView topk_ids, jitkern::TensorView gating_output,
                           jitkern::Optional<jitkern::TensorView> correction_bias, bool renormalize, int64_t num_expert_group,
                           int64_t topk_group, double routed_scaling_factor) {
    DLDevice dev;
    const TopkParams p = sigmoid_params(topk_weights, topk_ids, gating_output, correction_bias, renormalize, num_expert_group, topk_group,
                                        routed_scaling_factor, dev);
    launch<true>(p, dev, nullptr);
  }

  // topk_sigmoid's arguments checked, as the kernels' parameters.
  static TopkParams sigmoid_params(jitkern::TensorView topk_weights, jitkern::TensorView topk_ids, jitkern::TensorView gating_output,
                                   jitkern::Optional<jitkern::TensorView> correction_bias, bool renormalize, int64_t num_expert_group,
                                   int64_t topk_group, double routed_scaling_factor, DLDevice& dev) {
    using namespace host;
    TopkParams p = params(topk_weights, topk_ids, gating_output, renormalize, dev);
    if (correction_bias.has_value()) {
      auto device = SymbolicDevice{};
      device.set_value(dev);
      auto dtype = SymbolicDType{};
      TensorMatcher({p.experts}).with_dtype<float, bf16_t, fp16_t>(dtype).with_device(device_v<kDLCUDA>, device).verify(*correction_bias,
                                                                                                                  "correction_bias");
      p.bias = correction_bias->data_ptr();
      p.bias_type = dtype.is_type<float>() ? TopkBias::kFloat : dtype.is_type<bf16_t>() ? TopkBias::kBf16 : TopkBias::kHalf;
    }
    grouped_params(p, num_expert_group, topk_group, routed_scaling_factor);
    return p;
  }

  // The grouped selection's arguments checked, into p.
  static void grouped_params(TopkParams& p, int64_t num_expert_group, int64_t topk_group, double routed_scaling_factor) {
    using namespace host;
    RuntimeCheck(num_expert_group >= 1 && num_expert_group <= kMoeMaxGroups && p.experts % num_expert_group == 0,
                 "num_expert_group must be 1-", kMoeMaxGroups, " and divide the number of experts (", p.experts, "), got ", num_expert_group);
    const int64_t per_group = p.experts / num_expert_group;
    RuntimeCheck(num_expert_group == 1 || per_group >= 2, "grouped selection needs at least 2 experts per group, got ", per_group);
    RuntimeCheck(topk_group >= 1 && topk_group <= num_expert_group, "topk_group must be 1-", num_expert_group, ", got ", topk_group);
    RuntimeCheck(p.k <= topk_group * per_group, "k (", p.k, ") exceeds the experts of topk_group groups (", topk_group * per_group, ")");
    RuntimeCheck(std::isfinite(routed_scaling_factor), "routed_scaling_factor must be finite, got ", routed_scaling_factor);
    p.groups = static_cast<int>(num_expert_group);
    p.topk_group = static_cast<int>(topk_group);
    p.scaling = static_cast<float>(routed_scaling_factor);
  }

  // The kernel for p (its checked parameters), the PDL trigger by the grid (host::pdl_trigger_for); `forced`:
  // that one instead.
  template <bool kSigmoid, bool kGroupedSoftmax = false>
  static void launch(const TopkParams& p, DLDevice device, const Trigger* forced) {
    using namespace host;
    if (p.tokens == 0) return;
    const int64_t grid = div_ceil(p.tokens, kMoeTopkWarps);
    RuntimeCheck(grid <= 0x7fffffff, "too many tokens for one launch: ", p.tokens);
    const Trigger trigger = forced != nullptr ? *forced
                                              : pdl_trigger_for(grid, kMoeTopkWarps * 32, runtime::get_sm_count(device.device_id),
                                                                row_policy(device).threads_per_sm);
    LaunchKernel run(static_cast<unsigned>(grid), kMoeTopkWarps * 32, device);
    run.enable_pdl();
    const auto go = [&](auto v) {
      constexpr int kV = decltype(v)::value;
      // A lane's experts load as vectors where every row (and the bias) starts at a multiple of the vector.
      constexpr int64_t kChunkBytes = sizeof(T) * kTopkChunk<T, kV>;
      TopkParams q = p;
      q.trigger = trigger;
      q.vector_rows = reinterpret_cast<uintptr_t>(p.gating) % kChunkBytes == 0 && p.gating_stride * int64_t{sizeof(T)} % kChunkBytes == 0;
      if constexpr (kSigmoid) {
        q.vector_rows &= p.bias_type != TopkBias::kFloat || reinterpret_cast<uintptr_t>(p.bias) % (sizeof(float) * kSigmoidBiasVec<T, kV>) == 0;
        if (p.groups == 1 || groups_by_shuffle<T, kV>(p.experts / p.groups)) {
          run(topk_sigmoid_kernel<T, kV, false>, q);
        } else {
          run(topk_sigmoid_kernel<T, kV, true>, q);
        }
      } else if constexpr (kGroupedSoftmax) {
        if (p.groups == 1 || groups_by_shuffle<T, kV>(p.experts / p.groups)) {
          run(topk_softmax_kernel<T, kV, true, false>, q);
        } else {
          run(topk_softmax_kernel<T, kV, true, true>, q);
        }
      } else {
        run(topk_softmax_kernel<T, kV>, q);
      }
    };
    if (p.experts <= 32) go(std::integral_constant<int, 1>{});
    else if (p.experts <= 64) go(std::integral_constant<int, 2>{});
    else if (p.experts <= 128) go(std::integral_constant<int, 4>{});
    else if (p.experts <= 256) go(std::integral_constant<int, 8>{});
    else go(std::integral_constant<int, 16>{});
  }

 private:
  static TopkParams params(jitkern::TensorView topk_weights, jitkern::TensorView topk_ids, jitkern::TensorView gating_output,
                           bool renormalize, DLDevice& device_out) {
    using namespace host;
    auto N = SymbolicSize{"num_tokens"}, E = SymbolicSize{"num_experts"}, K = SymbolicSize{"topk"};
    auto gs = SymbolicSize{"gating_output_row_stride"}, ws = SymbolicSize{"topk_weights_row_stride"}, is = SymbolicSize{"topk_ids_row_stride"};
    auto device = SymbolicDevice{};
    TensorMatcher({N, E}).with_strides({gs, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(gating_output,
                                                                                                                   "gating_output");
    TensorMatcher({N, K}).with_strides({ws, 1}).with_dtype<float>().with_device(device_v<kDLCUDA>, device).verify(topk_weights, "topk_weights");
    TensorMatcher({N, K}).with_strides({is, 1}).with_dtype<int32_t, int64_t>().with_device(device_v<kDLCUDA>, device).verify(topk_ids,
                                                                                                                          "topk_ids");
    RuntimeCheck(E.unwrap() >= 1 && E.unwrap() <= kMoeMaxExperts, "gating_output: the number of experts (its last dimension) must be 1-",
                 kMoeMaxExperts, ", got ", E.unwrap());
    RuntimeCheck(K.unwrap() >= 1 && K.unwrap() <= kMoeMaxTopk && K.unwrap() <= E.unwrap(), "topk_weights, topk_ids: topk (their last dimension) must be 1-",
                 kMoeMaxTopk, " and at most the number of experts (", E.unwrap(), "), got ", K.unwrap());
    const auto stride = [](const SymbolicSize& s) { return s.has_value() ? s.unwrap() : int64_t{0}; };
    TopkParams p{};
    p.gating = gating_output.data_ptr();
    p.gating_stride = stride(gs);
    p.weights = static_cast<float*>(topk_weights.data_ptr());
    p.weights_stride = stride(ws);
    p.ids = topk_ids.data_ptr();
    p.ids_stride = stride(is);
    p.ids64 = is_type<int64_t>(topk_ids.dtype());
    p.tokens = N.unwrap();
    p.experts = static_cast<int>(E.unwrap());
    p.k = static_cast<int>(K.unwrap());
    p.renormalize = renormalize;
    p.groups = p.topk_group = 1;
    p.scaling = 1.0f;
    // gating_output is only read: its rows may overlap (a broadcast)
    check_rows_disjoint(p.tokens, p.k, p.weights_stride, "topk_weights");
    check_rows_disjoint(p.tokens, p.k, p.ids_stride, "topk_ids");
    device_out = device.unwrap();
    return p;
  }
};

// moe_align_block_size's arguments checked, as the kernel's parameters.
template <typename = void>
AlignParams align_params(jitkern::TensorView topk_ids, int64_t num_experts, int64_t block_size, jitkern::TensorView sorted_token_ids,
                         jitkern::TensorView expert_ids, jitkern::TensorView num_tokens_post_pad, DLDevice& dev) {
  using namespace host;
  auto n = SymbolicSize{"num_ids"}, S = SymbolicSize{"sorted_token_ids_size"}, B = SymbolicSize{"expert_ids_size"};
  auto device = SymbolicDevice{};
  TensorMatcher({n}).with_dtype<int32_t, int64_t>().with_device(device_v<kDLCUDA>, device).verify(topk_ids, "topk_ids");
  TensorMatcher({S}).with_dtype<int32_t>().with_device(device_v<kDLCUDA>, device).verify(sorted_token_ids, "sorted_token_ids");
  TensorMatcher({B}).with_dtype<int32_t>().with_device(device_v<kDLCUDA>, device).verify(expert_ids, "expert_ids");
  TensorMatcher({1}).with_dtype<int32_t>().with_device(device_v<kDLCUDA>, device).verify(num_tokens_post_pad, "num_tokens_post_pad");
  const std::pair<jitkern::TensorView, const char*> operands[] = {
      {topk_ids, "topk_ids"}, {sorted_token_ids, "sorted_token_ids"}, {expert_ids, "expert_ids"}, {num_tokens_post_pad, "num_tokens_post_pad"}};
  for (int i = 0; i < 4; ++i)  // the outputs are written at once, topk_ids read meanwhile
    for (int j = i + 1; j < 4; ++j) check_distinct(operands[i].first, operands[j].first, operands[i].second, operands[j].second);
  RuntimeCheck(num_experts >= 1 && num_experts <= kMoeMaxExperts, "num_experts must be 1-", kMoeMaxExperts, ", got ", num_experts);
  RuntimeCheck(block_size >= 1 && block_size <= 65536, "block_size must be 1-65536, got ", block_size);
  const int64_t ids = n.unwrap();
  const int64_t need = align_reach(ids, num_experts, block_size);
  RuntimeCheck(need <= INT32_MAX, "too many ids: ", ids);
  RuntimeCheck(S.unwrap() >= need, "sorted_token_ids must hold at least topk_ids.numel() + min(topk_ids.numel(), num_experts) * "
               "(block_size - 1) = ", need, " entries, got ", S.unwrap());
  RuntimeCheck(B.unwrap() >= div_ceil(need, block_size), "expert_ids must hold at least ", div_ceil(need, block_size), " entries, got ",
               B.unwrap());
  dev = device.unwrap();
  return AlignParams{topk_ids.data_ptr(), is_type<int64_t>(topk_ids.dtype()), static_cast<int32_t>(ids), static_cast<int>(num_experts),
                     static_cast<int>(block_size), static_cast<int32_t*>(sorted_token_ids.data_ptr()), S.unwrap(),
                     static_cast<int32_t*>(expert_ids.data_ptr()), B.unwrap(), static_cast<int32_t*>(num_tokens_post_pad.data_ptr()),
                     Trigger::kStart, static_cast<int32_t>(need), static_cast<int32_t>(div_ceil(need, block_size))};
}

// Where a launch of `ctas` CTAs triggers the next one (PDL): at its start for one CTA, after its wait for more,
// where the launches queued behind a start trigger crowd the SMs (host::pdl_trigger_for's reason; H200, run
// 0731db9: the grid form at T = 128 / 256 4.22 / 4.09 us against 4.39 / 4.28, the cluster of 16 at T = 4096 8.16
// against 8.60).
inline Trigger align_trigger(int64_t ctas) { return ctas > 1 ? Trigger::kAfterWait : Trigger::kStart; }

// Whether the device runs moe_align_kernel<kCtas, ...> as a cluster of kCtas (beyond the portable 8, allowed
// kernel by kernel: H100 and H200 run 16, a MIG slice may not); asked once per device.
template <int kCtas, int kBatch, bool kBallots>
bool align_cluster_fits(DLDevice dev) {
  static_assert(kCtas > 8, "8 CTAs are the portable cluster size");
  constexpr int kDevices = 64;
  static int known[kDevices] = {};  // per device: 0 not asked, 1 fits, 2 does not (atomic builtins: NVRTC has no <atomic>)
  const int id = dev.device_id;
  if (id < 0 || id >= kDevices) return false;
  int state = __atomic_load_n(&known[id], __ATOMIC_RELAXED);
  if (state == 0) {
    const host::DeviceGuard guard(id);
    const void* kernel = host::kernel_handle(moe_align_kernel<kCtas, kBatch, kBallots>);
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(kCtas);
    config.blockDim = dim3(kAlignThreads);
    int clusters = 0;
    bool asked = host::runtime::set_kernel_attribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1, id) == cudaSuccess;
    if (asked && cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
      asked = false;
      (void)cudaGetLastError();  // a refusal is an answer, not an error for the next launch
    }
    const bool fits = asked && clusters > 0;
    state = fits ? 1 : 2;
    __atomic_store_n(&known[id], state, __ATOMIC_RELAXED);
  }
  return state == 1;
}

// The alignment of p's ids: a cluster of kCtas CTAs or one CTA (kCtas = 1), kBatch rounds of ids loaded at once,
// lanes of an expert found by ballots or match_any.
template <int kCtas, int kBatch, bool kBallots>
void launch_align(AlignParams p, DLDevice dev, const Trigger* forced = nullptr) {
  if constexpr (kCtas > 8)
    host::RuntimeCheck(align_cluster_fits<kCtas, kBatch, kBallots>(dev), "this GPU cannot run a cluster of ", kCtas, " CTAs");
  p.trigger = forced != nullptr ? *forced : align_trigger(kCtas);
  host::LaunchKernel(kCtas, kAlignThreads, dev).enable_pdl()(moe_align_kernel<kCtas, kBatch, kBallots>, p);
}

// The grid form's launch: a CTA per kAlignThreads ids (`forced`: that PDL trigger instead of align_trigger's).
template <typename = void>
void launch_align_grid(AlignParams p, DLDevice dev, const Trigger* forced = nullptr) {
  const int64_t chunks = host::max<int64_t>(1, host::div_ceil(int64_t{p.n}, kAlignThreads));
  p.trigger = forced != nullptr ? *forced : align_trigger(chunks);
  host::LaunchKernel(static_cast<unsigned>(chunks), kAlignThreads, dev).enable_pdl()(moe_align_grid_kernel<>, p);
}

// The warp form's launch: its warp, and a CTA of 32 per kAlignTailBytes of the outputs past align_reach (at most
// kAlignTailCtas, looping beyond).
constexpr int64_t kAlignTailBytes = 2048, kAlignTailCtas = 256;
template <typename = void>
void launch_align_warp(const AlignParams& p, DLDevice dev) {
  const int64_t tail = (p.sorted_len - p.reach + p.expert_ids_len - p.reach_blocks) * 4;
  const int64_t ctas = 1 + host::min(host::div_ceil(tail, kAlignTailBytes), kAlignTailCtas);
  host::LaunchKernel(static_cast<unsigned>(ctas), 32, dev).enable_pdl()(moe_align_warp_kernel<>, p);
}

// topk_ids (int32/int64, contiguous, any shape: its n ids in order) -> sorted_token_ids [>= n + min(n, E) *
// (block_size - 1)] (int32): every expert's ids (their positions in topk_ids) in order, padded with n to
// a multiple of block_size, then n to the end; expert_ids [>= ceil(that / block_size)] (int32): each
// block's expert, -1 after the last; num_tokens_post_pad [1] (int32): the padded total.
template <typename = void>
void moe_align_block_size(jitkern::TensorView topk_ids, int64_t num_experts, int64_t block_size, jitkern::TensorView sorted_token_ids,
                          jitkern::TensorView expert_ids, jitkern::TensorView num_tokens_post_pad) {
  DLDevice dev;
  const AlignParams p = align_params<>(topk_ids, num_experts, block_size, sorted_token_ids, expert_ids, num_tokens_post_pad, dev);
  if (p.n <= kAlignWarpMaxIds) {
    launch_align_warp<>(p, dev);
  } else if (p.n < kAlignClusterMinIds) {
    launch_align_grid<>(p, dev);
  } else if (host::runtime::get_arch(dev.device_id) < 90) {
    launch_align<1, kAlignBatch, false>(p, dev);
  } else if (p.n < kAlignWideMinIds) {
    launch_align<kAlignClusterCtas, kAlignClusterBatch, false>(p, dev);
  } else if (align_cluster_fits<kAlignWideCtas, kAlignClusterBatch, true>(dev)) {
    launch_align<kAlignWideCtas, kAlignClusterBatch, true>(p, dev);
  } else {
    launch_align<kAlignClusterCtas, kAlignClusterBatch, true>(p, dev);
  }
}
#endif  // __CUDACC_RTC__

}  // namespace jitkern_moe
