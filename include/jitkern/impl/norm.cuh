// RMSNorm building blocks shared by the norm kernels (csrc/norm.cuh):
//   device::norm::rmsnorm_row  normalises one row with a group of threads (a warp or a whole CTA),
//                              16-byte vectors where alignment allows, up to kRegVecs vectors per
//                              thread kept in registers and any remainder re-read (so any width works);
//   device::norm::WarpGroup / CtaGroup  the two groups;
//   host::norm::vector_width   the widest vector every pointer and stride of a problem allows.
#pragma once

#include <jitkern/cta.cuh>
#include <jitkern/type.cuh>
#include <jitkern/vec.cuh>
#include <jitkern/warp.cuh>

#include <cstdint>

namespace device::norm {

// Accumulation type: fp32 for every storage type.
template <typename T>
using StorageType = float;

// kWidth consecutive lanes of a warp (a power of two, 1..32) working on one row.
template <int kWidth>
struct WarpGroup {
  static_assert(kWidth >= 1 && kWidth <= kWarpThreads && (kWidth & (kWidth - 1)) == 0, "kWidth: power of two <= 32");
  JITKERN_DEVICE int rank() const { return threadIdx.x % kWidth; }
  static constexpr int size() { return kWidth; }
  // Only this group's lanes take part: the other groups of the warp may already be done.
  JITKERN_DEVICE float reduce_sum(float v) const {
    const unsigned lanes = kWidth == 32 ? 0xffffffffu : ((1u << kWidth) - 1) << (threadIdx.x % kWarpThreads / kWidth * kWidth);
    return warp::reduce_sum<kWidth>(v, lanes);
  }
};

struct CtaGroup {
  JITKERN_DEVICE int rank() const { return threadIdx.x; }
  JITKERN_DEVICE int size() const { return blockDim.x; }
  JITKERN_DEVICE float reduce_sum(float v) const { return cta::reduce_sum(v); }
};

// out[i] = x[i] * rsqrt(mean(x^2) + eps) * weight[i], with x = in (or, with kFusedAdd,
// x = residual += in, stored back to residual in T). `out` may alias `in`. `hidden` must be a
// multiple of kVec and every pointer aligned to kVec elements.
//
// The first kRegVecs vectors of each thread (input and weight alike) are loaded before the
// reduction and kept in registers, so a row that fits costs one round trip to memory; wider rows
// re-read the remainder after the reduction.
template <typename T, int kVec, int kRegVecs, bool kFusedAdd, typename Group>
JITKERN_DEVICE void rmsnorm_row(T* out, const T* in, T* residual, const T* weight, int64_t hidden, float eps, Group g) {
  using Vec = AlignedVector<T, kVec>;
  const int64_t nvec = hidden / kVec;
  const int rank = g.rank(), size = g.size();
  Vec xs[kRegVecs], ws[kRegVecs];
  float sumsq = 0.0f;

  auto load_x = [&](int64_t i, Vec& x) {
    x.load(in + i * kVec);
    if constexpr (kFusedAdd) {
      Vec r;
      r.load(residual + i * kVec);
#pragma unroll
      for (int j = 0; j < kVec; ++j) r[j] = cast<T>(cast<float>(x[j]) + cast<float>(r[j]));
      r.store(residual + i * kVec);
      x = r;
    }
  };
  auto accumulate = [&](const Vec& x) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float v = cast<float>(x[j]);
      sumsq += v * v;
    }
  };
  auto store_y = [&](int64_t i, const Vec& x, const Vec& w, float scale) {
    Vec y;
#pragma unroll
    for (int j = 0; j < kVec; ++j) y[j] = cast<T>(cast<float>(x[j]) * scale * cast<float>(w[j]));
    y.store(out + i * kVec);
  };

#pragma unroll
  for (int r = 0; r < kRegVecs; ++r) {
    const int64_t i = int64_t{r} * size + rank;
    if (i < nvec) {
      load_x(i, xs[r]);
      ws[r].load(weight + i * kVec);
    }
  }
#pragma unroll
  for (int r = 0; r < kRegVecs; ++r)
    if (int64_t{r} * size + rank < nvec) accumulate(xs[r]);
  for (int64_t i = int64_t{kRegVecs} * size + rank; i < nvec; i += size) {  // rows wider than the registers
    Vec x;
    load_x(i, x);
    accumulate(x);
  }
  const float scale = rsqrtf(g.reduce_sum(sumsq) / static_cast<float>(hidden) + eps);
#pragma unroll
  for (int r = 0; r < kRegVecs; ++r) {
    const int64_t i = int64_t{r} * size + rank;
    if (i < nvec) store_y(i, xs[r], ws[r], scale);
  }
  for (int64_t i = int64_t{kRegVecs} * size + rank; i < nvec; i += size) {
    Vec x, w;
    x.load((kFusedAdd ? static_cast<const T*>(residual) : in) + i * kVec);
    w.load(weight + i * kVec);
    store_y(i, x, w, scale);
  }
}

}  // namespace device::norm

namespace host::norm {

// Elements per vector access for a row problem: 16 bytes when the width, every base pointer and
// every row stride allow it, else 1.
template <typename T>
inline int vector_width(int64_t hidden, std::initializer_list<const void*> pointers, std::initializer_list<int64_t> strides) {
  constexpr int kVec = 16 / sizeof(T);
  if (hidden % kVec != 0) return 1;
  for (const void* p : pointers)
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return 1;
  for (int64_t s : strides)
    if (s % kVec != 0) return 1;
  return kVec;
}

}  // namespace host::norm
