// RMSNorm building blocks of the norm kernels (<jitkern/impl/norm_launch.cuh>):
//   device::norm::rmsnorm_row          one row per group of threads (a warp group or a whole CTA),
//                                      up to kRegVecs vectors per thread kept in registers and any
//                                      remainder re-read, so any width works;
//   device::norm::rmsnorm_narrow_rows  kRows rows per warp group, one vector per lane (head-sized rows);
//   device::norm::WarpGroup / CtaGroup / FixedCtaGroup  the groups; VecMath the per-vector arithmetic;
//                                      RowPointers;
//   device::norm::StoreOutput          the epilogue that writes the normalised row to the row's `out`
//                                      (others, e.g. 8-bit quantization, live in impl/quant.cuh);
//   host::norm::row_fit, wide_threads  how a row fits the vectors a CTA's threads hold; a wide row's CTA width.
#pragma once

#include <jitkern/cta.cuh>
#include <jitkern/type.cuh>
#include <jitkern/vec.cuh>
#include <jitkern/warp.cuh>

#include <cstdint>

namespace device::norm {

// How a row's vectors map onto the kRegVecs vectors each thread of its group holds:
//   kWider: the row may be wider (the remainder is re-read after the reduction);
//   kFits:  hidden <= kRegVecs * kVec * group size (some threads hold fewer vectors);
//   kExact: hidden == kRegVecs * kVec * group size, so no access needs a bounds check (the checks
//           measured 7-10% of the time of an 8-bit quantizing row kernel, docs/benchmarks/design.md).
enum class RowFit { kWider, kFits, kExact };

// Accumulation type: fp32 for every storage type.
template <typename T>
using StorageType = float;

// kWidth consecutive lanes of a warp (a power of two, 1..32) working on one row.
template <int kWidth>
struct WarpGroup {
  static_assert(kWidth >= 1 && kWidth <= kWarpThreads && (kWidth & (kWidth - 1)) == 0, "kWidth: power of two <= 32");
  JITKERN_DEVICE int rank() const { return threadIdx.x % kWidth; }
  static constexpr JITKERN_DEVICE int size() { return kWidth; }
  // The mask of this thread's group: only its lanes take part, the other groups of the warp may already be done.
  static JITKERN_DEVICE unsigned lanes() {
    return kWidth == 32 ? 0xffffffffu : ((1u << kWidth) - 1) << (threadIdx.x % kWarpThreads / kWidth * kWidth);
  }
  JITKERN_DEVICE float reduce_sum(float v) const { return warp::reduce_sum<kWidth>(v, lanes()); }
  // v >= 0 (an amax).
  JITKERN_DEVICE float reduce_max(float v) const { return warp::reduce_max_nonnegative<kWidth>(v, lanes()); }
};

// The whole CTA working on one row. kOneRowPerCta: the CTA normalises a single row in its lifetime,
// so its reduction may skip the barrier that protects the shared buffer for reuse.
template <bool kOneRowPerCta = false>
struct CtaGroup {
  JITKERN_DEVICE int rank() const { return threadIdx.x; }
  JITKERN_DEVICE int size() const { return blockDim.x; }
  mutable bool max_reduced = false;
  JITKERN_DEVICE float reduce_sum(float v) const {
    if constexpr (kOneRowPerCta) {
      return cta::reduce_sum_once(v);
    } else {
      return cta::reduce_sum(v);
    }
  }
  // v >= 0 (an amax). May be called again (a dynamic amax's second look): that call first waits until
  // every thread has read the previous result from the shared buffer, which the _once form leaves
  // unprotected.
  JITKERN_DEVICE float reduce_max(float v) const {
    if constexpr (kOneRowPerCta) {
      if (max_reduced) __syncthreads();
      max_reduced = true;
      return cta::reduce_max_nonnegative_once(v);
    } else {
      return cta::reduce_max_nonnegative(v);
    }
  }
};

// The sum of kWarps warps' partial sums, added in the order in which CtaGroup<true>'s second round of shuffles
// adds them (a butterfly over 32 lanes, the lanes past the last warp holding 0), so with its bits.
template <int kWarps>
JITKERN_DEVICE float add_warp_partials(const float* partial) {
  float p[kWarps];
#pragma unroll
  for (int i = 0; i < kWarps; ++i) p[i] = partial[i];
#pragma unroll
  for (int offset = kWarpThreads / 2; offset > 0; offset /= 2)  // lane i takes lane i + offset's sum
#pragma unroll
    for (int i = 0; i < offset; ++i)
      if (i + offset < kWarps) p[i] += p[i + offset];
  return p[0];
}

// A whole CTA of exactly kThreads threads (known when compiled) working on one row, for a CTA's single
// row: after the warps' shuffles every thread adds the kThreads / 32 warp partials itself from shared
// memory (add_warp_partials), so that it gives CtaGroup<true>'s bits; one barrier and no second round of
// shuffles.
template <int kThreads>
struct FixedCtaGroup {
  static_assert(kThreads % kWarpThreads == 0 && kThreads <= 1024, "whole warps, at most 1024 threads");
  static constexpr int kWarps = kThreads / kWarpThreads;
  JITKERN_DEVICE int rank() const { return threadIdx.x; }
  static constexpr JITKERN_DEVICE int size() { return kThreads; }
  JITKERN_DEVICE float reduce_sum(float v) const {
    __shared__ float partial[kWarps];
    v = warp::reduce_sum(v);
    if constexpr (kWarps == 1) {
      return v;
    } else {
      if (threadIdx.x % kWarpThreads == 0) partial[threadIdx.x / kWarpThreads] = v;
      __syncthreads();
      return add_warp_partials<kWarps>(partial);
    }
  }
  // v >= 0 (an amax); may be called again.
  JITKERN_DEVICE float reduce_max(float v) const { return cta::reduce_max_nonnegative(v); }
};

// Where one row lives (residual: fused_add_rmsnorm only).
template <typename T>
struct RowPointers {
  T* out;
  const T* in;
  T* residual;
  const T* weight;
};

// Per-vector arithmetic shared by every norm path (fp32 math, results rounded to T).
template <typename T, int kVec>
struct VecMath {
  using Vec = AlignedVector<T, kVec>;
  // x = x + r, rounded to T (the value stored back to the residual and normalised).
  static JITKERN_DEVICE void add(Vec& x, const Vec& r) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) x[j] = cast<T>(cast<float>(x[j]) + cast<float>(r[j]));
  }
  static JITKERN_DEVICE float sum_squares(const Vec& x) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float v = cast<float>(x[j]);
      s += v * v;
    }
    return s;
  }
  // op(acc, v) over the vector's values, from acc.
  template <typename Op>
  static JITKERN_DEVICE float fold(const Vec& x, const Op& op, float acc) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc = op(acc, cast<float>(x[j]));
    return acc;
  }
  static JITKERN_DEVICE Vec normalized(const Vec& x, const Vec& w, float scale) {
    Vec y;
#pragma unroll
    for (int j = 0; j < kVec; ++j) y[j] = cast<T>(cast<float>(x[j]) * scale * cast<float>(w[j]));
    return y;
  }
};

