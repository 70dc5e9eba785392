// Launch schedules of the fused QK-norm + RoPE (+ KV-cache write) side by side (bench_qknorm_rope.py
// --schedules): the product's kernels (csrc/qknorm_rope.cuh) under other launch choices than its rule
// picks, bf16. Each Schedule has the product's entry points (apply, apply_store), its arguments checked by
// the product's own code (QkNormRopeOps' Setup and store_args).
#pragma once

#include <qknorm_rope.cuh>

namespace bench_qknorm_rope {

using namespace jitkern_qknorm_rope;
using Ops = QkNormRopeOps<bf16_t>;

// kRows consecutive heads of one kind (kRows divides the q and the k heads) a lane group, every load of
// them issued before any is used, the weight and cos/sin loaded once: the product's pieces (HeadLane,
// HeadVecs, Rotation, norm_rope_head) in qknorm_rope_kernel's order, the loads of more heads in flight a
// thread instead of staging them in shared memory.
template <typename T, bool kFp8, bool kNeox, int kVec, bool kStore, int kRows>
__global__ void __launch_bounds__(kThreads) qknorm_rope_rows_kernel(const __grid_constant__ Params<T> p, const __grid_constant__ Store s) {
#ifdef __CUDACC__
  if (p.early_trigger) device::pdl_trigger_secondary();
  const int tid = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  const int group = tid >> p.width_log2;
  if (group * kRows >= p.items) return;
  const HeadLane<kNeox, kVec> l(p, static_cast<int>(threadIdx.x));
  const int first = group * kRows, token = first / p.token_heads, h = first - token * p.token_heads;
  const bool is_q = h < p.q_heads, is_v = kStore && h >= p.q_heads + p.k_heads;
  const int kh = h - p.q_heads;
  T* x = is_q ? p.q + token * p.q_token + h * p.q_head : p.k + token * p.k_token + kh * p.k_head;
  int64_t step = is_q ? p.q_head : p.k_head;
  if constexpr (kStore) {
    if (is_v) x = const_cast<T*>(static_cast<const T*>(s.v)) + token * s.v_token + (kh - p.k_heads) * s.v_head, step = s.v_head;
  }
  device::pdl_wait_primary();
  if (!p.early_trigger) device::pdl_trigger_secondary();
  const TokenIndices at = load_token<kStore>(p, s, token);
  HeadVecs<T, kVec> v[kRows], wv;
#pragma unroll
  for (int r = 0; r < kRows; ++r) v[r].load(x + r * step, l);
  if (!is_v) wv.load(is_q ? p.q_weight : p.k_weight, l);
  if (at.outside(p.max_position)) return;
  constexpr int64_t kCacheBytes = kFp8 ? 1 : sizeof(T);
  [[maybe_unused]] char* row = nullptr;
  [[maybe_unused]] device::quant::Divider div(1.0f);
  if constexpr (kStore) {
    if (!is_q && s.k_cache.holds(at.slot)) {
      row = (is_v ? s.v_cache : s.k_cache).row(at.slot) + kCacheBytes * (is_v ? kh - p.k_heads : kh) * p.head_dim;
      if constexpr (kFp8) div = device::quant::Divider(is_v ? s.v_scale : s.k_scale);
    }
    if (is_v) {
      if (row != nullptr) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) v[r].template to_cache_row<kFp8>(row + r * kCacheBytes * p.head_dim, l, div);
      }
      return;
    }
  }
  Rotation<kVec> rot;
  rot.load(p, l, at.position, at.position_h, at.position_w);
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    norm_rope_head<kFp8, kStore>(p, l, v[r], wv, rot, x + r * step, row == nullptr ? nullptr : row + r * kCacheBytes * p.head_dim, div);
#endif
}

template <int kRows>
struct RowsLaunch {
  template <bool kFp8, bool kNeox, int kVec, bool kStore>
  static void run(const Ops::Setup& setup, const Store& s) {
    host::RuntimeCheck(setup.p.q_heads % kRows == 0 && setup.p.k_heads % kRows == 0, "bench_qknorm_rope: ", kRows, " rows a group divide the heads");
    Params<bf16_t> c = setup.template params<kVec, kStore>();
    const int64_t ctas = host::div_ceil((int64_t{c.items} / kRows) << c.width_log2, int64_t{kThreads});
    c.early_trigger = host::pdl_early_trigger(ctas);
    host::LaunchKernel(static_cast<unsigned>(ctas), static_cast<unsigned>(kThreads), setup.device)
        .enable_pdl()(qknorm_rope_rows_kernel<bf16_t, kFp8, kNeox, kVec, kStore, kRows>, c, s);
  }
};

// kCtaThreads 0: one head a lane group at every size (qknorm_rope_kernel); else one CTA of kCtaThreads a
// token at every size where the operands allow 16-byte vectors (qknorm_rope_staged_kernel).
// kMinCtas: the staged kernel's registers bounded for that many CTAs an SM; kRows > 0: kRows heads a lane
// group (qknorm_rope_rows_kernel) at every size instead.
template <int kCtaThreads, int kMinCtas = 1, int kRows = 0>
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
      if constexpr (kRows > 0 && kVec == Ops::kWideVec) {
        RowsLaunch<kRows>::template run<kFp8, kNeox, kVec, kStore>(setup, s);
      } else if constexpr (kCtaThreads > 0 && kVec == Ops::kWideVec) {
        setup.template run_staged<kFp8, kNeox, kVec, kStore, kCtaThreads, kMinCtas>(s);
      } else {
        setup.template run_heads<kFp8, kNeox, kVec, kStore>(s);
      }
    });
  }
};

}  // namespace bench_qknorm_rope
