// Per-head RMSNorm of q and k fused with RoPE (Qwen3-, GLM-style attention), in place, for fp16/bf16/fp32
// q/k and a cos/sin cache in fp32 (or the inputs' dtype):
//   QkNormRopeOps<T>::apply          each q head normalised with q_weight, each k head with k_weight
//                                    (fp32 math, rounded to T as the norm family rounds; the weight plus
//                                    weight_offset: 1 for Gemma's (1 + w) norms), then rotated
//                                    (NeoX half-split or GPT-J interleaved) over the cache's first R columns;
//   QkNormRopeOps<T>::apply_store    the same, with the normalised, rotated k and the v rows written to
//                                    k_cache[loc], v_cache[loc] (flat or paged, <jitkern/impl/kv_cache.cuh>);
//   QkNormRopeOps<T>::apply_store_fp8  into float8_e4m3 caches (q = saturate(rne(x / scale)), per-tensor
//                                    scales, as <jitkern/impl/quant.cuh> rounds).
// The cos/sin cache is [max_position, R]: R/2 cosines then R/2 sines. mRoPE (vision-language models):
// positions [3, N] (t, h, w), each frequency taking the cos/sin of one of its token's three positions by its
// section (mrope_t, mrope_h, mrope_w frequencies in turn, or interleaved: f % 3 == 1 below 3 mrope_h takes
// h, f % 3 == 2 below 3 mrope_w takes w, the rest t). A token with a position outside [0, max_position) is
// skipped entirely; a location outside the cache skips that token's cache write only.
#pragma once

#include <jitkern/impl/kv_cache.cuh>
#include <jitkern/impl/norm.cuh>
#include <jitkern/impl/quant.cuh>
#include <jitkern/ptx.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/type.cuh>
#include <jitkern/utils.cuh>
#include <jitkern/vec.cuh>
#ifndef __CUDACC_RTC__
#include <jitkern/impl/norm_launch.cuh>
#include <jitkern/tensor.h>
#include <jitkern/utils.h>
#endif

#include <cstdint>

namespace jitkern_qknorm_rope {

using device::AlignedVector;
using device::kv_cache::CacheLayout;
#ifndef __CUDACC_RTC__
using jitkern::TensorView;
#endif

// CTAs of kThreads threads; each head is worked by a group of lanes (a power of two <= 32, at most one
// warp, so its sum of squares needs only shuffles).
constexpr int kThreads = 128;

// Vectors per thread of each kind (rotated pair units, unrotated vectors) kept in registers: a 32-lane
// group holds rotary dims up to 512 and as many unrotated columns (fp32: 256 and 256); heads too wide for
// 16-byte vectors take the one-element kernel. bf16 at 2 a thread (one head a group): 150 registers
// against ~80 at 1.
template <int kVec>
inline constexpr int kItems = kVec >= 8 ? 1 : 8 / kVec;

template <typename T>
struct Params {
  const void* positions;
  int64_t positions_stride;
  int64_t section_stride;  // mRoPE: elements from the t positions to the h ones, and from those to the w ones
  int32_t mrope_t, mrope_h, mrope_w;
  const void* cos_sin;  // fp32, or T (cos_sin_t)
  int64_t cos_sin_stride;
  int64_t max_position;
  T* q;
  T* k;
  const T* q_weight;
  const T* k_weight;
  int64_t q_token, q_head, k_token, k_head;  // elements
  float eps, inv_dim;
  float weight_offset;  // the norm multiplies by weight + weight_offset (Gemma: 1)
  int32_t q_heads, k_heads, head_dim, rot_half;
  int32_t pairs, tails;  // a head's rotated pair units (rot_half / kVec) and unrotated vectors ((D - R) / kVec)
  int32_t width_log2;    // lanes per head: 1 << width_log2
  int32_t token_heads;   // heads a token has work for: q, k and, with the cache write, v
  int32_t items;         // tokens * token_heads
  bool positions64, cos_sin_t, mrope, mrope_interleaved, early_trigger;
  bool neox;  // read by kernels of Pairing::kEither
};

// mRoPE: which of a token's three positions (0: t, 1: h, 2: w) frequency f takes.
template <typename T>
__device__ __forceinline__ int mrope_section(const Params<T>& p, int f) {
  if (p.mrope_interleaved) return f % 3 == 1 && f < 3 * p.mrope_h ? 1 : f % 3 == 2 && f < 3 * p.mrope_w ? 2 : 0;
  return f < p.mrope_t ? 0 : f < p.mrope_t + p.mrope_h ? 1 : 2;
}

// The cache write (apply_store).
struct Store {
  const void* v;
  int64_t v_token, v_head;  // elements
  CacheLayout k_cache, v_cache;
  const void* loc;
  int64_t loc_stride;
  float k_scale, v_scale;
  bool loc64;
};

// kVec values of a cos/sin row (fp32 or T) as floats, in loads of at most 16 bytes.
template <typename C, int kVec>
__device__ __forceinline__ void load_as_floats(float (&dst)[kVec], const C* src) {
  constexpr int kChunk = kVec < device::kVec16<C> ? kVec : device::kVec16<C>;
#pragma unroll
  for (int i = 0; i < kVec; i += kChunk) {
    AlignedVector<C, kChunk> v;
    v.load(src + i);
#pragma unroll
    for (int j = 0; j < kChunk; ++j) dst[i + j] = device::cast<float>(v[j]);
  }
}

// A vector's values as floats, and floats rounded to T as a vector: 2-byte types two to a 32-bit word (one
// instruction a value to float, one a pair back; value by value nvcc split and merged the words, most of
// the kernel's instructions).
template <typename T, int kVec>
__device__ __forceinline__ void to_floats(float (&f)[kVec], const AlignedVector<T, kVec>& v) {
  if constexpr (sizeof(T) == 2 && kVec % 2 == 0) {
#pragma unroll
    for (int m = 0; m < kVec / 2; ++m) {
      device::packed_t<T> w;
      __builtin_memcpy(&w, &v.data[2 * m], sizeof(w));
      const fp32x2_t x = device::cast<fp32x2_t>(w);
      f[2 * m] = x.x, f[2 * m + 1] = x.y;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) f[j] = device::cast<float>(v[j]);
  }
}
template <typename T, int kVec>
__device__ __forceinline__ AlignedVector<T, kVec> from_floats(const float* f) {
  AlignedVector<T, kVec> v;
  if constexpr (sizeof(T) == 2 && kVec % 2 == 0) {
#pragma unroll
    for (int m = 0; m < kVec / 2; ++m) {
      const device::packed_t<T> w = device::cast<device::packed_t<T>>(fp32x2_t{f[2 * m], f[2 * m + 1]});
      __builtin_memcpy(&v.data[2 * m], &w, sizeof(w));
    }
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] = device::cast<T>(f[j]);
  }
  return v;
}