// What a norm kernel does with each normalised row (y, rounded to T): its epilogue. The kernel-level
// object makes one Row per row (row(pointers, r), before the kernel's PDL wait); the row functions
// below then call, in every thread of the row's group:
//   s = scale(fold, reduce_max)  once, after the row is normalised (first, where kNeedsAmax: the
//                      statistic needs the whole row); fold(op) folds op(acc, v) over the thread's
//                      values of y from 0 (op must also combine two partial results, as a max
//                      does), reduce_max(v) takes the max of v >= 0 over the row's group (every
//                      thread gets it; safe to call more than once). s is whatever the stores need
//                      (a scale, a divider);
//   store(y, at, s)    for each vector (at: the vector's first element within the row);
//   finish(s)          once per row, in the group's first thread (e.g. to write the row's scale).
template <typename T>
struct StoreOutput {
  template <typename U, int kVec>
  struct Row {
    static constexpr bool kNeedsAmax = false;
    U* out;
    template <typename Fold, typename ReduceMax>
    JITKERN_DEVICE float scale(const Fold&, const ReduceMax&) const {
      return 0.0f;
    }
    JITKERN_DEVICE void store(const AlignedVector<U, kVec>& y, int64_t at, float) const { y.store_global(out + at); }
    JITKERN_DEVICE void finish(float) const {}
  };
  template <typename U, int kVec>
  JITKERN_DEVICE Row<U, kVec> row(const RowPointers<U>& p, uint32_t) const {
    return {p.out};
  }
  StoreOutput shifted(int64_t) const { return *this; }
  bool allows_vector(int) const { return true; }  // `out` is checked with the row problem
};

