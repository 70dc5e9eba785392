// The MoE combine family: each token's top-k expert outputs summed into one row. moe_sum adds them;
// moe_weighted_sum multiplies each by its router weight (times routed_scaling_factor), skips the experts
// whose id is negative (expert parallelism's experts of other ranks) and adds the shared expert's row.
// fp16/bf16/fp32 rows, fp32 accumulation, one rounding to the output's type (torch's sum and its
// float32 weighted sum round the same way).
#pragma once

#include <jitkern/policy.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/type.cuh>
#include <jitkern/utils.cuh>
#include <jitkern/vec.cuh>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace jitkern_moe_combine {

using device::AlignedVector;

constexpr int kMaxTopk = 64;
// A CTA's most threads (a vector of the row each; the launch picks the width under it) and the CTAs an SM holds of
// them: the cap puts the kernel at 32 registers, 2048 threads an SM, so that 256 tokens of 7168 bf16 fit the SMs at once.
constexpr int kMaxCta = 512;
constexpr int kCtasPerSm = 4;
// A token's row of 16-byte vectors goes to CTAs of at most kMaxCta threads (7168 bf16: 2 of 448) where the grid is
// one wave of more than kWideRowThreadsPerSm threads an SM (76-301 tokens of 7168 on an H200), else of at most
// kNarrowCta (4 of 224): measured the faster at each size.
constexpr int64_t kWideRowThreadsPerSm = 512;
constexpr int kNarrowCta = 256;
// Loads a thread keeps in flight (experts' rows): rows of 16 bytes within the register cap, decode's
// rows of 8 bytes (whose grids leave registers unused), rows without vectors.
constexpr int kDepth16 = 3;
constexpr int kDepthDecode = 8;
// Decode grids: at most kDecodeThreadsPerSm threads of 16-byte vectors per SM (18 tokens of 7168 on an H200) take
// 8-byte vectors: the ring in CTAs of at most kDecodeCta (built for k = 8: throughout; with k read at run time up to
// kRingDecodeThreadsPerSm, one token of 7168: 0.91 against the batched kernel's 1.12 us), the batched kernel above
// (16 tokens: 1.31 against the runtime-k ring's 1.44).
constexpr int64_t kDecodeThreadsPerSm = 128;
constexpr int64_t kRingDecodeThreadsPerSm = 8;
constexpr int kDecodeCta = 128;
// The k of the unrolled kernels (DeepSeek-V3's and Qwen3's top 8), and their 16-byte loads in flight: 4 within the
// 32 registers, where the runtime loop holds 3.
constexpr int kFixedK = 8;
constexpr int kDepthFixedK16 = 4;

// Where the kernel lets the next launch start (PDL), by its grid: host::pdl_trigger_for.
using Trigger = device::PdlTrigger;

// input [tokens, k, hidden] (element strides per token and per expert), out [tokens, hidden].
template <typename T>
struct Combine {
  const T* in;
  int64_t in_token_stride, in_k_stride;
  T* out;
  int64_t out_stride;
  const float* weights;  // [tokens, k] with row stride weights_stride, or null (moe_sum)
  int64_t weights_stride;
  const void* ids;  // [tokens, k] int32 or int64 (ids64), or null: an expert with a negative id is skipped
  int64_t ids_stride;
  bool ids64;
  const T* shared;  // [tokens, hidden], or null
  int64_t shared_stride;
  float scale;  // routed_scaling_factor
  int k;
  int64_t tokens, hidden, row_vecs;  // row_vecs: hidden / the vector's elements
  Trigger trigger;
};

// A vector of kBytes held as raw words: a vector of elements kept across loop iterations took a register per element.
template <int kBytes>
constexpr auto raw_words() {
  static_assert(kBytes == 16 || kBytes == 8 || kBytes == 4 || kBytes == 2);
  if constexpr (kBytes == 16) return uint4{};
  else if constexpr (kBytes == 8) return uint2{};
  else if constexpr (kBytes == 4) return uint32_t{};
  else return uint16_t{};
}
template <int kBytes>
using RawWords = decltype(raw_words<kBytes>());