// The pair unit's two vectors' values x = a ++ b (2 kVec floats, already normalised and rounded to T)
// rotated in fp32: GPT-J pairs (x[2f], x[2f + 1]) with frequency f; NeoX (and kVec = 1) pairs x[j] with
// x[kVec + j], frequency j.
template <bool kInterleaved, int kVec>
__device__ __forceinline__ void rotate_pairs(float (&x)[2 * kVec], const float (&cs)[kVec], const float (&sn)[kVec]) {
#pragma unroll
  for (int f = 0; f < kVec; ++f) {
    const int i = kInterleaved ? 2 * f : f, j = kInterleaved ? 2 * f + 1 : kVec + f;
    const float xi = x[i], xj = x[j];
    x[i] = fmaf(xi, cs[f], -xj * sn[f]);
    x[j] = fmaf(xj, cs[f], xi * sn[f]);
  }
}
// ... into a and b, GPT-J's pairs where `interleaved` (a constant where the lane's pairing is one).
template <typename T, int kVec>
__device__ __forceinline__ void rotate_unit(AlignedVector<T, kVec>& a, AlignedVector<T, kVec>& b, float (&x)[2 * kVec], const float (&cs)[kVec],
                                            const float (&sn)[kVec], bool interleaved) {
  if (kVec > 1 && interleaved) {
    rotate_pairs<true>(x, cs, sn);
  } else {
    rotate_pairs<false>(x, cs, sn);
  }
  a = from_floats<T, kVec>(x), b = from_floats<T, kVec>(x + kVec);
}

// kVec values at element `at` of a cache row: as T, or quantized to fp8 e4m3 bytes.
template <bool kFp8, typename T, int kVec>
__device__ __forceinline__ void to_cache(char* row, int64_t at, const AlignedVector<T, kVec>& x, const device::quant::Divider& d) {
  if constexpr (kFp8) {
    device::quant::store_quantized<fp8_e4m3_t>(reinterpret_cast<uint8_t*>(row) + at, x, d);
  } else {
    x.store(reinterpret_cast<T*>(row) + at);
  }
}

// How a head's rotated columns pair: NeoX (column c with R/2 + c) or GPT-J (2f with 2f + 1) compiled in, or
// either, Params::neox's (the few-token kernel: one instantiation for both, so that a module compiles fewer
// kernels).
enum class Pairing { kGptJ, kNeox, kEither };

// A lane of a head's group of 2^width_log2 lanes: lane `rank` holds pair units rank, rank + width, ...
// (NeoX: columns [u kVec, +kVec) with [R/2 + u kVec, +kVec); GPT-J: [2 u kVec, +2 kVec)) and the
// unrotated vectors rank, rank + width, ... from column R. kFull: each lane holds exactly one pair unit and
// no unrotated vector (pairs == width, no tails: R = D of 128 bf16 or fp16, 64 fp32), so that the head's
// code has no branches.
template <Pairing kPairing, int kVec, bool kFull = false>
struct HeadLane {
  int rank, width, pairs, tails, rot_half;
  unsigned lanes;  // the group's lanes of the warp, for its shuffles
  bool either_neox;

  template <typename T>
  __device__ __forceinline__ HeadLane(const Params<T>& p, int thread)
      : rank(thread & ((1 << p.width_log2) - 1)), width(1 << p.width_log2), pairs(p.pairs), tails(p.tails), rot_half(p.rot_half),
        lanes(width == 32 ? 0xffffffffu : ((1u << width) - 1) << (thread % 32 & ~(width - 1))), either_neox(p.neox) {}
  __device__ __forceinline__ bool neox() const { return kPairing == Pairing::kEither ? either_neox : kPairing == Pairing::kNeox; }
  __device__ __forceinline__ int unit_col(int i) const {
    const int u = rank + i * width;
    if constexpr (kPairing == Pairing::kEither) return neox() ? u * kVec : 2 * u * kVec;  // (neox() ? 1 : 2) * u * kVec spilled at kVec 1
    return (neox() ? 1 : 2) * u * kVec;
  }
  __device__ __forceinline__ int pair() const { return neox() ? rot_half : kVec; }  // columns from a unit's a to its b
  __device__ __forceinline__ int tail_col(int i) const { return 2 * rot_half + (rank + i * width) * kVec; }
  __device__ __forceinline__ bool has_unit(int i) const { return kFull ? i == 0 : rank + i * width < pairs; }
  __device__ __forceinline__ bool has_tail(int i) const { return !kFull && rank + i * width < tails; }
};

// A lane's share of one head row (or of a weight): its pair units' vectors a, b and unrotated vectors t.
template <typename T, int kVec>
struct HeadVecs {
  AlignedVector<T, kVec> a[kItems<kVec>], b[kItems<kVec>], t[kItems<kVec>];

  template <typename Lane>
  __device__ __forceinline__ void load(const T* row, const Lane& l) {
#pragma unroll
    for (int i = 0; i < kItems<kVec>; ++i) {
      if (l.has_unit(i)) a[i].load(row + l.unit_col(i)), b[i].load(row + l.unit_col(i) + l.pair());
      if (l.has_tail(i)) t[i].load(row + l.tail_col(i));
    }
  }
  // To a cache row (a v head; a k head's goes with its rotation).
  template <bool kFp8, typename Lane>
  __device__ __forceinline__ void to_cache_row(char* row, const Lane& l, const device::quant::Divider& d) const {
#pragma unroll
    for (int i = 0; i < kItems<kVec>; ++i) {
      if (l.has_unit(i)) to_cache<kFp8>(row, l.unit_col(i), a[i], d), to_cache<kFp8>(row, l.unit_col(i) + l.pair(), b[i], d);
      if (l.has_tail(i)) to_cache<kFp8>(row, l.tail_col(i), t[i], d);
    }
  }
};

// A lane's share of a norm weight as floats, weight_offset added, for norm_rope_head: the unit i's a, b and
// unrotated vector i, converted from the lane's T vectors where the norm takes them (HeadWeights: one head a
// lane group, whose registers bound its CTAs an SM) or read from a row of floats in shared memory
// (RowWeights: the staged kernel converts each weight once a CTA).
template <typename T, int kVec>
struct HeadWeights {
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
template <typename Lane, int kVec>
struct RowWeights {
  static_assert(kVec % 4 == 0, "rows of floats read 16 bytes at a time");
  const float* row;
  const Lane& l;

  __device__ __forceinline__ AlignedVector<float, kVec> a(int i) const { return at(l.unit_col(i)); }
  __device__ __forceinline__ AlignedVector<float, kVec> b(int i) const { return at(l.unit_col(i) + l.pair()); }
  __device__ __forceinline__ AlignedVector<float, kVec> t(int i) const { return at(l.tail_col(i)); }
  __device__ __forceinline__ AlignedVector<float, kVec> at(int col) const {
    AlignedVector<float, kVec> v;
#pragma unroll
    for (int j = 0; j < kVec; j += 4) reinterpret_cast<float4*>(&v.data[j])[0] = reinterpret_cast<const float4*>(row + col + j)[0];
    return v;
  }
};

// The cos and sin of a lane's pair units' frequencies at the token's position(s) (mRoPE: each from the row
// of its section's position).
template <int kVec>
struct Rotation {
  float cs[kItems<kVec>][kVec], sn[kItems<kVec>][kVec];