// y[i] = x[i] * rsqrt(mean(x^2) + eps) * weight[i], with x = in (or, with kFusedAdd,
// x = residual += in, stored back to residual in T), handed to the epilogue `epi` (StoreOutput: written
// to the row's `out`, which may alias `in`). `hidden` must be a
// multiple of kVec, below 2^30, and every pointer aligned to kVec elements. kFit: what the caller
// guarantees about the row's width (RowFit).
//
// The first kRegVecs vectors of each thread (input, residual and weight alike) are all requested
// before any of them is used or any store is issued, so a row that fits costs one round trip to
// memory (a store between loads would serialise them: the compiler cannot move a load above a store
// that may alias it). Wider rows re-read the remainder after the reduction.
template <typename T, int kVec, int kRegVecs, bool kFusedAdd, RowFit kFit, typename Group, typename Epi>
JITKERN_DEVICE void rmsnorm_row(const Epi& epi, const T* in, T* residual, const T* weight, int64_t hidden, float eps, Group g) {
  using Vec = AlignedVector<T, kVec>;
  using M = VecMath<T, kVec>;
  const int nvec = static_cast<int>(hidden / kVec);
  const int rank = g.rank(), size = g.size();
  constexpr bool kWider = kFit == RowFit::kWider;
  const auto held = [&](int r) { return kFit == RowFit::kExact || r * size + rank < nvec; };  // vector r of this thread
  Vec xs[kRegVecs], ws[kRegVecs], rs[kFusedAdd ? kRegVecs : 1];
  // Computed while the loads are in flight, not after the reduction (measured faster).
  const float inv_hidden = 1.0f / static_cast<float>(hidden);
  float sumsq = 0.0f;

#pragma unroll
  for (int r = 0; r < kRegVecs; ++r) {
    const int i = r * size + rank;
    if (held(r)) {
      xs[r].load_global(in + i * kVec);
      if constexpr (kFusedAdd) rs[r].load_global(residual + i * kVec);
      ws[r].load_global(weight + i * kVec);
    }
  }
#pragma unroll
  for (int r = 0; r < kRegVecs; ++r) {
    const int i = r * size + rank;
    if (held(r)) {
      if constexpr (kFusedAdd) M::add(xs[r], rs[r]), xs[r].store_global(residual + i * kVec);
      sumsq += M::sum_squares(xs[r]);
    }
  }
  for (int i = kRegVecs * size + rank; kWider && i < nvec; i += size) {  // rows wider than the registers
    Vec x;
    x.load_global(in + i * kVec);
    if constexpr (kFusedAdd) {
      Vec r;
      r.load_global(residual + i * kVec);
      M::add(x, r);
      x.store_global(residual + i * kVec);
    }
    sumsq += M::sum_squares(x);
  }
  const float scale = rsqrtf(g.reduce_sum(sumsq) * inv_hidden + eps);
  const T* normalised_from = kFusedAdd ? static_cast<const T*>(residual) : in;  // the remainder's x
  const auto remainder = [&](int i) {
    Vec x, w;
    x.load_global(normalised_from + i * kVec);
    w.load_global(weight + i * kVec);
    return M::normalized(x, w, scale);
  };
  // Without a row statistic each vector is normalised as it is stored (the epilogue-free code's order,
  // measured faster); with one, the row is normalised first.
  if constexpr (Epi::kNeedsAmax) {
#pragma unroll
    for (int r = 0; r < kRegVecs; ++r)
      if (held(r)) xs[r] = M::normalized(xs[r], ws[r], scale);
  }
  const auto fold = [&](auto op) {  // vector by vector from 0, then combined: a shorter dependency chain
    float acc = 0.0f;
#pragma unroll
    for (int r = 0; r < kRegVecs; ++r)
      if (held(r)) acc = op(acc, M::fold(xs[r], op, 0.0f));
    for (int i = kRegVecs * size + rank; kWider && i < nvec; i += size) acc = M::fold(remainder(i), op, acc);
    return acc;
  };
  const auto s = epi.scale(fold, [&](float v) { return g.reduce_max(v); });
#pragma unroll
  for (int r = 0; r < kRegVecs; ++r) {
    const int i = r * size + rank;
    if (held(r)) epi.store(Epi::kNeedsAmax ? xs[r] : M::normalized(xs[r], ws[r], scale), i * kVec, s);
  }
  for (int i = kRegVecs * size + rank; kWider && i < nvec; i += size) epi.store(remainder(i), i * kVec, s);
  if (rank == 0) epi.finish(s);
}

