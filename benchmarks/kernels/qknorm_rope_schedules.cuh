// Launch schedules of the fused QK-norm + RoPE (+ KV-cache write) side by side (bench_qknorm_rope.py
// --schedules): the product's kernels (csrc/qknorm_rope.cuh) under other launch choices than its rule
// picks, bf16. Each Schedule has the product's entry points (apply, apply_store), its arguments checked by
// the product's own code (QkNormRopeOps' Setup and store_args).
#pragma once

#include <qknorm_rope.cuh>

namespace bench_qknorm_rope {

using namespace jitkern_qknorm_rope;
using Ops = QkNormRopeOps<bf16_t>;

// kCtaThreads 0: one head a lane group at every size (qknorm_rope_kernel; kPairingCompiled: its pairing
// compiled in, a kernel for each, instead of read at run time); else the staged kernel with CTAs of
// kCtaThreads and kStages buffers at every size where the operands allow 16-byte vectors, the kernel of full
// lanes at most kMaxRegs registers a thread (0: the compiler's choice); kFullLanes false: never the kernel of
// full lanes.
template <int kCtaThreads, int kStages = 2, int kMaxRegs = Ops::Setup::kStagedFullMaxRegs, bool kFullLanes = true, bool kPairingCompiled = false>
struct Schedule {
  static void apply(TensorView positions, TensorView q, TensorView k, TensorView q_weight, TensorView k_weight, TensorView cos_sin_cache,
                    double eps, double weight_offset, bool is_neox, int64_t mrope_t, int64_t mrope_h, int64_t mrope_w, bool mrope_interleaved) {
    const Ops::Setup setup(positions, q, k, q_weight, k_weight, cos_sin_cache, eps, weight_offset, {mrope_t, mrope_h, mrope_w, mrope_interleaved});
    run<false, false>(setup, is_neox, Store{}, false);
  }
  static void apply_store(TensorView positions, TensorView q, TensorView k, TensorView q_weight, TensorView k_weight, TensorView cos_sin_cache,
                          double eps, double weight_offset, bool is_neox, int64_t mrope_t, int64_t mrope_h, int64_t mrope_w, bool mrope_interleaved,
                          TensorView v, TensorView k_cache, TensorView v_cache, TensorView cache_loc, double k_scale, double v_scale) {
    const Ops::Setup setup(positions, q, k, q_weight, k_weight, cos_sin_cache, eps, weight_offset, {mrope_t, mrope_h, mrope_w, mrope_interleaved});
    const Ops::StoreArgs a = Ops::store_args<false>(setup, v, k_cache, v_cache, cache_loc, k_scale, v_scale);
    run<false, true>(setup, is_neox, a.s, a.wide);
  }