  template <typename T, typename Lane>
  __device__ __forceinline__ void load(const Params<T>& p, const Lane& l, int64_t position, int64_t position_h, int64_t position_w) {
    const int64_t row_bytes = p.cos_sin_stride * (p.cos_sin_t ? int64_t{sizeof(T)} : int64_t{4});
    const char* row = static_cast<const char*>(p.cos_sin) + position * row_bytes;
    const auto cos_sin_at = [&](const char* r, int f) {  // one frequency's (cos, sin)
      return p.cos_sin_t ? make_float2(device::cast<float>(reinterpret_cast<const T*>(r)[f]), device::cast<float>(reinterpret_cast<const T*>(r)[p.rot_half + f]))
                         : make_float2(reinterpret_cast<const float*>(r)[f], reinterpret_cast<const float*>(r)[p.rot_half + f]);
    };
#pragma unroll
    for (int i = 0; i < kItems<kVec>; ++i) {
      const int at = (l.rank + i * l.width) * kVec;
      if (!l.has_unit(i)) continue;
      if (p.mrope) {  // element by element, each from the row of its section's position
#pragma unroll
        for (int f = 0; f < kVec; ++f) {
          const int section = mrope_section(p, at + f);
          const int64_t pos = section == 0 ? position : section == 1 ? position_h : position_w;
          const float2 c = cos_sin_at(static_cast<const char*>(p.cos_sin) + pos * row_bytes, at + f);
          cs[i][f] = c.x, sn[i][f] = c.y;
        }
      } else if (p.cos_sin_t) {
        load_as_floats(cs[i], reinterpret_cast<const T*>(row) + at), load_as_floats(sn[i], reinterpret_cast<const T*>(row) + p.rot_half + at);
      } else {
        load_as_floats(cs[i], reinterpret_cast<const float*>(row) + at), load_as_floats(sn[i], reinterpret_cast<const float*>(row) + p.rot_half + at);
      }
    }
  }
};

// A token's position (mRoPE: its t, h and w positions) and, with the cache write, its cache location.
struct TokenIndices {
  int64_t position, position_h, position_w, slot;
  // Outside the cos/sin cache: the token is skipped.
  __device__ __forceinline__ bool outside(int64_t max_position) const {
    const auto out = [&](int64_t at) { return at < 0 || at >= max_position; };
    return out(position) || out(position_h) || out(position_w);
  }
};
template <bool kStore, typename T>
__device__ __forceinline__ TokenIndices load_token(const Params<T>& p, const Store& s, int64_t token) {
  TokenIndices at;
  at.position = at.position_h = at.position_w = device::kv_cache::load_index(p.positions, p.positions64, token * p.positions_stride);
  if (p.mrope) {
    at.position_h = device::kv_cache::load_index(p.positions, p.positions64, p.section_stride + token * p.positions_stride);
    at.position_w = device::kv_cache::load_index(p.positions, p.positions64, 2 * p.section_stride + token * p.positions_stride);
  }
  at.slot = kStore ? device::kv_cache::load_index(s.loc, s.loc64, token * s.loc_stride) : -1;
  return at;
}

// A q or k head from a lane group's registers: normalised (the lanes' sums of squares combined by
// shuffles) with weight w, rotated, stored to dst and, with a cache row, there.
template <bool kFp8, bool kStore, typename T, typename Lane, int kVec, typename Weights>
__device__ __forceinline__ void norm_rope_head(const Params<T>& p, const Lane& l, HeadVecs<T, kVec>& x, const Weights& w,
                                               const Rotation<kVec>& r, T* dst, [[maybe_unused]] char* row, [[maybe_unused]] const device::quant::Divider& div) {
  constexpr int kN = kItems<kVec>;
  float fa[kN][2 * kVec], ft[kN][kVec];  // a pair unit's a ++ b; an unrotated vector
  const auto squares = [](const float* f) {  // VecMath::sum_squares' order
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < kVec; ++j) s += f[j] * f[j];
    return s;
  };
  float sumsq = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    if (l.has_unit(i)) {
      to_floats(reinterpret_cast<float(&)[kVec]>(fa[i][0]), x.a[i]), to_floats(reinterpret_cast<float(&)[kVec]>(fa[i][kVec]), x.b[i]);
      sumsq += squares(fa[i]) + squares(fa[i] + kVec);
    }
    if (l.has_tail(i)) to_floats(ft[i], x.t[i]), sumsq += squares(ft[i]);
  }
  for (int offset = l.width >> 1; offset > 0; offset >>= 1) sumsq += __shfl_xor_sync(l.lanes, sumsq, offset);
  const float scale = rsqrtf(sumsq * p.inv_dim + p.eps);
  // rmsnorm's rounding: (x * scale) * (w + offset) in fp32, rounded once to T (kept as floats of T).
  const auto normalize = [&](float* f, const auto& fw) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) f[j] = f[j] * scale * fw[j];
    to_floats(reinterpret_cast<float(&)[kVec]>(*f), from_floats<T, kVec>(f));
  };
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    if (l.has_unit(i)) {
      normalize(fa[i], w.a(i)), normalize(fa[i] + kVec, w.b(i));
      rotate_unit(x.a[i], x.b[i], fa[i], r.cs[i], r.sn[i], !l.neox());
      x.a[i].store(dst + l.unit_col(i)), x.b[i].store(dst + l.unit_col(i) + l.pair());
      if constexpr (kStore) {
        if (row != nullptr) to_cache<kFp8>(row, l.unit_col(i), x.a[i], div), to_cache<kFp8>(row, l.unit_col(i) + l.pair(), x.b[i], div);
      }
    }
    if (l.has_tail(i)) {
      normalize(ft[i], w.t(i));
      x.t[i] = from_floats<T, kVec>(ft[i]);
      x.t[i].store(dst + l.tail_col(i));
      if constexpr (kStore) {
        if (row != nullptr) to_cache<kFp8>(row, l.tail_col(i), x.t[i], div);
      }
    }
  }
}

// One head per group of 2^width_log2 lanes (HeadLane): heads (token, h) in order q, k, (v) of each token.
// A q or k head is normalised, rotated and stored in place (norm_rope_head), a k head also to its cache
// row; a v head is only copied to its cache row.
template <typename T, bool kFp8, Pairing kPairing, int kVec, bool kStore>
__global__ void __launch_bounds__(kThreads) qknorm_rope_kernel(const __grid_constant__ Params<T> p, const __grid_constant__ Store s) {
#ifdef __CUDACC__
  if (p.early_trigger) device::pdl_trigger_secondary();
  const int tid = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  const int item = tid >> p.width_log2;
  if (item >= p.items) return;  // whole groups leave: the others' shuffles name only their own lanes
  const HeadLane<kPairing, kVec> l(p, static_cast<int>(threadIdx.x));
  const int token = item / p.token_heads, h = item - token * p.token_heads;
  const bool is_q = h < p.q_heads, is_v = kStore && h >= p.q_heads + p.k_heads;
  const int kh = h - p.q_heads;  // k (or, past the k heads, v) head
  T* x = is_q ? p.q + token * p.q_token + h * p.q_head : p.k + token * p.k_token + kh * p.k_head;
  if constexpr (kStore) {
    if (is_v) x = const_cast<T*>(static_cast<const T*>(s.v)) + token * s.v_token + (kh - p.k_heads) * s.v_head;
  }
  const T* w = is_q ? p.q_weight : p.k_weight;

  const void* position_at = device::kv_cache::index_address(p.positions, p.positions64, token * p.positions_stride);
  [[maybe_unused]] const void* slot_at = kStore ? device::kv_cache::index_address(s.loc, s.loc64, token * s.loc_stride) : nullptr;
  // Keeps the first addresses' arithmetic before the wait (see docs/add-a-kernel.md); not for one-element
  // vectors, whose many loads make the held addresses cost more than they save.
  if constexpr (kVec > 1) {
    if (l.has_unit(0)) device::prefetch_before_wait(x + l.unit_col(0));
    device::prefetch_before_wait(position_at);
    if constexpr (kStore) device::prefetch_before_wait(slot_at);
  }
  device::pdl_wait_primary();
  if (!p.early_trigger) device::pdl_trigger_secondary();
  const int64_t position = device::kv_cache::load_index_at(position_at, p.positions64);
  int64_t position_h = position, position_w = position;
  if (p.mrope) {
    position_h = device::kv_cache::load_index(p.positions, p.positions64, p.section_stride + token * p.positions_stride);
    position_w = device::kv_cache::load_index(p.positions, p.positions64, 2 * p.section_stride + token * p.positions_stride);
  }
  [[maybe_unused]] int64_t slot = -1;
  if constexpr (kStore) slot = device::kv_cache::load_index_at(slot_at, s.loc64);
  HeadVecs<T, kVec> v, wv;
  v.load(x, l);
  if (!is_v) wv.load(w, l);
  const auto outside = [&](int64_t at) { return at < 0 || at >= p.max_position; };
  if (outside(position) || outside(position_h) || outside(position_w)) return;  // the whole group: one token
  [[maybe_unused]] char* row = nullptr;
  [[maybe_unused]] device::quant::Divider div(1.0f);
  if constexpr (kStore) {
    if (!is_q && s.k_cache.holds(slot)) {
      const CacheLayout& cache = is_v ? s.v_cache : s.k_cache;
      row = cache.row(slot) + (kFp8 ? 1 : int64_t{sizeof(T)}) * (is_v ? kh - p.k_heads : kh) * p.head_dim;
      if constexpr (kFp8) div = device::quant::Divider(is_v ? s.v_scale : s.k_scale);
    }
    if (is_v) {
      if (row != nullptr) v.template to_cache_row<kFp8>(row, l, div);
      return;
    }
  }
  // The cos/sin loads issue before the reduction, which their latency then hides.
  Rotation<kVec> r;
  r.load(p, l, position, position_h, position_w);
  norm_rope_head<kFp8, kStore>(p, l, v, HeadWeights<T, kVec>{wv, p.weight_offset}, r, x, row, div);
#endif
}