// acc = fma(w_j, x_j, acc) over the experts j in order (w_j = 1 without weights: an exact add), one rounding to T. A
// thread's vector of kBytes; kDepth rows' loads kept in flight, each ring slot refilled with the expert kDepth ahead
// once its own is added. Grid: x = the CTAs of one token's row (launched one after another), y = tokens (at most 65535
// a launch). kMinCtas: CTAs of kCta an SM holds (a register cap). kK > 0: k is kK, the loop unrolled: a deeper ring
// within the cap and none of the runtime loop's bookkeeping (its weighted path, ids and shared row included, measured
// slower than the batched kernels). The weighted sum's kernel (weights only, no ids or shared row) is one of k = kK.
template <typename T, int kBytes, int kCta, int kMinCtas, int kDepth, bool kWeighted, int kK = 0>
__global__ void __launch_bounds__(kCta, kMinCtas) combine_kernel(const __grid_constant__ Combine<T> p) {
  static_assert(!kWeighted || (kK > 0 && kK <= 32), "the weighted kernel takes k = kK, a weight a lane");
#ifdef __CUDACC__
  constexpr int kVec = kBytes / static_cast<int>(sizeof(T));
  using Raw = RawWords<kBytes>;
  const int64_t v = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int lane = static_cast<int>(threadIdx.x % 32);
  // The weighted sum's warps stay whole for the weights' shuffles: a lane past the row reads its first vector, stores
  // nothing.
  if (kWeighted ? v - lane >= p.row_vecs : v >= p.row_vecs) return;
  const bool live = !kWeighted || v < p.row_vecs;
  const int64_t col = v * kVec;
  // The parameters and addresses before the PDL wait, where their loads overlap the kernel before.
  const int64_t token = blockIdx.y;
  const int k = kK > 0 ? kK : p.k;
  const T* next = p.in + token * p.in_token_stride + (live ? col : 0);  // expert j's vector at step j
  device::pdl_trigger_at(p.trigger, Trigger::kStart);
  device::pdl_wait_primary(p.trigger);
  // Lane i holds expert i's weight, shuffled to the warp at its step: one load a thread, not one per expert (a weight
  // a ring slot took registers past the cap: its spill waited for the load inside the loop).
  float w_lane = 0.0f;
  if constexpr (kWeighted) {
    if (lane < k) w_lane = p.weights[token * p.weights_stride + lane];
  }
  bool use[kDepth];
  Raw x[kDepth];
  const auto fetch = [&](int slot, int j) {
    use[slot] = j < k;
    if (use[slot]) x[slot] = *reinterpret_cast<const Raw*>(next);
    next += p.in_k_stride;
  };
  float acc[kVec] = {};
#pragma unroll
  for (int i = 0; i < kDepth; ++i) fetch(i, i);
#pragma unroll(kK > 0 ? kK : 1)
  for (int j0 = 0; j0 < k; j0 += kDepth) {
#pragma unroll
    for (int i = 0; i < kDepth; ++i) {
      const int j = j0 + i;
      // The scale applied here, not to the lane's weight: a multiply there waited for the weight before the rows'
      // loads went out.
      float scaled = 1.0f;
      if constexpr (kWeighted) {
        const float w = __shfl_sync(~0u, w_lane, j % 32);
        if (j < k) scaled = w * p.scale;
      }
      if (use[i]) {
        AlignedVector<T, kVec> e;
        __builtin_memcpy(&e, &x[i], sizeof(e));
#pragma unroll
        for (int n = 0; n < kVec; ++n) acc[n] = kWeighted ? fmaf(scaled, device::cast<float>(e[n]), acc[n]) : acc[n] + device::cast<float>(e[n]);
      }
      fetch(i, j + kDepth);
    }
  }
  AlignedVector<T, kVec> y;
#pragma unroll
  for (int n = 0; n < kVec; ++n) y[n] = device::cast<T>(acc[n]);
  if (live) y.store_global(p.out + token * p.out_stride + col);
  device::pdl_trigger_at(p.trigger, Trigger::kAfterStores);
#endif
}

// The batched kernel's CTAs of kThreads, kExpertsAtOnce experts' rows in flight.
constexpr int kThreads = 128;
constexpr int kExpertsAtOnce = 8;

// acc (+ the shared row's vector where `add_shared`) rounded once to T: the token's output vector at col.
template <typename T, int kVec>
__device__ __forceinline__ void store_sum(const Combine<T>& p, int64_t token, int64_t col, float (&acc)[kVec], bool add_shared,
                                          const AlignedVector<T, kVec>& shared) {
  if (add_shared) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[e] += device::cast<float>(shared[e]);
  }
  AlignedVector<T, kVec> y;