 private:
  template <bool kFp8, bool kStore>
  static void run(const Ops::Setup& setup, bool neox, const Store& s, bool wide_store) {
    if (setup.tokens == 0) return;
    if (!setup.template wide_vectors<kStore>(wide_store)) return setup.template run_heads<kFp8, 1, kStore>(s, neox);
    if constexpr (kCtaThreads > 0) {
      return setup.template run_staged<kFp8, Ops::kWideVec, kStore, kCtaThreads, kStages, kMaxRegs, kFullLanes>(s, neox);
    } else if constexpr (kPairingCompiled) {
      return neox ? setup.template run_heads<kFp8, Ops::kWideVec, kStore, Pairing::kNeox>(s, neox)
                  : setup.template run_heads<kFp8, Ops::kWideVec, kStore, Pairing::kGptJ>(s, neox);
    } else {
      setup.template run_heads<kFp8, Ops::kWideVec, kStore>(s, neox);
    }
  }
};

// The staged kernel with a token's q and k heads in one loop (norm_rope_head inlined once, not twice: a module
// compiles in less time), else the product's (csrc/qknorm_rope.cuh, qknorm_rope_staged_kernel) line for line.
template <typename T, bool kFp8, Pairing kPairing, int kVec, bool kStore, int kCtaThreads, int kStages, int kMaxRegs, bool kFull>
__global__ void JITKERN_QKNORM_ROPE_MAXNREG(kMaxRegs) one_loop_staged_kernel(const __grid_constant__ Params<T> p, const __grid_constant__ Store s,
                                                                          int64_t tokens) {
#ifdef __CUDACC__
  static_assert(kStages >= 2 && kStages <= 4, "two to four buffers");
  extern __shared__ int4 staged[];
  if (p.early_trigger) device::pdl_trigger_secondary();
  const int thread = static_cast<int>(threadIdx.x), heads = p.q_heads + p.k_heads, row_vecs = p.head_dim / kVec;
  const int64_t buffer_elems = int64_t{p.token_heads} * p.head_dim;
  // A thread copies vector c of head h, then steps kCtaThreads vectors on by (dh, dc): a division per
  // vector put as many instructions before each copy as the token's arithmetic has.
  const int h0 = thread / row_vecs, c0 = thread - h0 * row_vecs, dh = kCtaThreads / row_vecs, dc = kCtaThreads - dh * row_vecs;
  const auto copy_heads = [&](T* rows, const T* src, int64_t head_stride, int count) {
    for (int h = h0, c = c0; h < count;) {
      device::ptx::cp_async_16(rows + h * p.head_dim + c * kVec, src + h * head_stride + c * kVec);
      h += dh, c += dc;
      if (c >= row_vecs) c -= row_vecs, ++h;
    }
  };
  float* const weights = reinterpret_cast<float*>(staged);  // q's, then k's, weight_offset added
  const auto buffer_at = [&](int b) { return reinterpret_cast<T*>(weights + 2 * p.head_dim) + b * buffer_elems; };
  // The token's indices and its heads into buffer b; a copy group each call, empty past the last token (so
  // that the wait below counts groups alike in every turn).
  TokenIndices ahead[kStages];  // tokens token, + gridDim.x, ...: the buffers' tokens in turn
  const auto stage = [&](int64_t token, TokenIndices& at, int b) {
    if (token < tokens) {
      at = load_token<kStore>(p, s, token);
      T* const rows = buffer_at(b);
      copy_heads(rows, p.q + token * p.q_token, p.q_head, p.q_heads);
      copy_heads(rows + p.q_heads * p.head_dim, p.k + token * p.k_token, p.k_head, p.k_heads);
      if constexpr (kStore) copy_heads(rows + heads * p.head_dim, static_cast<const T*>(s.v) + token * s.v_token, s.v_head, p.k_heads);
    }
    device::ptx::cp_async_commit();
  };
  const HeadLane<kPairing, kVec, kFull> l(p, thread);
  constexpr int64_t kCacheBytes = kFp8 ? 1 : sizeof(T);
  device::pdl_wait_primary();
  if (!p.early_trigger) device::pdl_trigger_secondary();
#pragma unroll
  for (int j = 0; j + 1 < kStages; ++j) stage(blockIdx.x + int64_t{j} * gridDim.x, ahead[j], j);
  for (int i = thread; i < 2 * p.head_dim; i += kCtaThreads)  // read after the first turn's barrier
    weights[i] = device::cast<float>(i < p.head_dim ? p.q_weight[i] : p.k_weight[i - p.head_dim]) + p.weight_offset;
  const int group = thread >> p.width_log2, groups = kCtaThreads >> p.width_log2;
  int buffer = 0;
  for (int64_t token = blockIdx.x; token < tokens; token += gridDim.x) {
    const TokenIndices at = ahead[0];
    const bool skipped = at.outside(p.max_position);
    Rotation<kVec> r;
    if (!skipped) r.load(p, l, at.position, at.position_h, at.position_w);
    [[maybe_unused]] char* k_row = nullptr;
    [[maybe_unused]] char* v_row = nullptr;
    if constexpr (kStore) {
      if (s.k_cache.holds(at.slot)) k_row = s.k_cache.row(at.slot), v_row = s.v_cache.row(at.slot);
    }
    stage(token + int64_t{kStages - 1} * gridDim.x, ahead[kStages - 1], (buffer + kStages - 1) % kStages);
    device::ptx::cp_async_wait_group<kStages - 1>();  // the current token's copies
    __syncthreads();
    const T* const rows = buffer_at(buffer);
    if (!skipped) {
      [[maybe_unused]] device::quant::Divider k_div(1.0f), v_div(1.0f);
      if constexpr (kFp8) k_div = device::quant::Divider(s.k_scale), v_div = device::quant::Divider(s.v_scale);
      T* q = p.q + token * p.q_token;
      T* k = p.k + token * p.k_token;
      for (int h = group; h < heads; h += groups) {  // the product's: a loop of q heads, then one of k heads
        const bool is_q = h < p.q_heads;
        HeadVecs<T, kVec> x;
        x.load(rows + h * p.head_dim, l);
        char* row = is_q || k_row == nullptr ? nullptr : k_row + kCacheBytes * (h - p.q_heads) * p.head_dim;
        const RowWeights<HeadLane<kPairing, kVec, kFull>, kVec> w{is_q ? weights : weights + p.head_dim, l};
        norm_rope_head<kFp8, kStore>(p, l, x, w, r, is_q ? q + h * p.q_head : k + (h - p.q_heads) * p.k_head, row, k_div);
      }
      if constexpr (kStore) {
        if (v_row != nullptr) {
          for (int i = thread; i < p.k_heads * row_vecs; i += kCtaThreads) {
            AlignedVector<T, kVec> x;
            x.load(rows + (heads * row_vecs + i) * kVec);
            to_cache<kFp8>(v_row, int64_t{i} * kVec, x, v_div);
          }
        }
      }
    }
    __syncthreads();  // every thread is done with the buffer the next turn stages into
#pragma unroll
    for (int j = 0; j + 1 < kStages; ++j) ahead[j] = ahead[j + 1];
    buffer = buffer + 1 == kStages ? 0 : buffer + 1;
  }
  device::ptx::cp_async_wait_all();  // no copy lands after the CTA's shared memory is released
#endif
}

// The product's launch rule, the staged kernel (at its sizes) the one above.
struct OneLoop {
  static void apply(TensorView positions, TensorView q, TensorView k, TensorView q_weight, TensorView k_weight, TensorView cos_sin_cache,
                    double eps, double weight_offset, bool is_neox, int64_t mrope_t, int64_t mrope_h, int64_t mrope_w, bool mrope_interleaved) {
    const Ops::Setup setup(positions, q, k, q_weight, k_weight, cos_sin_cache, eps, weight_offset, {mrope_t, mrope_h, mrope_w, mrope_interleaved});
    run<false>(setup, is_neox, Store{}, false);
  }
  static void apply_store(TensorView positions, TensorView q, TensorView k, TensorView q_weight, TensorView k_weight, TensorView cos_sin_cache,
                          double eps, double weight_offset, bool is_neox, int64_t mrope_t, int64_t mrope_h, int64_t mrope_w, bool mrope_interleaved,
                          TensorView v, TensorView k_cache, TensorView v_cache, TensorView cache_loc, double k_scale, double v_scale) {
    const Ops::Setup setup(positions, q, k, q_weight, k_weight, cos_sin_cache, eps, weight_offset, {mrope_t, mrope_h, mrope_w, mrope_interleaved});
    const Ops::StoreArgs a = Ops::store_args<false>(setup, v, k_cache, v_cache, cache_loc, k_scale, v_scale);
    run<true>(setup, is_neox, a.s, a.wide);
  }