// The staged kernel's token copies. From sm_90 by bulk copies (the TMA) that land on an mbarrier, one a
// contiguous block of heads (else one a head), all issued by one thread: cp.async's per-thread copies and
// their addresses were a fifth of the kernel's instructions. v leaves for the cache the same way.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define JITKERN_QKNORM_ROPE_BULK 1
using device::ptx::bulk_load, device::ptx::bulk_store, device::ptx::bulk_wait, device::ptx::bulk_wait_read;
using device::ptx::mbarrier_arrive_expect_tx, device::ptx::mbarrier_init_one, device::ptx::mbarrier_wait_parity;
#endif

// A lane's unit of a weight row held in registers through a loop of heads (the kernel of full lanes: one
// unit a lane), for norm_rope_head.
template <int kVec>
struct HeldWeights {
  AlignedVector<float, kVec> wa, wb;
  __device__ __forceinline__ AlignedVector<float, kVec> a(int) const { return wa; }
  __device__ __forceinline__ AlignedVector<float, kVec> b(int) const { return wb; }
  __device__ __forceinline__ AlignedVector<float, kVec> t(int) const { return wa; }
};

// What the staged kernel does to a staged q or k head (benchmarks put a copy in its place for the bytes alone).
struct NormRopeHead {
  template <bool kFp8, bool kStore, typename T, typename Lane, int kVec, typename Weights>
  __device__ __forceinline__ static void apply(const Params<T>& p, const Lane& l, HeadVecs<T, kVec>& x, const Weights& w, const Rotation<kVec>& r,
                                               T* dst, char* row, const device::quant::Divider& div) {
    norm_rope_head<kFp8, kStore>(p, l, x, w, r, dst, row, div);
  }
};

// With many tokens and 16-byte vectors (Setup::launch's rule): CTAs of kCtaThreads, each taking tokens
// blockIdx.x, + gridDim.x, ... Each token's q, k (and v) heads are copied into shared memory (above), so that
// all its loads are in flight at once without holding registers (one head a lane group held one head's
// loads a thread: H200, T = 4096, q 32 / kv 8 heads of 128, bf16, cache write, 60% of the access pattern's
// ceiling); with kStages buffers the copies of the kStages - 1 tokens after the current one are in flight
// while it is worked. The weights are converted to floats once a CTA (the kernel of full lanes holds its
// unit of them in registers a loop of heads). The lane groups take the token's q heads, then its k heads, in
// turn (Head: norm_rope_head), and its v rows go to the cache. Shared memory: the q and k weights as floats,
// kStages buffers of q heads, k heads, v heads, head_dim elements each, then a barrier a buffer. kMaxRegs:
// registers a thread at most (0: the compiler's choice; __launch_bounds__' CTA counts round down to fewer,
// which spill).
#if defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ * 100 + __CUDACC_VER_MINOR__ >= 1204
#define JITKERN_QKNORM_ROPE_MAXNREG(n) __maxnreg__((n) > 0 ? (n) : 255)
#else
#define JITKERN_QKNORM_ROPE_MAXNREG(n)
#endif
template <typename T, bool kFp8, Pairing kPairing, int kVec, bool kStore, int kCtaThreads, int kStages, int kMaxRegs, bool kFull,
          typename Head = NormRopeHead>