#pragma unroll
  for (int e = 0; e < kVec; ++e) y[e] = device::cast<T>(acc[e]);
  y.store(p.out + token * p.out_stride + col);
}

// The runtime-k schedules' batched kernel (moe_sum's between one and 18 tokens of 7168, the weighted sum's): the same
// sum over a grid of a token per x and kCtaThreads-thread CTAs of its row per y, kAtOnce experts loaded (their
// weights and ids read first) before the first is added.
template <typename T, int kVec, int kCtaThreads, bool kWeighted, int kAtOnce = kExpertsAtOnce>
__global__ void __launch_bounds__(kCtaThreads) batched_kernel(const __grid_constant__ Combine<T> p) {
#ifdef __CUDACC__
  const int64_t token = blockIdx.x;
  const int64_t v = int64_t{blockIdx.y} * kCtaThreads + threadIdx.x;
  const int64_t col = v * kVec;
  device::pdl_trigger_at(p.trigger, Trigger::kStart);
  device::pdl_wait_primary(p.trigger);
  if (v < p.row_vecs) {
    AlignedVector<T, kVec> s;
    if (kWeighted && p.shared != nullptr) s.load(p.shared + token * p.shared_stride + col);
    float acc[kVec] = {};
    const T* row = p.in + token * p.in_token_stride + col;
    for (int j0 = 0; j0 < p.k; j0 += kAtOnce) {
      float w[kAtOnce];
      bool use[kAtOnce];
#pragma unroll
      for (int i = 0; i < kAtOnce; ++i) {
        const int j = j0 + i;
        use[i] = j < p.k;
        w[i] = 1.0f;
        if (kWeighted && use[i]) w[i] = p.weights[token * p.weights_stride + j];
        if (kWeighted && use[i] && p.ids != nullptr) {
          const int64_t at = token * p.ids_stride + j;
          use[i] = (p.ids64 ? static_cast<const int64_t*>(p.ids)[at] : static_cast<const int32_t*>(p.ids)[at]) >= 0;
        }
      }
      AlignedVector<T, kVec> x[kAtOnce];
#pragma unroll
      for (int i = 0; i < kAtOnce; ++i) {
        if (use[i]) x[i].load(row + (j0 + i) * p.in_k_stride);
      }
#pragma unroll
      for (int i = 0; i < kAtOnce; ++i) {
        if (!use[i]) continue;
        // The scale applied after the rows' loads: a multiply at the weight's load waited for it before they went out.
        const float scaled = kWeighted ? w[i] * p.scale : 1.0f;
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[e] = fmaf(scaled, device::cast<float>(x[i][e]), acc[e]);
      }
    }
    store_sum(p, token, col, acc, kWeighted && p.shared != nullptr, s);
  }
  device::pdl_trigger_at(p.trigger, Trigger::kAfterStores);
#endif
}

// The same sum loading one expert's row at a time (its weight and id read before it): few registers, so full
// occupancy, which the weighted sum's grids of several waves gain more from than from loads in flight.
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
template <typename T>
struct MoeCombineOps {
  // output [T, H] = sum over k of input [T, k, H].
  static void moe_sum(jitkern::TensorView input, jitkern::TensorView output) { launch<false>(sum_operands(input, output)); }

  // output [T, H] = routed_scaling_factor * sum_j topk_weights[t, j] * input[t, j, :] over the experts
  // whose topk_ids are >= 0 (all, without topk_ids), + shared_output[t, :] where given.
  static void moe_weighted_sum(jitkern::TensorView input, jitkern::TensorView output, jitkern::TensorView topk_weights,
                               jitkern::Optional<jitkern::TensorView> topk_ids, jitkern::Optional<jitkern::TensorView> shared_output,
                               double routed_scaling_factor) {
    launch<true>(weighted_operands(input, output, topk_weights, topk_ids, shared_output, routed_scaling_factor));
  }

  struct Operands {
    Combine<T> p;
    DLDevice device;
  };

  static Operands sum_operands(jitkern::TensorView input, jitkern::TensorView output) {
    auto device = host::SymbolicDevice{};
    Combine<T> p = rows(input, output, device);
    return {p, device.unwrap()};
  }

