// Launch schedules of the fused QK-norm + RoPE (+ KV-cache write) side by side (bench_qknorm_rope.py
// --schedules): the product's kernels (csrc/qknorm_rope.cuh) under other launch choices than its rule
// picks, and the staged kernel's floor (CopyHead), bf16. Each Schedule has the product's entry points (apply,
// apply_store), its arguments checked by the product's own code (QkNormRopeOps' Setup and store_args).
#pragma once

#include <qknorm_rope.cuh>

namespace bench_qknorm_rope {

using namespace jitkern_qknorm_rope;
using Ops = QkNormRopeOps<bf16_t>;

// The staged kernel's floor: each staged q or k head copied back (and k to the cache) as it came, the cos/sin
// loads kept (a head's stores wait for them); what is left is the kernel's staging and bytes.
struct CopyHead {
  template <bool kFp8, bool kStore, typename T, typename Lane, int kVec, typename Weights>
  __device__ __forceinline__ static void apply(const Params<T>&, const Lane& l, HeadVecs<T, kVec>& x, const Weights&, const Rotation<kVec>& r, T* dst,
                                               char* row, const device::quant::Divider& div) {
    if (r.cs[0][0] == 7.5f) x.a[0] = x.b[0];
    x.template to_cache_row<false>(reinterpret_cast<char*>(dst), l, div);
    if constexpr (kStore) {
      if (row != nullptr) x.template to_cache_row<kFp8>(row, l, div);
    }
  }
};

// kCtaThreads 0: one head a lane group at every size (qknorm_rope_kernel; kPairingCompiled: its pairing
// compiled in, a kernel for each, instead of read at run time); else the staged kernel with CTAs of
// kCtaThreads and kStages buffers at every size where the operands allow 16-byte vectors, the kernel of full
// lanes at most kMaxRegs registers a thread (0: the compiler's choice); kFullLanes false: never the kernel of
// full lanes; Head: what the staged kernel does to a q or k head (CopyHead: the floor); kTrigger: one head a
// lane group's PDL trigger (Setup::Trigger); kGridTimes: the staged kernel's grid (Setup::run_staged).
template <int kCtaThreads, int kStages = 2, int kMaxRegs = Ops::Setup::kStagedFullMaxRegs, bool kFullLanes = true, bool kPairingCompiled = false,
          typename Head = NormRopeHead, Ops::Setup::Trigger kTrigger = Ops::Setup::Trigger::kAfterWait, int kGridTimes = 0>
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
    if (!setup.template wide_vectors<kStore>(wide_store)) return setup.template run_heads<kFp8, 1, kStore, Pairing::kEither, kTrigger>(s, neox);
    if constexpr (kCtaThreads > 0) {
      return setup.template run_staged<kFp8, Ops::kWideVec, kStore, kCtaThreads, kStages, kMaxRegs, kFullLanes, Head, kGridTimes>(s, neox);
    } else if constexpr (kPairingCompiled) {
      return neox ? setup.template run_heads<kFp8, Ops::kWideVec, kStore, Pairing::kNeox, kTrigger>(s, neox)
                  : setup.template run_heads<kFp8, Ops::kWideVec, kStore, Pairing::kGptJ, kTrigger>(s, neox);
    } else {
      setup.template run_heads<kFp8, Ops::kWideVec, kStore, Pairing::kEither, kTrigger>(s, neox);
    }
  }
};

}  // namespace bench_qknorm_rope