__global__ void JITKERN_QKNORM_ROPE_MAXNREG(kMaxRegs) qknorm_rope_staged_kernel(const __grid_constant__ Params<T> p, const __grid_constant__ Store s,
                                                                          int64_t tokens) {
#ifdef __CUDACC__
  static_assert(kStages >= 2 && kStages <= 4, "two to four buffers");
  extern __shared__ int4 staged[];
  if (p.early_trigger) device::pdl_trigger_secondary();
  const int thread = static_cast<int>(threadIdx.x), heads = p.q_heads + p.k_heads, row_vecs = p.head_dim / kVec;
  const int64_t buffer_elems = int64_t{p.token_heads} * p.head_dim;
  float* const weights = reinterpret_cast<float*>(staged);  // q's, then k's, weight_offset added
  const auto buffer_at = [&](int b) { return reinterpret_cast<T*>(weights + 2 * p.head_dim) + b * buffer_elems; };
  [[maybe_unused]] uint64_t* const landed = reinterpret_cast<uint64_t*>(buffer_at(kStages));  // a buffer's bulk copies
#ifdef JITKERN_QKNORM_ROPE_BULK
  // count heads of one stride (thread 0 issues the copies).
  const auto copy_heads = [&](T* rows, const T* src, int64_t head_stride, int count, uint64_t* bar) {
    const bool whole = head_stride == p.head_dim;
    const int copies = whole ? (count > 0 ? 1 : 0) : count;
    const auto bytes = static_cast<uint32_t>((whole ? count : 1) * p.head_dim * sizeof(T));
#pragma unroll 1
    for (int h = 0; h < copies; ++h) bulk_load(rows + h * p.head_dim, src + h * head_stride, bytes, bar);
  };
#else
  // A thread copies vector c of head h, then steps kCtaThreads vectors on by (dh, dc): a division per
  // vector put as many instructions before each copy as the token's arithmetic has.
  const int h0 = thread / row_vecs, c0 = thread - h0 * row_vecs, dh = kCtaThreads / row_vecs, dc = kCtaThreads - dh * row_vecs;
  const auto copy_heads = [&](T* rows, const T* src, int64_t head_stride, int count, uint64_t*) {
    for (int h = h0, c = c0; h < count;) {
      device::ptx::cp_async_16(rows + h * p.head_dim + c * kVec, src + h * head_stride + c * kVec);
      h += dh, c += dc;
      if (c >= row_vecs) c -= row_vecs, ++h;
    }
  };
#endif
  // The token's indices and its heads into buffer b (cp.async: a copy group each call, empty past the last
  // token, so that the wait below counts groups alike in every turn).
  TokenIndices ahead[kStages];  // tokens token, + gridDim.x, ...: the buffers' tokens in turn
  const auto stage = [&](int64_t token, TokenIndices& at, int b) {
    if (token < tokens) {
      at = load_token<kStore>(p, s, token);
      T* const rows = buffer_at(b);
#ifdef JITKERN_QKNORM_ROPE_BULK
      if (thread != 0) return;
      mbarrier_arrive_expect_tx(&landed[b], static_cast<uint32_t>(buffer_elems * sizeof(T)));
#endif
      copy_heads(rows, p.q + token * p.q_token, p.q_head, p.q_heads, &landed[b]);
      copy_heads(rows + p.q_heads * p.head_dim, p.k + token * p.k_token, p.k_head, p.k_heads, &landed[b]);
      if constexpr (kStore) copy_heads(rows + heads * p.head_dim, static_cast<const T*>(s.v) + token * s.v_token, s.v_head, p.k_heads, &landed[b]);
    }
#ifndef JITKERN_QKNORM_ROPE_BULK
    device::ptx::cp_async_commit();
#endif
  };
  const HeadLane<kPairing, kVec, kFull> l(p, thread);
  constexpr int64_t kCacheBytes = kFp8 ? 1 : sizeof(T);
#ifdef JITKERN_QKNORM_ROPE_BULK
  constexpr bool kBulkV = kStore && !kFp8;  // v to the cache by a bulk copy (fp8 rows are quantized by the threads)
  if (thread == 0) {
    for (int b = 0; b < kStages; ++b) mbarrier_init_one(&landed[b]);
    device::ptx::fence_mbarrier_init();
  }
  uint32_t parity = 0;
#else
  constexpr bool kBulkV = false;
#endif
  device::pdl_wait_primary();
  if (!p.early_trigger) device::pdl_trigger_secondary();
#pragma unroll
  for (int j = 0; j + 1 < kStages; ++j) stage(blockIdx.x + int64_t{j} * gridDim.x, ahead[j], j);
  for (int i = thread; i < 2 * p.head_dim; i += kCtaThreads)  // read after the first turn's barrier
    weights[i] = device::cast<float>(i < p.head_dim ? p.q_weight[i] : p.k_weight[i - p.head_dim]) + p.weight_offset;
#ifdef JITKERN_QKNORM_ROPE_BULK
  __syncthreads();  // the weights, and the barriers initialised before any thread waits on them
#endif
  const RowWeights<HeadLane<kPairing, kVec, kFull>, kVec> wq{weights, l}, wk{weights + p.head_dim, l};
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
    const T* const rows = buffer_at(buffer);
#ifdef JITKERN_QKNORM_ROPE_BULK
    mbarrier_wait_parity(&landed[buffer], parity);
    if constexpr (kBulkV) {
      if (thread == 0 && v_row != nullptr && !skipped) bulk_store(v_row, rows + heads * p.head_dim, static_cast<uint32_t>(p.k_heads * p.head_dim * sizeof(T)));
    }
#else
    device::ptx::cp_async_wait_group<kStages - 1>();  // the current token's copies
    __syncthreads();
#endif
    if (!skipped) {
      [[maybe_unused]] device::quant::Divider k_div(1.0f), v_div(1.0f);
      if constexpr (kFp8) k_div = device::quant::Divider(s.k_scale), v_div = device::quant::Divider(s.v_scale);
      T* q = p.q + token * p.q_token;
      T* k = p.k + token * p.k_token;
      int h = group;
      if constexpr (kFull) {  // the weights held a loop, the q heads' addresses stepped
        {
          const HeldWeights<kVec> w{wq.a(0), wq.b(0)};
          const int64_t dst_step = int64_t{groups} * p.q_head;
          const int src_step = groups * p.head_dim;
          T* dst = q + h * p.q_head;
          const T* src = rows + h * p.head_dim;
          for (; h < p.q_heads; h += groups, dst += dst_step, src += src_step) {
            HeadVecs<T, kVec> x;
            x.load(src, l);
            Head::template apply<kFp8, false>(p, l, x, w, r, dst, nullptr, k_div);
          }
        }
        const HeldWeights<kVec> w{wk.a(0), wk.b(0)};
        for (; h < heads; h += groups) {
          HeadVecs<T, kVec> x;
          x.load(rows + h * p.head_dim, l);
          char* row = k_row == nullptr ? nullptr : k_row + kCacheBytes * (h - p.q_heads) * p.head_dim;
          Head::template apply<kFp8, kStore>(p, l, x, w, r, k + (h - p.q_heads) * p.k_head, row, k_div);
        }
      } else {
        for (; h < p.q_heads; h += groups) {
          HeadVecs<T, kVec> x;
          x.load(rows + h * p.head_dim, l);
          Head::template apply<kFp8, false>(p, l, x, wq, r, q + h * p.q_head, nullptr, k_div);
        }
        for (; h < heads; h += groups) {
          HeadVecs<T, kVec> x;
          x.load(rows + h * p.head_dim, l);
          char* row = k_row == nullptr ? nullptr : k_row + kCacheBytes * (h - p.q_heads) * p.head_dim;
          Head::template apply<kFp8, kStore>(p, l, x, wk, r, k + (h - p.q_heads) * p.k_head, row, k_div);
        }
      }
      if constexpr (kStore && !kBulkV) {
        if (v_row != nullptr) {
          for (int i = thread; i < p.k_heads * row_vecs; i += kCtaThreads) {
            AlignedVector<T, kVec> x;
            x.load(rows + (heads * row_vecs + i) * kVec);
            to_cache<kFp8>(v_row, int64_t{i} * kVec, x, v_div);
          }
        }
      }
    }
#ifdef JITKERN_QKNORM_ROPE_BULK
    if constexpr (kBulkV) {
      if (thread == 0) bulk_wait_read();  // the v rows read out of the buffer before it is staged again
    }
#endif
    __syncthreads();  // every thread is done with the buffer the next turn stages into
#pragma unroll
    for (int j = 0; j + 1 < kStages; ++j) ahead[j] = ahead[j + 1];
    buffer = buffer + 1 == kStages ? 0 : buffer + 1;
#ifdef JITKERN_QKNORM_ROPE_BULK
    if (buffer == 0) parity ^= 1;
#endif
  }
#ifdef JITKERN_QKNORM_ROPE_BULK
  if constexpr (kBulkV) {
    if (thread == 0) bulk_wait();  // no bulk copy reads the CTA's shared memory after it is released
  }
#else
  device::ptx::cp_async_wait_all();  // no copy lands after the CTA's shared memory is released
#endif
#endif
}

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only

template <typename T>
struct QkNormRopeOps {
  // q [N, Hq, D] and k [N, Hk, D] (last dimension contiguous; rows and heads may be strided), normalised
  // with q_weight / k_weight [D] and rotated in place. positions [N] or, for mRoPE, [3, N] int32/int64 with
  // mrope_t + mrope_h + mrope_w = R/2 (ignored with positions [N]); cos_sin_cache [max_position, R] fp32 or
  // T, R even in [2, D].
  static void apply(TensorView positions, TensorView q, TensorView k, TensorView q_weight, TensorView k_weight, TensorView cos_sin_cache,
                    double eps, double weight_offset, bool is_neox, int64_t mrope_t, int64_t mrope_h, int64_t mrope_w, bool mrope_interleaved) {
    Setup setup(positions, q, k, q_weight, k_weight, cos_sin_cache, eps, weight_offset, {mrope_t, mrope_h, mrope_w, mrope_interleaved});
    setup.template launch<false, false>(is_neox, Store{}, {});
  }

