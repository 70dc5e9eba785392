// Launch schedules of the fused QK-norm + RoPE (+ KV-cache write) side by side (bench_qknorm_rope.py
// --schedules): the product's kernels (csrc/qknorm_rope.cuh) under other launch choices than its rule
// picks, bf16. Each Schedule has the product's entry points (apply, apply_store), its arguments checked by
// the product's own code (QkNormRopeOps' Setup and store_args).
#pragma once

#include <qknorm_rope.cuh>

namespace bench_qknorm_rope {

using namespace jitkern_qknorm_rope;
using Ops = QkNormRopeOps<bf16_t>;

// A head's weights as the staged kernel used them before: T vectors, converted and weight_offset added where
// the norm takes them.
template <typename T, int kVec>
struct VecWeights {
  const HeadVecs<T, kVec>& w;
  float offset;

  __device__ __forceinline__ AlignedVector<float, kVec> a(int i) const { return plus(w.a[i]); }
  __device__ __forceinline__ AlignedVector<float, kVec> b(int i) const { return plus(w.b[i]); }
  __device__ __forceinline__ AlignedVector<float, kVec> t(int i) const { return plus(w.t[i]); }
  __device__ __forceinline__ AlignedVector<float, kVec> plus(const AlignedVector<T, kVec>& v) const {
    float f[kVec];
    to_floats(f, v);
    AlignedVector<float, kVec> r;
#pragma unroll
    for (int j = 0; j < kVec; ++j) r[j] = f[j] + offset;
    return r;
  }
};

// The staged kernel as it was before the weights were converted once per CTA and the q and k heads taken in
// separate loops (a token's weights loaded and converted for every head; one or two buffers): the "before"
// column.
template <typename T, bool kFp8, bool kNeox, int kVec, bool kStore, int kCtaThreads, int kStages>
__global__ void __launch_bounds__(kCtaThreads) staged_before_kernel(const __grid_constant__ Params<T> p, const __grid_constant__ Store s,
                                                                          int64_t tokens) {
#ifdef __CUDACC__
  static_assert(kStages == 1 || kStages == 2, "one or two buffers");
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
  const auto stage = [&](int64_t token, T* rows) {  // the token's heads into `rows`, one copy group
    copy_heads(rows, p.q + token * p.q_token, p.q_head, p.q_heads);
    copy_heads(rows + p.q_heads * p.head_dim, p.k + token * p.k_token, p.k_head, p.k_heads);
    if constexpr (kStore) copy_heads(rows + heads * p.head_dim, static_cast<const T*>(s.v) + token * s.v_token, s.v_head, p.k_heads);
    device::ptx::cp_async_commit();
  };
  const HeadLane<kNeox, kVec> l(p, thread);
  constexpr int64_t kCacheBytes = kFp8 ? 1 : sizeof(T);
  device::pdl_wait_primary();
  if (!p.early_trigger) device::pdl_trigger_secondary();
  int64_t token = blockIdx.x;
  TokenIndices at = load_token<kStore>(p, s, token);
  int buffer = 0;
  stage(token, reinterpret_cast<T*>(staged));
  for (; token < tokens; token += gridDim.x) {
    T* const rows = reinterpret_cast<T*>(staged) + buffer * buffer_elems;
    const bool skipped = at.outside(p.max_position);
    Rotation<kVec> r;
    if (!skipped) r.load(p, l, at.position, at.position_h, at.position_w);
    [[maybe_unused]] char* k_row = nullptr;
    [[maybe_unused]] char* v_row = nullptr;
    if constexpr (kStore) {
      if (s.k_cache.holds(at.slot)) k_row = s.k_cache.row(at.slot), v_row = s.v_cache.row(at.slot);
    }
    const int64_t next = token + gridDim.x;
    if (kStages == 2 && next < tokens) {
      at = load_token<kStore>(p, s, next), stage(next, reinterpret_cast<T*>(staged) + (buffer ^ 1) * buffer_elems);
      device::ptx::cp_async_wait_group<1>();  // the current token's copies
    } else {
      device::ptx::cp_async_wait_all();
    }
    __syncthreads();
    if (!skipped) {
      [[maybe_unused]] device::quant::Divider k_div(1.0f), v_div(1.0f);
      if constexpr (kFp8) k_div = device::quant::Divider(s.k_scale), v_div = device::quant::Divider(s.v_scale);
      T* q = p.q + token * p.q_token;
      T* k = p.k + token * p.k_token;
      for (int h = thread >> p.width_log2; h < heads; h += kCtaThreads >> p.width_log2) {
        const bool is_q = h < p.q_heads;
        HeadVecs<T, kVec> x, w;
        x.load(rows + h * p.head_dim, l);
        w.load(is_q ? p.q_weight : p.k_weight, l);
        const VecWeights<T, kVec> wf{w, p.weight_offset};
        T* dst = is_q ? q + h * p.q_head : k + (h - p.q_heads) * p.k_head;
        char* row = is_q || k_row == nullptr ? nullptr : k_row + kCacheBytes * (h - p.q_heads) * p.head_dim;
        norm_rope_head<kFp8, kStore>(p, l, x, wf, r, dst, row, k_div);
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
    if constexpr (kStages == 1) {
      if (next < tokens) {
        __syncthreads();  // every thread is done with the buffer
        at = load_token<kStore>(p, s, next), stage(next, rows);
      }
    } else {
      __syncthreads();  // every thread is done with the buffer the next turn stages into
      buffer ^= 1;
    }
  }
  device::ptx::cp_async_wait_all();  // no copy lands after the CTA's shared memory is released
#endif
}

// kCtaThreads 0: one head a lane group at every size (qknorm_rope_kernel); else the staged kernel (kBefore:
// staged_before_kernel) with CTAs of kCtaThreads and kStages buffers at every size where the operands allow
// 16-byte vectors, the kernel of full lanes at most kMaxRegs registers a thread (0: the compiler's choice);
// kFullLanes false: never the kernel of full lanes; kStageV: v rows staged with the heads.
template <int kCtaThreads, int kStages = 2, bool kBefore = false, int kMaxRegs = 0, bool kFullLanes = true, bool kStageV = false>
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
    setup.template dispatch<kStore>(neox, wide_store, [&]<bool kNeox, int kVec>() {
      if constexpr (kCtaThreads > 0 && kVec == Ops::kWideVec) {
        if constexpr (kBefore) {
          run_before<kFp8, kNeox, kVec, kStore>(setup, s);
        } else {
          setup.template run_staged<kFp8, kNeox, kVec, kStore, kCtaThreads, kStages, kMaxRegs, kFullLanes, kStageV>(s);
        }
      } else {
        setup.template run_heads<kFp8, kNeox, kVec, kStore>(s);
      }
    });
  }
  template <bool kFp8, bool kNeox, int kVec, bool kStore>
  static void run_before(const Ops::Setup& setup, const Store& s) {
    using namespace host;
    constexpr auto kernel = staged_before_kernel<bf16_t, kFp8, kNeox, kVec, kStore, kCtaThreads, kStages>;
    const auto bytes = static_cast<std::size_t>(setup.template staged_smem<kStore>(kStages, true) - 8 * setup.p.head_dim);  // no weights
    int64_t ctas = setup.tokens;
    if constexpr (kStages > 1)
      ctas = std::min(ctas, int64_t{runtime::get_sm_count(setup.device.device_id)} *
                                runtime::resident_ctas_per_sm<kernel>(kCtaThreads, bytes, setup.device.device_id));
    Params<bf16_t> c = setup.template params<kVec, kStore>();
    c.early_trigger = pdl_early_trigger(ctas);
    LaunchKernel(static_cast<unsigned>(ctas), static_cast<unsigned>(kCtaThreads), setup.device, bytes).enable_pdl()(kernel, c, s, setup.tokens);
  }
};

}  // namespace bench_qknorm_rope