 private:
  template <bool kStore>
  static void run(const Ops::Setup& setup, bool neox, const Store& s, bool wide_store) {
    using namespace host;
    using S = Ops::Setup;
    if (setup.tokens == 0) return;
    if (!setup.template wide_vectors<kStore>(wide_store)) return setup.template run_heads<false, 1, kStore>(s, neox);
    if (setup.tokens < (kStore ? S::kStagedMinTokensStore : S::kStagedMinTokens) || setup.template staged_smem<kStore>(S::kStagedStages) > S::kStagedMaxBytes)
      return setup.template run_heads<false, Ops::kWideVec, kStore>(s, neox);
    Params<bf16_t> c = setup.template params<Ops::kWideVec, kStore>();
    c.neox = neox;
    const auto launch = [&]<Pairing kPairing, bool kFull>() {
      constexpr auto kernel = one_loop_staged_kernel<bf16_t, false, kPairing, Ops::kWideVec, kStore, S::kStagedThreads, S::kStagedStages,
                                                     kFull ? S::kStagedFullMaxRegs : 0, kFull>;
      const auto bytes = static_cast<std::size_t>(setup.template staged_smem<kStore>(S::kStagedStages));
      const int per_sm = runtime::resident_ctas_per_sm(kernel, S::kStagedThreads, bytes, setup.device.device_id);
      const int64_t ctas = std::min(setup.tokens, int64_t{runtime::get_sm_count(setup.device.device_id)} * per_sm);
      c.early_trigger = pdl_early_trigger(ctas);
      LaunchKernel(static_cast<unsigned>(ctas), static_cast<unsigned>(S::kStagedThreads), setup.device, bytes).enable_pdl()(kernel, c, s, setup.tokens);
    };
    if (c.pairs == 1 << c.width_log2 && c.tails == 0)
      return neox ? launch.template operator()<Pairing::kNeox, true>() : launch.template operator()<Pairing::kGptJ, true>();
    launch.template operator()<Pairing::kEither, false>();
  }
};

}  // namespace bench_qknorm_rope