  // apply, with k (normalised and rotated) and value [N, Hk, D] written to k_buffer[cache_loc[i]] and
  // v_buffer[cache_loc[i]] (caches [slots, Hk, D] or [pages, page_size, Hk, D], any row-compatible shape;
  // T here, float8_e4m3fn or its bytes as uint8 through apply_store_fp8 with k_scale and v_scale: one
  // export per cache type, so that a first call compiles only its own kernels).
  static void apply_store(TensorView positions, TensorView q, TensorView k, TensorView q_weight, TensorView k_weight, TensorView cos_sin_cache,
                          double eps, double weight_offset, bool is_neox, int64_t mrope_t, int64_t mrope_h, int64_t mrope_w, bool mrope_interleaved, TensorView value,
                          TensorView k_buffer, TensorView v_buffer, TensorView cache_loc, double k_scale, double v_scale) {
    Setup setup(positions, q, k, q_weight, k_weight, cos_sin_cache, eps, weight_offset, {mrope_t, mrope_h, mrope_w, mrope_interleaved});
    const StoreArgs a = store_args<false>(setup, value, k_buffer, v_buffer, cache_loc, k_scale, v_scale);
    setup.template launch<false, true>(is_neox, a.s, a.wide);
  }
  static void apply_store_fp8(TensorView positions, TensorView q, TensorView k, TensorView q_weight, TensorView k_weight,
                              TensorView cos_sin_cache, double eps, double weight_offset, bool is_neox, int64_t mrope_t, int64_t mrope_h, int64_t mrope_w,
                              bool mrope_interleaved, TensorView value, TensorView k_buffer, TensorView v_buffer, TensorView cache_loc,
                              double k_scale, double v_scale) {
    Setup setup(positions, q, k, q_weight, k_weight, cos_sin_cache, eps, weight_offset, {mrope_t, mrope_h, mrope_w, mrope_interleaved});
    const StoreArgs a = store_args<true>(setup, value, k_buffer, v_buffer, cache_loc, k_scale, v_scale);
    setup.template launch<true, true>(is_neox, a.s, a.wide);
  }

  // The pieces of the ops (public for the launch schedules of benchmarks/kernels/qknorm_rope_schedules.cuh).
  static constexpr int kWideVec = device::kVec16<T>;

  struct Sections {
    int64_t t, h, w;
    bool interleaved;
  };
  struct Setup;

  // The cache write's verified arguments; wide: they allow 16-byte vectors too.
  struct StoreArgs {
    Store s;
    bool wide;
  };
  template <bool kFp8>
  static StoreArgs store_args(const Setup& setup, TensorView v, TensorView k_cache, TensorView v_cache, TensorView cache_loc, double k_scale,
                              double v_scale) {
    using namespace host;
    using namespace host::kv_cache;
    auto N = SymbolicSize{"num_tokens"}, Hk = SymbolicSize{"num_kv_heads"}, D = SymbolicSize{"head_size"};
    N.set_value(setup.tokens), Hk.set_value(setup.p.k_heads), D.set_value(setup.p.head_dim);
    auto v_token = SymbolicSize{"v_token_stride"}, v_head = SymbolicSize{"v_head_stride"}, loc_stride = SymbolicSize{"cache_loc_stride"};
    auto dev = SymbolicDevice{};
    dev.set_value(setup.device);
    TensorMatcher({N, Hk, D}).with_strides({v_token, v_head, 1}).with_dtype<T>().with_device(device_v<kDLCUDA>, dev).verify(v, "value");
    TensorMatcher({N}).with_strides({loc_stride}).with_dtype<int32_t, int64_t>().with_device(device_v<kDLCUDA>, dev).verify(cache_loc, "cache_loc");
    const bool fp8 = is_type<uint8_t>(k_cache.dtype()) || is_type<fp8_e4m3_t>(k_cache.dtype());
    if (kFp8 && !fp8) Raise(ErrorKind::kType, "k_buffer must be float8_e4m3fn (or its bytes as uint8) for apply_store_fp8, got ", k_cache.dtype());
    if (!kFp8 && !is_type<T>(k_cache.dtype()))
      Raise(ErrorKind::kType, "k_buffer must have the inputs' dtype ", dtype_trait<T>::value, " for apply_store (fp8 caches: apply_store_fp8), got ",
            k_cache.dtype());
    if (!dtype_equal(v_cache.dtype(), k_cache.dtype()))
      Raise(ErrorKind::kType, "v_buffer must have k_buffer's dtype ", k_cache.dtype(), ", got ", v_cache.dtype());
    check_same_shape(k_cache, v_cache, "k_buffer", "v_buffer");
    check_distinct(k_cache, v_cache, "k_buffer", "v_buffer");
    RuntimeCheck(std::isfinite(k_scale) && k_scale > 0 && std::isfinite(v_scale) && v_scale > 0,
                 "k_scale and v_scale must be finite and positive, got ", k_scale, " and ", v_scale);
    RuntimeCheck(kFp8 || (k_scale == 1.0 && v_scale == 1.0), "k_scale and v_scale apply to a float8_e4m3fn cache only; k_buffer is ",
                 k_cache.dtype());
    const int64_t row = int64_t{setup.p.k_heads} * setup.p.head_dim;
    Store s{};
    s.v = v.data_ptr(), s.v_token = stride_of(v_token), s.v_head = stride_of(v_head);
    s.k_cache = cache_layout(k_cache, row, setup.device.device_id, "k_buffer");
    s.v_cache = cache_layout(v_cache, row, setup.device.device_id, "v_buffer");
    s.loc = cache_loc.data_ptr(), s.loc_stride = stride_of(loc_stride), s.loc64 = is_type<int64_t>(cache_loc.dtype());
    s.k_scale = static_cast<float>(k_scale), s.v_scale = static_cast<float>(v_scale);
    const int cb = kFp8 ? 1 : static_cast<int>(sizeof(T));
    const bool cache_aligned = all_multiples({s.k_cache.page_stride, s.k_cache.row_stride, s.v_cache.page_stride, s.v_cache.row_stride}, cb * kWideVec);
    const int vec = cache_aligned ? vector_width(kWideVec, setup.p.rot_half,
                                                 {VecOperand(s.v, sizeof(T)), VecOperand(s.k_cache.base, cb), VecOperand(s.v_cache.base, cb)},
                                                 {s.v_token, s.v_head})
                                  : 1;
    return {s, vec == kWideVec};
  }

  // The verified arguments shared by the ops, as kernel parameters.
  struct Setup {
    Params<T> p{};
    int64_t tokens = 0;
    DLDevice device{};
    bool wide = false;  // 16-byte vectors: every q/k/weight/cos-sin operand allows them