  static Operands weighted_operands(jitkern::TensorView input, jitkern::TensorView output, jitkern::TensorView topk_weights,
                                    jitkern::Optional<jitkern::TensorView> topk_ids, jitkern::Optional<jitkern::TensorView> shared_output,
                                    double routed_scaling_factor) {
    using namespace host;
    auto device = SymbolicDevice{};
    Combine<T> p = rows(input, output, device);
    RuntimeCheck(std::isfinite(routed_scaling_factor), "routed_scaling_factor must be finite, got ", routed_scaling_factor);
    p.scale = static_cast<float>(routed_scaling_factor);
    auto N = SymbolicSize{"num_tokens"}, K = SymbolicSize{"topk"};
    N.set_value(static_cast<int64_t>(input.size(0)));
    K.set_value(static_cast<int64_t>(input.size(1)));
    auto ws = SymbolicSize{"topk_weights_row_stride"};
    TensorMatcher({N, K}).with_strides({ws, 1}).with_dtype<float>().with_device(device_v<kDLCUDA>, device).verify(topk_weights, "topk_weights");
    p.weights = static_cast<const float*>(topk_weights.data_ptr());
    p.weights_stride = ws.has_value() ? ws.unwrap() : 0;
    if (topk_ids.has_value()) {
      auto is = SymbolicSize{"topk_ids_row_stride"};
      TensorMatcher({N, K}).with_strides({is, 1}).with_dtype(DTypeList<int32_t, int64_t>{}).with_device(device_v<kDLCUDA>, device)
          .verify(*topk_ids, "topk_ids");
      p.ids = topk_ids->data_ptr();
      p.ids64 = topk_ids->dtype().bits == 64;
      p.ids_stride = is.has_value() ? is.unwrap() : 0;
    }
    if (shared_output.has_value()) {
      auto H = SymbolicSize{"hidden_size"}, ss = SymbolicSize{"shared_output_row_stride"};
      H.set_value(static_cast<int64_t>(input.size(2)));
      TensorMatcher({N, H}).with_strides({ss, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(*shared_output,
                                                                                                                      "shared_output");
      p.shared = static_cast<const T*>(shared_output->data_ptr());
      p.shared_stride = ss.has_value() ? ss.unwrap() : 0;
    }
    return {p, device.unwrap()};
  }

  // The schedule (bf16 [T, 8, 7168] on an H200, docs/benchmarks/moe_combine.md): bf16 rows of k = kFixedK without ids
  // or shared row, 16-byte aligned, the unrolled kernels (1.07-1.51x the runtime-k schedules at 1-256 tokens, 1.00-1.06x
  // at 4096; fp16's 16-byte one spills loaded rows at the cap); the rest, the runtime-k schedules.
  template <bool kWeighted>
  static void launch(Operands ops) {
    if constexpr (std::is_same_v<T, bf16_t>) {
      if (ops.p.k == kFixedK && ops.p.ids == nullptr && ops.p.shared == nullptr && vectors_fit(ops.p)) return launch_fixed_k<kWeighted>(ops);
    }
    launch_runtime_k<kWeighted>(ops);
  }

  // The unrolled kernels: decode grids (vectors_per_sm at most kDecodeThreadsPerSm) 8-byte vectors, 8 in flight; the
  // rest 16-byte vectors, kDepthFixedK16 in flight within 32 registers.
  template <bool kWeighted>
  static void launch_fixed_k(Operands ops) {
    if (vectors_per_sm(ops) <= kDecodeThreadsPerSm) return launch_ring<kWeighted, 8, kDecodeCta, 1, kDepthDecode, kFixedK>(ops);
    launch_ring<kWeighted, 16, kMaxCta, kCtasPerSm, kDepthFixedK16, kFixedK>(ops, row_cta(ops));
  }

  // The runtime-k schedules. moe_sum: rows without 16-byte vectors one element a thread, decode grids 8-byte vectors,
  // 8 loads in flight (the ring, or the batched kernel's 8 at once); the rest 16-byte vectors, 3 in flight within 32
  // registers. moe_weighted_sum (the runtime-k ring's weighted path measured slower), by the threads of one 16-byte
  // vector each: at most 256 per SM (decode batches) 8-byte vectors, 8 experts at once; more, 16-byte vectors, 4
  // experts at once, except grids of several waves, one expert at a time; rows without 16-byte vectors one element a
  // thread, 8 experts at once.
  template <bool kWeighted>
  static void launch_runtime_k(Operands ops) {
    using namespace host;
    constexpr int kVec = device::kVec16<T>;
    if constexpr (kWeighted) {
      if (!vectors_fit(ops.p)) return launch_vectors<kWeighted, kThreads, kExpertsAtOnce, 1>(ops, nullptr);
      const int64_t threads = ops.p.tokens * div_ceil(ops.p.hidden / kVec, int64_t{kThreads}) * kThreads;
      const int64_t sms = runtime::get_sm_count(ops.device.device_id);
      if (threads <= kPdlLateTriggerThreadsPerSm * sms) return launch_vectors<kWeighted, kThreads, kExpertsAtOnce, kVec / 2>(ops, nullptr);
      if (threads > row_policy(ops.device).threads_per_sm * sms) return launch_one_at_a_time(ops);
      launch_vectors<kWeighted, kThreads, kExpertsAtOnce / 2, kVec>(ops, nullptr);
    } else {
      if (!vectors_fit(ops.p)) return launch_ring<kWeighted, sizeof(T), kNarrowCta, 1, kDepthDecode>(ops);
      const int64_t per_sm = vectors_per_sm(ops);
      if (per_sm <= kRingDecodeThreadsPerSm) return launch_ring<kWeighted, 8, kDecodeCta, 1, kDepthDecode>(ops);
      if (per_sm <= kDecodeThreadsPerSm) return launch_vectors<kWeighted, kThreads, kExpertsAtOnce, kVec / 2>(ops, nullptr);
      launch_ring<kWeighted, 16, kMaxCta, kCtasPerSm, kDepth16>(ops, row_cta(ops));
    }
  }

  // one_expert_at_a_time_kernel over 16-byte vectors (vectors_fit), the next launch triggered at its start.
  static void launch_one_at_a_time(Operands ops) {
    using namespace host;
    Combine<T>& p = ops.p;
    constexpr int kVec = device::kVec16<T>;
    const int64_t blocks = checked_blocks(p, kVec, kThreads);
    if (blocks == 0) return;
    LaunchKernel(dim3(static_cast<unsigned>(p.tokens), static_cast<unsigned>(blocks)), kThreads, ops.device)
        .enable_pdl()(one_expert_at_a_time_kernel<T, kVec>, p);
  }

  // The grid's 16-byte vectors per SM.
  static int64_t vectors_per_sm(const Operands& ops) {
    return ops.p.tokens * (ops.p.hidden / device::kVec16<T>) / host::runtime::get_sm_count(ops.device.device_id);
  }

  // The most threads of a CTA of 16-byte vectors of a token's row, by the grid's vectors per SM.
  static int row_cta(const Operands& ops) {
    const int64_t per_sm = vectors_per_sm(ops);
    return per_sm > kWideRowThreadsPerSm && per_sm <= host::row_policy(ops.device).threads_per_sm ? kMaxCta : kNarrowCta;
  }

  // p.row_vecs for vectors of kVec elements, and the CTAs of kCtaThreads threads a token's row takes (0: nothing to do).
  static int64_t checked_blocks(Combine<T>& p, int kVec, int kCtaThreads) {
    using namespace host;
    if (p.tokens * p.hidden == 0) return 0;
    RuntimeCheck(p.tokens <= 0x7fffffff, "too many tokens for one launch: ", p.tokens);
    p.row_vecs = p.hidden / kVec;
    const int64_t blocks = div_ceil(p.row_vecs, int64_t{kCtaThreads});
    RuntimeCheck(blocks <= 65535, "hidden_size is too large: ", p.hidden);
    return blocks;
  }

  // Grid: a token per x, kCtaThreads vectors of kVec elements of its row per y. The PDL trigger by the grid
  // (host::pdl_trigger_for); `forced`: that one instead.
  template <bool kWeighted, int kCtaThreads, int kAtOnce, int kVec>
  static void launch_vectors(Operands ops, const Trigger* forced) {
    using namespace host;
    Combine<T>& p = ops.p;
    const int64_t blocks = checked_blocks(p, kVec, kCtaThreads);
    if (blocks == 0) return;
    const int64_t grid = p.tokens * blocks;
    p.trigger = forced != nullptr ? *forced
                                  : pdl_trigger_for(grid, kCtaThreads, runtime::get_sm_count(ops.device.device_id),
                                                    row_policy(ops.device).threads_per_sm);
    LaunchKernel(dim3(static_cast<unsigned>(p.tokens), static_cast<unsigned>(blocks)), kCtaThreads, ops.device)
        .enable_pdl()(batched_kernel<T, kVec, kCtaThreads, kWeighted, kAtOnce>, p);
  }

  // combine_kernel over vectors of kBytes: a token's row split evenly over the fewest CTAs of at most `most`
  // threads (kCta where 0; whole warps). A launch per 65535 tokens (the grid's y).
  template <bool kWeighted, int kBytes, int kCta, int kMinCtas, int kDepth, int kK = 0>
  static void launch_ring(Operands ops, int most = 0) {
    using namespace host;
    Combine<T> p = ops.p;
    if (p.tokens * p.hidden == 0) return;
    p.row_vecs = p.hidden / (kBytes / static_cast<int>(sizeof(T)));
    const int64_t cap = most > 0 && most < kCta ? most : kCta;
    const int width = static_cast<int>(div_ceil(div_ceil(p.row_vecs, div_ceil(p.row_vecs, cap)), int64_t{32}) * 32);
    const int64_t blocks = div_ceil(p.row_vecs, int64_t{width});
    RuntimeCheck(blocks <= 0x7fffffff, "hidden_size is too large: ", p.hidden);
    const int64_t sms = runtime::get_sm_count(ops.device.device_id), tokens = p.tokens;
    for (int64_t first = 0; first < tokens; first += kMaxGridY) {
      p.tokens = host::min(tokens - first, kMaxGridY);
      p.trigger = pdl_trigger_for(blocks * p.tokens, width, sms, row_policy(ops.device).threads_per_sm);
      LaunchKernel(dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(p.tokens)), width, ops.device)
          .enable_pdl()(combine_kernel<T, kBytes, kCta, kMinCtas, kDepth, kWeighted, kK>, p);
      p.in += kMaxGridY * p.in_token_stride;
      p.out += kMaxGridY * p.out_stride;
      if constexpr (kWeighted) p.weights += kMaxGridY * p.weights_stride;
    }
  }
  static constexpr int64_t kMaxGridY = 65535;

  // 16-byte vectors where the hidden size, strides and pointers allow them.
  static bool vectors_fit(const Combine<T>& p) {
    constexpr int kVec = device::kVec16<T>;
    const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    bool ok = p.hidden % kVec == 0 && p.in_token_stride % kVec == 0 && p.in_k_stride % kVec == 0 && p.out_stride % kVec == 0 &&
              aligned(p.in) && aligned(p.out);
    if (p.shared != nullptr) ok = ok && p.shared_stride % kVec == 0 && aligned(p.shared);
    return ok;
  }

 private:
  static Combine<T> rows(jitkern::TensorView input, jitkern::TensorView output, host::SymbolicDevice& device) {
    using namespace host;
    auto N = SymbolicSize{"num_tokens"}, K = SymbolicSize{"topk"}, H = SymbolicSize{"hidden_size"};
    auto ts = SymbolicSize{"input_token_stride"}, ks = SymbolicSize{"input_expert_stride"}, os = SymbolicSize{"output_row_stride"};
    TensorMatcher({N, K, H}).with_strides({ts, ks, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(input, "input");
    TensorMatcher({N, H}).with_strides({os, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(output, "output");
    RuntimeCheck(K.unwrap() >= 1 && K.unwrap() <= kMaxTopk, "topk (input's second dimension) must be 1-", kMaxTopk, ", got ", K.unwrap());
    Combine<T> p{};
    p.in = static_cast<const T*>(input.data_ptr());
    p.in_token_stride = ts.has_value() ? ts.unwrap() : 0;
    p.in_k_stride = ks.has_value() ? ks.unwrap() : 0;
    p.out = static_cast<T*>(output.data_ptr());
    p.out_stride = os.has_value() ? os.unwrap() : 0;
    check_rows_disjoint(N.unwrap(), H.unwrap(), p.out_stride, "output");
    p.scale = 1.0f;
    p.k = static_cast<int>(K.unwrap());
    p.tokens = N.unwrap();
    p.hidden = H.unwrap();
    return p;
  }
};
#endif  // __CUDACC_RTC__

}  // namespace jitkern_moe_combine