// Narrow rows: a WarpGroup<kWidth> normalises kRows rows of at most kWidth vectors (one vector
// per lane) at once. Every load of every row is issued before the first reduction, so each group
// has kRows rows in flight. `valid[k]` must be the same for all lanes of the group (one row per
// group); lanes past the row's width, and invalid rows, still take part in the reductions. An invalid
// row's pointers must still point at a row: it is read, never written. kFullRows: the caller guarantees
// rows of exactly kWidth vectors (no lane is past the row's width: 40 registers a thread against 48, qknorm
// bf16 rows of 128 with two rows a group).
template <typename T, int kVec, int kRows, bool kFusedAdd, int kWidth, typename EpiRow, bool kFullRows = false>
JITKERN_DEVICE void rmsnorm_narrow_rows(const RowPointers<T> (&rows)[kRows], const EpiRow (&epis)[kRows], const bool (&valid)[kRows],
                                        int64_t hidden, float eps, WarpGroup<kWidth> g) {
  using Vec = AlignedVector<T, kVec>;
  using M = VecMath<T, kVec>;
  const int rank = g.rank();
  const bool lane_active = kFullRows || rank < hidden / kVec;
  const float inv_hidden = 1.0f / static_cast<float>(hidden);
  Vec xs[kRows], ws[kRows], rs[kFusedAdd ? kRows : 1];
  float sumsq[kRows];
  // Every lane loads, unconditionally (predicated loads took 59 registers a thread against 40, qknorm bf16
  // with two rows a group): lanes past the row's width its first vector, invalid rows theirs, both unused.
  const int at = lane_active ? rank * kVec : 0;
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    xs[k].load_global(rows[k].in + at);
    if constexpr (kFusedAdd) rs[k].load_global(rows[k].residual + at);
    ws[k].load_global(rows[k].weight + at);
  }
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    if constexpr (kFusedAdd) {
      M::add(xs[k], rs[k]);
      if (valid[k] && lane_active) xs[k].store_global(rows[k].residual + rank * kVec);
    }
    sumsq[k] = lane_active ? M::sum_squares(xs[k]) : 0.0f;  // an invalid row's sum is never used
  }
#pragma unroll
  for (int k = 0; k < kRows; ++k) sumsq[k] = g.reduce_sum(sumsq[k]);
  if constexpr (EpiRow::kNeedsAmax) {
#pragma unroll
    for (int k = 0; k < kRows; ++k)
      if (valid[k] && lane_active) xs[k] = M::normalized(xs[k], ws[k], rsqrtf(sumsq[k] * inv_hidden + eps));
  }
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    // Every lane of the group takes part in scale()'s reductions, invalid rows too (`valid` is the
    // group's); only the stores are skipped.
    const auto fold = [&](auto op) { return valid[k] && lane_active ? M::fold(xs[k], op, 0.0f) : 0.0f; };
    const auto s = epis[k].scale(fold, [&](float v) { return g.reduce_max(v); });
    if (valid[k]) {
      if (lane_active) epis[k].store(EpiRow::kNeedsAmax ? xs[k] : M::normalized(xs[k], ws[k], rsqrtf(sumsq[k] * inv_hidden + eps)), rank * kVec, s);
      if (rank == 0) epis[k].finish(s);
    }
  }
}

}  // namespace device::norm

#ifndef __CUDACC_RTC__
#include <jitkern/utils.h>

namespace host::norm {

// Threads of a wide-row CTA: reg_vecs vectors each over a row of `nvec` vectors, whole warps, at most
// `cap` (the device's host::RowPolicy::row_threads; wider rows re-read their remainder).
inline int wide_threads(int64_t nvec, int reg_vecs, int cap) {
  return static_cast<int>(host::min<int64_t>(cap, host::div_ceil(host::div_ceil(nvec, reg_vecs), 32) * 32));
}

// How a row of `nvec` vectors fits `threads` threads holding `reg_vecs` vectors each (device::norm::RowFit).
inline device::norm::RowFit row_fit(int64_t nvec, int reg_vecs, int threads) {
  const int64_t held = int64_t{reg_vecs} * threads;
  return nvec == held ? device::norm::RowFit::kExact : nvec < held ? device::norm::RowFit::kFits : device::norm::RowFit::kWider;
}

}  // namespace host::norm
#endif  // __CUDACC_RTC__