    Setup(TensorView positions, TensorView q, TensorView k, TensorView q_weight, TensorView k_weight, TensorView cos_sin_cache, double eps,
          double weight_offset, const Sections& mrope) {
      using namespace host;
      using host::kv_cache::stride_of;
      auto N = SymbolicSize{"num_tokens"}, Hq = SymbolicSize{"num_q_heads"}, Hk = SymbolicSize{"num_kv_heads"}, D = SymbolicSize{"head_size"};
      auto P = SymbolicSize{"max_position"}, R = SymbolicSize{"rotary_dim"};
      auto pos_stride = SymbolicSize{"positions_stride"}, section_stride = SymbolicSize{"positions_section_stride"};
      auto cs_stride = SymbolicSize{"cos_sin_cache_stride"};
      auto q_token = SymbolicSize{"q_token_stride"}, q_head = SymbolicSize{"q_head_stride"};
      auto k_token = SymbolicSize{"k_token_stride"}, k_head = SymbolicSize{"k_head_stride"};
      auto dev = SymbolicDevice{};
      p.mrope = positions.dim() == 2;
      if (p.mrope) {
        TensorMatcher({3, N}).with_strides({section_stride, pos_stride}).with_dtype<int32_t, int64_t>().with_device(device_v<kDLCUDA>, dev).verify(
            positions, "positions");
      } else {
        TensorMatcher({N}).with_strides({pos_stride}).with_dtype<int32_t, int64_t>().with_device(device_v<kDLCUDA>, dev).verify(positions,
                                                                                                                             "positions");
      }
      TensorMatcher({N, Hq, D}).with_strides({q_token, q_head, 1}).with_dtype<T>().with_device(device_v<kDLCUDA>, dev).verify(q, "q");
      TensorMatcher({N, Hk, D}).with_strides({k_token, k_head, 1}).with_dtype<T>().with_device(device_v<kDLCUDA>, dev).verify(k, "k");
      TensorMatcher({D}).with_strides({1}).with_dtype<T>().with_device(device_v<kDLCUDA>, dev).verify(q_weight, "q_weight");
      TensorMatcher({D}).with_strides({1}).with_dtype<T>().with_device(device_v<kDLCUDA>, dev).verify(k_weight, "k_weight");
      TensorMatcher({P, R}).with_strides({cs_stride, 1}).with_dtype(dtype_v<float, T>).with_device(device_v<kDLCUDA>, dev).verify(cos_sin_cache,
                                                                                                                               "cos_sin_cache");
      const int64_t head_dim = D.unwrap(), rot = R.unwrap();
      RuntimeCheck(head_dim > 0, "head_size (q's last dimension) must be positive");
      RuntimeCheck(rot >= 2 && rot % 2 == 0 && rot <= head_dim, "cos_sin_cache width (the rotary dim) must be even and within [2, head_size ",
                   head_dim, "], got ", rot);
      // A head's pair units and unrotated columns fit a lane group's registers (kItems<1> elements a lane).
      constexpr int64_t kMaxHalf = int64_t{kMaxLanes} * kItems<1>;
      RuntimeCheck(rot / 2 <= kMaxHalf && head_dim - rot <= kMaxHalf, "head_size ", head_dim, " with rotary dim ", rot, " is too large: at most ",
                   2 * kMaxHalf, " rotated and ", kMaxHalf, " unrotated columns");
      check_disjoint(Extents{N.unwrap(), Hq.unwrap(), head_dim}, Extents{stride_of(q_token), stride_of(q_head), 1}, "q");
      check_disjoint(Extents{N.unwrap(), Hk.unwrap(), head_dim}, Extents{stride_of(k_token), stride_of(k_head), 1}, "k");
      check_distinct(q, k, "q", "k");
      const int64_t heads = Hq.unwrap() + 2 * Hk.unwrap();  // q, k and the cache write's v
      RuntimeCheck(N.unwrap() * heads * 32 < (int64_t{1} << 31), "num_tokens * (num_q_heads + 2 num_kv_heads) must be below 2^26, got ",
                   N.unwrap(), " * ", heads);
      if (p.mrope) {
        RuntimeCheck(mrope.t >= 0 && mrope.h >= 0 && mrope.w >= 0 && mrope.t + mrope.h + mrope.w == rot / 2,
                     "mrope_section must be three non-negative frequency counts summing to half the rotary dim ", rot / 2, ", got [", mrope.t,
                     ", ", mrope.h, ", ", mrope.w, "]");
        p.section_stride = stride_of(section_stride);
        p.mrope_t = static_cast<int32_t>(mrope.t), p.mrope_h = static_cast<int32_t>(mrope.h), p.mrope_w = static_cast<int32_t>(mrope.w);
        p.mrope_interleaved = mrope.interleaved;
      }
      tokens = N.unwrap();
      device = dev.unwrap();
      p.positions = positions.data_ptr(), p.positions_stride = stride_of(pos_stride), p.positions64 = is_type<int64_t>(positions.dtype());
      p.cos_sin = cos_sin_cache.data_ptr(), p.cos_sin_stride = stride_of(cs_stride), p.max_position = P.unwrap();
      p.cos_sin_t = !is_type<float>(cos_sin_cache.dtype());
      p.q = static_cast<T*>(q.data_ptr()), p.k = static_cast<T*>(k.data_ptr());
      p.q_token = stride_of(q_token), p.q_head = stride_of(q_head), p.k_token = stride_of(k_token), p.k_head = stride_of(k_head);
      p.q_weight = static_cast<const T*>(q_weight.data_ptr()), p.k_weight = static_cast<const T*>(k_weight.data_ptr());
      p.eps = host::norm::checked_eps(eps), p.inv_dim = 1.0f / static_cast<float>(head_dim);
      RuntimeCheck(std::isfinite(weight_offset), "weight_offset must be finite, got ", weight_offset);
      p.weight_offset = static_cast<float>(weight_offset);
      p.q_heads = static_cast<int32_t>(Hq.unwrap()), p.k_heads = static_cast<int32_t>(Hk.unwrap());
      p.head_dim = static_cast<int32_t>(head_dim), p.rot_half = static_cast<int32_t>(rot / 2);
      const int cs_bytes = p.cos_sin_t ? static_cast<int>(sizeof(T)) : 4;
      wide = head_dim % kWideVec == 0 &&
             vector_width(kWideVec, p.rot_half,
                          {VecOperand(p.q), VecOperand(p.k), VecOperand(p.q_weight), VecOperand(p.k_weight), VecOperand(p.cos_sin, cs_bytes)},
                          {p.q_token, p.q_head, p.k_token, p.k_head, p.cos_sin_stride}) == kWideVec;
    }

    // Whether the operands allow 16-byte vectors (wide_store: the cache write's do too); else one-element
    // vectors, which every head takes (the constructor checked that it fits a lane group's registers).
    template <bool kStore>
    bool wide_vectors(bool wide_store) const {
      return wide && (!kStore || wide_store) && fits<kWideVec>();
    }

    // The launch rule: from kStagedMinTokensStore tokens with the cache write (kStagedMinTokens without),
    // 16-byte vectors and kStagedStages buffers of a token's heads within kStagedMaxBytes, the staged kernel;
    // else one head a lane group. Only the staged kernel of full lanes has its pairing compiled in, so that a
    // module compiles five kernels (the op's first call builds one).
    template <bool kFp8, bool kStore>
    void launch(bool neox, const Store& s, bool wide_store) {
      if (tokens == 0 || p.q_heads + p.k_heads == 0) return;
      if (!wide_vectors<kStore>(wide_store)) return run_heads<kFp8, 1, kStore>(s, neox);
      if (tokens >= (kStore ? kStagedMinTokensStore : kStagedMinTokens) && staged_smem<kStore>(kStagedStages) <= kStagedMaxBytes) {
        return run_staged<kFp8, kWideVec, kStore, kStagedThreads, kStagedStages, kStagedFullMaxRegs>(s, neox);
      }
      run_heads<kFp8, kWideVec, kStore>(s, neox);
    }

    // The device passes of a module built in several (host::in_device_part): one head a lane group, the staged
    // kernels of full lanes, the staged kernel with branches.
    static constexpr int kHeadsPart = 0, kStagedFullPart = 1, kStagedPart = 2;
    static constexpr int kMaxLanes = 32;
    static constexpr int64_t kStagedMaxBytes = 48 * 1024;  // the default limit of dynamic shared memory
    // The staged kernel's CTAs: 64 threads (8 lane groups of a 128-wide bf16 head: q 32 / kv 8 heads take 5
    // turns each) and two buffers (docs/benchmarks/qknorm_rope.md: CTAs of 128, three buffers, lost).
    static constexpr int kStagedThreads = 64, kStagedStages = 2;
    // The kernel of full lanes (HeadLane's kFull) at 96 registers a thread fits 10 CTAs of 64 an SM without the
    // write (7 at its own 138) and does not spill; the branching kernel spills under such a cap. H200, q 32 /
    // kv 8 heads of 128, bf16, without the write, % of the pattern at T = 4096 / 32768: 79.2 / 92.0, the
    // branching kernel at its own 128 registers 64.1 / 85.6.
    static constexpr int kStagedFullMaxRegs = 96;
    // Same shapes, us, the staged kernel / one head a lane group: with the write T = 1024 8.26 / 9.04, 2048
    // 13.40 / 17.72; without T = 1024 8.59 / 7.59, 2048 13.29 / 13.29, 4096 22.13 / 31.73 (fewer tokens than
    // CTAs the SMs fit leave SMs part empty, a token each).
    static constexpr int64_t kStagedMinTokensStore = 1024, kStagedMinTokens = 2048;
    // The staged kernel's grid is host::runtime::balanced_grid's. H200, same shapes, % of the gathered pattern at
    // T = 4096 / 6144 / 8192 / 12288 / 16384 with the write, by tokens a CTA: resident CTAs (3.9-15.5) 95.7 / 91.9 /
    // 92.1 / 92.7 / 92.5, 1.25 tokens (its rule) 95.9 / 95.6 / 96.7 / 97.2 / 97.9, 2 tokens 94.8 / 93.9 / 94.8 / 96.0
    // / 96.5 (docs/benchmarks/qknorm_rope.md).
    // One head a lane group triggers the next launch after its wait at every grid, where the library's rule
    // triggers grids of up to 8 CTAs at their start (1-2 tokens here). H200, back to back in a CUDA graph, us,
    // after the wait / at the start, with the write: T = 1 1.48 / 1.61, 2 1.53 / 1.69, 4-256 level or faster
    // (at 4-128 tokens the start loses 0.2-0.6 us); without it T = 1 1.30 / 1.36. kByRule and kAtStart for the
    // launch schedules of benchmarks/kernels/qknorm_rope_schedules.cuh.
    enum class Trigger { kAfterWait, kAtStart, kByRule };
    // Whether a head's pair units and unrotated vectors fit a group's registers at kVec elements a vector.
    template <int kVec>
    bool fits() const {
      const int64_t held = int64_t{kMaxLanes} * kItems<kVec>;
      return p.rot_half / kVec <= held && (p.head_dim - 2 * p.rot_half) / kVec <= held;
    }
    // The staged kernel's shared memory at `stages` buffers.
    template <bool kStore>
    int64_t staged_smem(int stages) const {
      const int64_t heads = p.q_heads + p.k_heads + (kStore ? p.k_heads : 0);
      return 2 * int64_t{p.head_dim} * 4 + stages * heads * p.head_dim * int64_t{sizeof(T)} + 8 * stages;
    }

    // The kernels' parameters at kVec elements a vector.
    template <int kVec, bool kStore>
    Params<T> params() const {
      Params<T> c = p;
      c.pairs = p.rot_half / kVec, c.tails = (p.head_dim - 2 * p.rot_half) / kVec;
      c.width_log2 = 0;  // the fewest lanes that hold the head, or one lane a vector where that is more
      while ((1 << c.width_log2) < kMaxLanes && (1 << c.width_log2) < host::max(c.pairs, c.tails)) ++c.width_log2;
      c.token_heads = p.q_heads + p.k_heads + (kStore ? p.k_heads : 0);
      c.items = static_cast<int32_t>(tokens * c.token_heads);
      return c;
    }

    // kPairing: the product's kEither; a pairing compiled in for benchmarks/kernels/qknorm_rope_schedules.cuh,
    // as another kTrigger (Trigger).
    template <bool kFp8, int kVec, bool kStore, Pairing kPairing = Pairing::kEither, Trigger kTrigger = Trigger::kAfterWait>
    void run_heads(const Store& s, bool neox) const {
      using namespace host;
      Params<T> c = params<kVec, kStore>();
      c.neox = neox;
      const int64_t ctas = div_ceil(int64_t{c.items} << c.width_log2, int64_t{kThreads});
      c.early_trigger = kTrigger == Trigger::kByRule ? pdl_early_trigger(ctas) : kTrigger == Trigger::kAtStart;
      if constexpr (in_device_part(kHeadsPart))
        LaunchKernel(static_cast<unsigned>(ctas), static_cast<unsigned>(kThreads), device)
            .enable_pdl()(qknorm_rope_kernel<T, kFp8, kPairing, kVec, kStore>, c, s);
    }

    // kCtaThreads: whole warps; the grid by runtime::balanced_grid, each CTA taking tokens blockIdx.x, + gridDim.x, ...
    // kFullLanes: the kernel without branches where every lane holds one pair unit (HeadLane's kFull), its
    // pairing compiled in, at most kFullMaxRegs registers a thread (0: the compiler's choice); the kernel
    // with branches reads its pairing at run time.
    // kGridTimes: the grid, 0 by runtime::balanced_grid, else that many times the CTAs the SMs hold at once.
    template <bool kFp8, int kVec, bool kStore, int kCtaThreads, int kStages, int kFullMaxRegs, bool kFullLanes = true, typename Head = NormRopeHead,
              int kGridTimes = 0>
    void run_staged(const Store& s, bool neox) const {
      static_assert(kVec == kWideVec && kCtaThreads % 32 == 0, "the staged kernel copies 16-byte vectors in whole warps");
      using namespace host;
      Params<T> c = params<kVec, kStore>();
      c.neox = neox;
      const auto launch = [&]<Pairing kPairing, bool kFull>() {
        if constexpr (in_device_part(kFull ? kStagedFullPart : kStagedPart)) {
          constexpr auto kernel =
              qknorm_rope_staged_kernel<T, kFp8, kPairing, kVec, kStore, kCtaThreads, kStages, kFull ? kFullMaxRegs : 0, kFull, Head>;
          const auto bytes = static_cast<std::size_t>(staged_smem<kStore>(kStages));
          const int per_sm = runtime::resident_ctas_per_sm(kernel, kCtaThreads, bytes, device.device_id);
          const int64_t resident = int64_t{runtime::get_sm_count(device.device_id)} * per_sm;
          const int64_t ctas = kGridTimes > 0 ? host::min(tokens, resident * kGridTimes) : runtime::balanced_grid(tokens, resident);
          c.early_trigger = pdl_early_trigger(ctas);
          LaunchKernel(static_cast<unsigned>(ctas), static_cast<unsigned>(kCtaThreads), device, bytes).enable_pdl()(kernel, c, s, tokens);
        }
      };
      if constexpr (kFullLanes) {
        if (c.pairs == 1 << c.width_log2 && c.tails == 0)
          return neox ? launch.template operator()<Pairing::kNeox, true>() : launch.template operator()<Pairing::kGptJ, true>();
      }
      launch.template operator()<Pairing::kEither, false>();
    }
  };
};
#endif  // __CUDACC_RTC__

}  // namespace jitkern_qknorm_rope
