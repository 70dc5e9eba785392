// Rotary position embedding and the KV-cache write, for fp16/bf16/fp32 q/k/v and a cos/sin cache in fp32
// (or the inputs' dtype, as the reference's rotary_embedding takes it):
//   RopeOps<T>::apply        q and k rotated (NeoX half-split or GPT-J interleaved, partial rotary), in
//                            place or into outputs;
//   RopeOps<T>::apply_store  the same, with the rotated k and v written to k_cache[loc], v_cache[loc]
//                            (flat or paged, T or fp8 e4m3 with a per-tensor scale) in the same kernel.
// The plain KV write and the MLA concatenations are the KV row copies (csrc/kv_rows.cuh); the cache
// layouts both write: <jitkern/impl/kv_cache.cuh>.
//
// The cos/sin cache is [max_position, R]: R/2 cosines then R/2 sines; columns [R, D) are not rotated.
// A token whose position is outside [0, max_position) is skipped entirely (nothing of it is written);
// a cache location outside the cache's slots skips that token's cache write only.
#pragma once

#include <jitkern/impl/kv_cache.cuh>
#include <jitkern/impl/quant.cuh>
#include <jitkern/optional.h>
#include <jitkern/policy.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/type.cuh>
#include <jitkern/utils.cuh>
#include <jitkern/utils.h>
#include <jitkern/vec.cuh>

#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>

namespace jitkern_rope {

using device::AlignedVector;
using device::kv_cache::CacheLayout;
using device::kv_cache::index_address;
using device::kv_cache::load_index;
using device::kv_cache::load_index_at;
#ifndef __CUDACC_RTC__
using jitkern::Optional;
using jitkern::TensorView;
using namespace host::kv_cache;
#endif

// rope_kernel (decode; prefill with narrow vectors, a launch shape given, or rows too large for
// rope_staged_kernel): a token's heads go to `groups` groups of threads (units * groups = kRopeThreads
// threads) in each of `splits` CTAs: one CTA per token with many tokens, its threads taking the heads in
// turn; with few tokens (at most one per SM) as many CTAs as the heads fill; with the cache write, one
// more CTA per token copies its v row. Measured on H100 (docs/benchmarks/rope.md, launch shapes; q 32 / kv 8
// heads, d 128, bf16, fused cache write): T = 32768, 64 threads per CTA 315.7 us against 339.6 at 128 and
// 512.0 at 320; T = 1, 1.67 us in 5 CTAs of 64 against 1.76 in one CTA of 320.
constexpr int kRopeThreads = host::kRowKernels.rope_threads;
// A launch that does not trigger the next one early (host::pdl_early_trigger) spreads its heads out: the
// groups per CTA are halved while it has fewer rotating CTAs than kRopeMinCtas and halving adds CTAs,
// keeping at least kRopeMinCtaThreads threads a CTA and at most two rounds of loads in the v CTA. H100,
// q 32 / kv 8 heads, d 128, bf16, fused write, us: T = 2 / 4 in CTAs of 16 threads (two v rounds) 1.37 /
// 1.28 against 1.42 / 1.40 in CTAs of 64, T = 8 in CTAs of 32 1.34-1.35 against 1.40; CTAs of 8 threads
// (four v rounds) 1.81-2.03; T = 1 keeps its 5 CTAs of 64, which trigger early: 1.30 against 1.41 in 10
// CTAs of 32.
constexpr int kRopeMinCtas = 64;
constexpr int kRopeMinCtaThreads = 16;
// Vectors a thread of the v CTA (copy_v_row) has in flight: a CTA of 32 threads (one token) loads a
// 128-vector row before it stores any (H100, T = 1: 1.55-1.59 us with two, 1.42-1.45 with four).
constexpr int kVRowPerThread = 4;
constexpr int kRopeMaxThreads = host::kRowKernels.rope_max_threads;  // 128 registers a thread: at 1024 (64) the wide kernels spilled
constexpr int kRopeUnroll = 2;  // heads whose loads a thread issues before it stores any
// rope_staged_kernel (more tokens than SMs, 16-byte vectors, no launch shape given): CTAs of
// kStagedThreads, at most kStagedMaxBytes of a token's heads in shared memory (the default limit; larger
// tokens take rope_kernel). H100, same shapes, fused write, T = 4096 / 8192 / 32768: 128 threads 40.0-40.2
// / 78.4 / 305.3-306.1 us, 64 40.3 / 79.4-79.7 / 308.1-308.8, 256 45.3-45.7 / 87.2-87.5 / 338.2-338.5;
// rope_kernel 44.3-44.4 / 83.2 / 319.5 (its v copied by the rotating threads then).
constexpr int kStagedThreads = host::kRowKernels.rope_staged_threads;
constexpr int64_t kStagedMaxBytes = 48 * 1024;


template <typename T>
struct RopeParams {
  const void* positions;
  int64_t positions_stride;
  const void* cos_sin;  // fp32, or T (cos_sin_t)
  int64_t cos_sin_stride;
  int64_t max_position;
  const T* q;
  T* q_out;
  const T* k;
  T* k_out;
  int64_t q_token, q_head, qo_token, qo_head, k_token, k_head, ko_token, ko_head;  // elements
  int32_t q_heads, k_heads, head_dim, rot_half;
  int32_t units;   // pair units per head: rot_half / kVec
  int32_t groups;  // head groups per CTA: a CTA is units * groups threads
  int32_t splits;  // CTAs per token that rotate heads (rope_kernel: gridDim.y, less the v CTA if any)
  bool positions64;
  bool cos_sin_t;
  bool q_tail, k_tail;  // out of place: copy the unrotated columns [R, D) to q_out / k_out
  bool early_trigger;
};

// The fused KV write (apply_store).
struct KvStoreParams {
  const void* v;
  int64_t v_token, v_head;  // elements
  CacheLayout k_cache, v_cache;
  const void* loc;
  int64_t loc_stride;
  float k_scale, v_scale;  // fp8 caches: q = saturate(rne(x / scale))
  bool loc64;
};

// Writes kVec values at `at` elements into a cache row: as T, or as fp8 e4m3 bytes divided by the
// scale (include/jitkern/impl/quant.cuh rounds).
template <bool kFp8, typename T, int kVec>
__device__ __forceinline__ void store_cache_values(char* row, int64_t at, const AlignedVector<T, kVec>& x, const device::quant::Divider& d) {
  if constexpr (kFp8) {
    device::quant::store_quantized<fp8_e4m3_t>(reinterpret_cast<uint8_t*>(row) + at, x, d);
  } else {
    x.store(reinterpret_cast<T*>(row) + at);
  }
}

template <int kVec>
__device__ __forceinline__ void load_floats(float (&dst)[kVec], const float* src) {
  constexpr int kW = kVec < 4 ? kVec : 4;  // 16-byte loads at most
#pragma unroll
  for (int i = 0; i < kVec; i += kW) {
    AlignedVector<float, kW> v;
    v.load(src + i);
#pragma unroll
    for (int j = 0; j < kW; ++j) dst[i + j] = v[j];
  }
}

// kVec cos or sin values of a cache row stored as T.
template <typename T, int kVec>
__device__ __forceinline__ void load_converted(float (&dst)[kVec], const T* src) {
  AlignedVector<T, kVec> v;
  v.load(src);
#pragma unroll
  for (int j = 0; j < kVec; ++j) dst[j] = device::cast<float>(v[j]);
}

// Two 2-byte elements of one 32-bit word as floats, and two floats as such a word (bf16: a shift and a
// mask; fp16: the half2 conversions). The words pass through the raw (trivially copyable) types.
template <typename T>
__device__ __forceinline__ float2 unpack_word(uint32_t w) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  } else {
    static_assert(std::is_same_v<T, fp16_t>, "unpack_word: bf16 or fp16");
    __half2_raw raw;
    __builtin_memcpy(&raw, &w, 4);
    return __half22float2(__half2(raw));
  }
}
template <typename T>
__device__ __forceinline__ uint32_t pack_word(float lo, float hi) {
  uint32_t w;
  if constexpr (std::is_same_v<T, bf16_t>) {
    const __nv_bfloat162_raw raw = __floats2bfloat162_rn(lo, hi);
    __builtin_memcpy(&w, &raw, 4);
  } else {
    static_assert(std::is_same_v<T, fp16_t>, "pack_word: bf16 or fp16");
    const __half2_raw raw = __floats2half2_rn(lo, hi);
    __builtin_memcpy(&w, &raw, 4);
  }
  return w;
}

// (x, y) -> (x cos - y sin, y cos + x sin). With an fp32 cos/sin cache in fp32; with a 16-bit cache in T
// (`in_t`, the reference's rotary_embedding form) in T's arithmetic, as the reference and its torch
// reference round: each product rounded to T, then the sum (an fp32 product of two 16-bit values is
// exact, so rounding it to T is T's multiply). NeoX (and any style at kVec = 1): element j of a
// pairs with element j of b, frequency j. GPT-J: a and b hold kVec consecutive pairs (2m, 2m + 1),
// frequencies 0 .. kVec/2 - 1 in a and kVec/2 .. kVec - 1 in b. 2-byte elements are handled two to a
// 32-bit word: element by element, nvcc split every word into halves and joined them again (56 more
// instructions in the bf16 decode kernel, most of them after the cos/sin loads return).
template <bool kInterleaved, typename T, int kVec>
__device__ __forceinline__ void rotate(AlignedVector<T, kVec>& a, AlignedVector<T, kVec>& b, const float (&c)[kVec], const float (&s)[kVec],
                                       bool in_t) {
  const auto turn = [in_t](float& x, float& y, float cf, float sf) {
    const float fx = x, fy = y;
    if (in_t) {  // (a product passing through T cannot be contracted into an FMA with the sum)
      const auto product = [](float u, float v) { return device::cast<float>(device::cast<T>(u * v)); };
      x = product(fx, cf) - product(fy, sf);
      y = product(fy, cf) + product(fx, sf);
    } else {
      x = fmaf(fx, cf, -fy * sf);
      y = fmaf(fy, cf, fx * sf);
    }
  };
  if constexpr (sizeof(T) == 2 && kVec >= 2) {
    constexpr int kWords = kVec / 2;
    uint32_t wa[kWords], wb[kWords];
    __builtin_memcpy(wa, a.data, sizeof wa);
    __builtin_memcpy(wb, b.data, sizeof wb);
#pragma unroll
    for (int m = 0; m < kWords; ++m) {
      float2 x = unpack_word<T>(wa[m]), y = unpack_word<T>(wb[m]);
      if constexpr (kInterleaved) {
        turn(x.x, x.y, c[m], s[m]);
        turn(y.x, y.y, c[kWords + m], s[kWords + m]);
      } else {
        turn(x.x, y.x, c[2 * m], s[2 * m]);
        turn(x.y, y.y, c[2 * m + 1], s[2 * m + 1]);
      }
      wa[m] = pack_word<T>(x.x, x.y);
      wb[m] = pack_word<T>(y.x, y.y);
    }
    __builtin_memcpy(a.data, wa, sizeof wa);
    __builtin_memcpy(b.data, wb, sizeof wb);
  } else {
    const auto turn_t = [&](T& x, T& y, float cf, float sf) {
      float fx = device::cast<float>(x), fy = device::cast<float>(y);
      turn(fx, fy, cf, sf);
      x = device::cast<T>(fx);
      y = device::cast<T>(fy);
    };
    if constexpr (kInterleaved) {
#pragma unroll
      for (int m = 0; m < kVec / 2; ++m) {
        turn_t(a[2 * m], a[2 * m + 1], c[m], s[m]);
        turn_t(b[2 * m], b[2 * m + 1], c[kVec / 2 + m], s[kVec / 2 + m]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) turn_t(a[j], b[j], c[j], s[j]);
    }
  }
}

// The vector at global address src where `pred` holds. Vectors of whole 32-bit words are loaded as
// words, zeros where `pred` fails: a conditional load of 2-byte elements merges them into the registers
// one at a time (66 more PRMT instructions in the bf16 decode kernel, waiting for the loads).
template <typename T, int kVec>
__device__ __forceinline__ void load_if(AlignedVector<T, kVec>& v, const T* src, bool pred) {
  if constexpr (sizeof(T) * kVec % 4 == 0) {
    AlignedVector<uint32_t, sizeof(T) * kVec / 4> words;
    words.fill(0);
    if (pred) {
      __builtin_assume(__isGlobal(src));  // else nvcc loads through generic addresses here
      words.load(reinterpret_cast<const uint32_t*>(src));
    }
    __builtin_memcpy(v.data, words.data, sizeof words);
  } else if (pred) {
    __builtin_assume(__isGlobal(src));
    v.load(src);
  }
}

// A token's k and v cache rows (null without the write or where its location is outside the cache) and the
// dividers of an fp8 cache.
struct TokenRows {
  char* k_row;
  char* v_row;
  device::quant::Divider k_div, v_div;
};
template <bool kFp8, bool kStore>
__device__ __forceinline__ TokenRows token_rows(const KvStoreParams& s, int64_t slot) {
  TokenRows r{nullptr, nullptr, device::quant::Divider(1.0f), device::quant::Divider(1.0f)};
  if constexpr (kStore) {
    if (s.k_cache.holds(slot)) r.k_row = s.k_cache.row(slot), r.v_row = s.v_cache.row(slot);
    if constexpr (kFp8) r.k_div = device::quant::Divider(s.k_scale), r.v_div = device::quant::Divider(s.v_scale);
  }
  return r;
}

// Where `unit`'s cos values are in the cache's row 0 (its sin values follow R/2 elements on), and the
// bytes from one row to the next.
struct CosSinAt {
  const char* unit;
  int64_t row_bytes;
};
template <typename T, int kVec>
__device__ __forceinline__ CosSinAt cos_sin_at(const RopeParams<T>& p, int unit) {
  const int64_t elem = p.cos_sin_t ? int64_t{sizeof(T)} : int64_t{sizeof(float)};
  return {static_cast<const char*>(p.cos_sin) + unit * kVec * elem, p.cos_sin_stride * elem};
}

// The cos and sin of a unit's kVec frequencies at `position`, as floats.
template <typename T, int kVec>
__device__ __forceinline__ void load_cos_sin(float (&c)[kVec], float (&sn)[kVec], const RopeParams<T>& p, const CosSinAt& at, int64_t position) {
  const char* row = at.unit + position * at.row_bytes;
  if (p.cos_sin_t) {
    load_converted(c, reinterpret_cast<const T*>(row));
    load_converted(sn, reinterpret_cast<const T*>(row) + p.rot_half);
  } else {
    load_floats(c, reinterpret_cast<const float*>(row));
    load_floats(sn, reinterpret_cast<const float*>(row) + p.rot_half);
  }
}

// How many columns after a thread's vector a its partner b starts: NeoX pairs column j with j + R/2, GPT-J
// takes kVec consecutive (2m, 2m + 1) pairs in each of two adjacent vectors.
template <bool kNeox, int kVec, typename T>
__device__ __forceinline__ int pair_offset(const RopeParams<T>& p) {
  return kNeox ? p.rot_half : kVec;
}

// Head h's rotated vectors (a at column col0, b `pair` columns on) to its output row and, for a k head,
// to the cache row (if any). Its addresses are worked out here, not kept from the loads: held in
// registers across the loads they cost the many-token launches occupancy.
template <bool kFp8, typename T, int kVec>
__device__ __forceinline__ void store_rotated(const RopeParams<T>& p, T* q_out, T* k_out, char* k_row, const device::quant::Divider& k_div,
                                              int h, int col0, int pair, const AlignedVector<T, kVec>& a, const AlignedVector<T, kVec>& b) {
  const bool is_q = h < p.q_heads;
  T* dst = (is_q ? q_out + h * p.qo_head : k_out + (h - p.q_heads) * p.ko_head) + col0;
  a.store(dst);
  b.store(dst + pair);
  if (!is_q && k_row != nullptr) {
    const int64_t at = int64_t{h - p.q_heads} * p.head_dim + col0;
    store_cache_values<kFp8>(k_row, at, a, k_div);
    store_cache_values<kFp8>(k_row, at + pair, b, k_div);
  }
}

// The unrotated columns [R, D) where they are written: q's to q_out and k's to k_out (out of place), k's
// to the cache row (if any); items first, first + step, ...; `head_row(is_q, h)` is where q or k head h
// is read from.
template <bool kFp8, typename T, int kVec, typename HeadRow>
__device__ __forceinline__ void copy_tails(const RopeParams<T>& p, T* q_out, T* k_out, char* k_row, const device::quant::Divider& k_div,
                                           int first, int step, HeadRow head_row) {
  const int tail_vecs = (p.head_dim - 2 * p.rot_half) / kVec;
  if (tail_vecs <= 0) return;
  const int q_items = p.q_tail ? p.q_heads * tail_vecs : 0;
  const int k_items = p.k_tail || k_row != nullptr ? p.k_heads * tail_vecs : 0;
  for (int i = first; i < q_items + k_items; i += step) {
    const bool is_q = i < q_items;
    const int j = is_q ? i : i - q_items, h = j / tail_vecs, col = 2 * p.rot_half + (j - h * tail_vecs) * kVec;
    AlignedVector<T, kVec> x;
    x.load(head_row(is_q, h) + col);
    if (is_q) {
      x.store(q_out + h * p.qo_head + col);
    } else {
      if (p.k_tail) x.store(k_out + h * p.ko_head + col);
      if (k_row != nullptr) store_cache_values<kFp8>(k_row, int64_t{h} * p.head_dim + col, x, k_div);
    }
  }
}

// A token's v CTA (rope_kernel with the cache write): its v row to the cache, loaded with the position and
// location, so that the CTAs rotating its heads do not wait for v. Waits for the kernel before itself.
template <bool kFp8, typename T, int kVec>
__device__ __forceinline__ void copy_v_row(const RopeParams<T>& p, const KvStoreParams& s, int64_t token) {
  constexpr int kPerThread = kVRowPerThread;
  // Vector c of head h is kept as (h, c) and advanced by the step: a division per vector (h = i / row_vecs)
  // put ~40 instructions before each of its loads.
  const unsigned row_vecs = static_cast<unsigned>(p.head_dim / kVec), heads = static_cast<unsigned>(p.k_heads);
  const unsigned step = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
  const unsigned dh = step / row_vecs, dc = step - dh * row_vecs;
  unsigned h = tid / row_vecs, c = tid - h * row_vecs;
  const T* v = static_cast<const T*>(s.v) + token * s.v_token;
  const T* src[kPerThread];
  int at[kPerThread];  // elements into the cache row (fewer than 2^31: the host checks)
  const auto next_round = [&] {  // at -1 past the row (src then v: a null src made nvcc load through generic addresses)
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      src[u] = v, at[u] = -1;
      if (h < heads) src[u] = v + h * s.v_head + c * kVec, at[u] = static_cast<int>(h * p.head_dim + c * kVec);
      c += dc, h += dh;
      if (c >= row_vecs) c -= row_vecs, ++h;
    }
  };
  next_round();
  const void* position_at = index_address(p.positions, p.positions64, token * p.positions_stride);
  const void* slot_at = index_address(s.loc, s.loc64, token * s.loc_stride);
  if constexpr (kVec > 1) {  // see rope_kernel
#pragma unroll
    for (int u = 0; u < kPerThread; ++u)
      if (at[u] >= 0) device::prefetch_before_wait(src[u]);
    device::prefetch_before_wait(position_at);
    device::prefetch_before_wait(slot_at);
  }
  device::pdl_wait_primary();
  if (!p.early_trigger) device::pdl_trigger_secondary();
  const int64_t position = load_index_at(position_at, p.positions64);
  const int64_t slot = load_index_at(slot_at, s.loc64);
  while (at[0] >= 0) {
    AlignedVector<T, kVec> x[kPerThread];
#pragma unroll
    for (int u = 0; u < kPerThread; ++u)
      if (at[u] >= 0) x[u].load(src[u]);
    if (position < 0 || position >= p.max_position || !s.v_cache.holds(slot)) return;
    char* row = s.v_cache.row(slot);
    const device::quant::Divider div(kFp8 ? s.v_scale : 1.0f);
#pragma unroll
    for (int u = 0; u < kPerThread; ++u)
      if (at[u] >= 0) store_cache_values<kFp8>(row, at[u], x[u], div);
    next_round();
  }
}

// p.splits CTAs per token (blockIdx.x) rotate its heads, in CTAs of p.units x p.groups threads. Thread
// (group g = threadIdx.y of all those CTAs, unit u = threadIdx.x) rotates unit u (NeoX: columns [u kVec,
// +kVec) with [R/2 + u kVec, +kVec); GPT-J: columns [2 u kVec, +2 kVec)) of heads g, g + groups, ... over
// the q heads then the k heads, with the token's cos/sin of its unit loaded once. kStore: the rotated k
// also goes to the cache row of its location, and one more CTA per token (blockIdx.y == p.splits) copies
// its v row (copy_v_row), so that the rotating CTAs never wait for v. The unrotated columns are copied by
// all threads in turn. With wide vectors the addresses of a thread's first loads are worked out before
// the PDL wait, so that they overlap the kernel before.
template <typename T, bool kFp8, bool kNeox, int kVec, bool kStore>
__global__ void __launch_bounds__(kRopeMaxThreads) rope_kernel(const __grid_constant__ RopeParams<T> p, const __grid_constant__ KvStoreParams s) {
#ifdef __CUDACC__
  using Vec = AlignedVector<T, kVec>;
  if (p.early_trigger) device::pdl_trigger_secondary();
  const int64_t token = blockIdx.x;
  if constexpr (kStore) {
    if (static_cast<int>(blockIdx.y) == p.splits) return copy_v_row<kFp8, T, kVec>(p, s, token);
  }
  const int unit = static_cast<int>(threadIdx.x), group = static_cast<int>(threadIdx.y);
  const int col0 = kNeox ? unit * kVec : unit * 2 * kVec;
  const int pair = pair_offset<kNeox, kVec>(p);
  const T* q = p.q + token * p.q_token;
  T* q_out = p.q_out + token * p.qo_token;
  const T* k = p.k + token * p.k_token;
  T* k_out = p.k_out + token * p.ko_token;
  const int heads = p.q_heads + p.k_heads, threads = static_cast<int>(blockDim.x * blockDim.y);
  const int first_head = static_cast<int>(blockIdx.y) * p.groups + group, head_step = kRopeUnroll * p.groups * p.splits;
  const int first_item = static_cast<int>(blockIdx.y) * threads + group * p.units + unit, item_step = threads * p.splits;
  // The unrolled heads h0 + i * (head_step / kRopeUnroll): where each is read (valid: it is a head).
  const T* src[kRopeUnroll];
  bool valid[kRopeUnroll];
  const auto heads_from = [&](int h0) {
#pragma unroll
    for (int i = 0; i < kRopeUnroll; ++i) {
      const int h = h0 + i * (head_step / kRopeUnroll);
      valid[i] = h < heads;
      src[i] = (h < p.q_heads ? q + h * p.q_head : k + (h - p.q_heads) * p.k_head) + col0;
    }
  };
  heads_from(first_head);
  const void* position_at = index_address(p.positions, p.positions64, token * p.positions_stride);
  [[maybe_unused]] const void* slot_at = kStore ? index_address(s.loc, s.loc64, token * s.loc_stride) : nullptr;
  const CosSinAt cs = cos_sin_at<T, kVec>(p, unit);
  // Not with narrow vectors: there the prefetches cost more than they save (H200, 64 tokens: 4.65 us with
  // them, 3.91 without).
  if constexpr (kVec > 1) {
#pragma unroll
    for (int i = 0; i < kRopeUnroll; ++i)
      if (valid[i]) device::prefetch_before_wait(src[i]);
    device::prefetch_before_wait(position_at);
    if constexpr (kStore) device::prefetch_before_wait(slot_at);
  }
  device::pdl_wait_primary();
  if (!p.early_trigger) device::pdl_trigger_secondary();
  // ptxas issues the location and head loads after the position's check, beside the cos/sin loads, which
  // wait for the position anyway: a decode step waits for two round trips in series (a clamped cos/sin
  // read instead of the early return keeps the loads together and measured slower, docs/benchmarks/rope.md);
  // the cos/sin loads issue before the cache rows are worked out.
  const int64_t position = load_index_at(position_at, p.positions64);
  [[maybe_unused]] int64_t slot = -1;
  if constexpr (kStore) slot = load_index_at(slot_at, s.loc64);
  Vec a[kRopeUnroll], b[kRopeUnroll];
  const auto load_heads = [&] {
#pragma unroll
    for (int i = 0; i < kRopeUnroll; ++i) load_if(a[i], src[i], valid[i]), load_if(b[i], src[i] + pair, valid[i]);
  };
  load_heads();
  if (position < 0 || position >= p.max_position) return;
  float c[kVec], sn[kVec];
  load_cos_sin(c, sn, p, cs, position);
  [[maybe_unused]] const auto [k_row, v_row, k_div, v_div] = token_rows<kFp8, kStore>(s, slot);
  copy_tails<kFp8, T, kVec>(p, q_out, k_out, k_row, k_div, first_item, item_step,
                            [&](bool is_q, int h) { return is_q ? q + h * p.q_head : k + h * p.k_head; });

  const auto rotate_heads = [&](int h0) {
#pragma unroll
    for (int i = 0; i < kRopeUnroll; ++i) {
      if (!valid[i]) continue;
      rotate<!kNeox && (kVec > 1)>(a[i], b[i], c, sn, p.cos_sin_t);
      store_rotated<kFp8>(p, q_out, k_out, k_row, k_div, h0 + i * (head_step / kRopeUnroll), col0, pair, a[i], b[i]);
    }
  };
  // Wide vectors into a T cache (or none) rotate their first heads outside the loop, so that a decode step
  // (one round) runs straight-line code to its stores (H100, T = 32: 1.41 us against 1.52 in the loop).
  // Narrow vectors keep the one loop (H100, 4096 tokens: 59.9 us, with the first round apart 64.9), and so
  // do fp8 caches: a second copy of the quantizing stores made the kernel spill.
  if constexpr (kVec > 1 && !kFp8) {
    rotate_heads(first_head);
    for (int h0 = first_head + head_step; h0 < heads; h0 += head_step) heads_from(h0), load_heads(), rotate_heads(h0);
  } else {
    for (int h0 = first_head; h0 < heads; h0 += head_step) {
      if (h0 != first_head) heads_from(h0), load_heads();
      rotate_heads(h0);
    }
  }
#endif
}

// With more tokens than SMs and 16-byte vectors: one CTA a token that first copies the token's q, k
// (and v) heads into shared memory with cp.async, so that all its loads are in flight at once without
// holding registers, then rotates them from there. Rows in shared memory: q heads, k heads, v heads,
// head_dim elements each; the unrotated columns of q are copied only out of place, those of k out of
// place or with the cache write.
template <typename T, bool kFp8, bool kNeox, int kVec, bool kStore>
__global__ void __launch_bounds__(kStagedThreads)
    rope_staged_kernel(const __grid_constant__ RopeParams<T> p, const __grid_constant__ KvStoreParams s) {
#ifdef __CUDACC__
  using Vec = AlignedVector<T, kVec>;
  extern __shared__ int4 staged[];
  T* const rows = reinterpret_cast<T*>(staged);
  if (p.early_trigger) device::pdl_trigger_secondary();
  const int64_t token = blockIdx.x;
  const int heads = p.q_heads + p.k_heads, v_heads = kStore ? p.k_heads : 0;
  const int row_vecs = p.head_dim / kVec, rot_vecs = 2 * p.rot_half / kVec;
  const int q_vecs = p.q_tail ? row_vecs : rot_vecs, k_vecs = p.k_tail || kStore ? row_vecs : rot_vecs;
  const T* q = p.q + token * p.q_token;
  const T* k = p.k + token * p.k_token;
  [[maybe_unused]] const T* v = kStore ? static_cast<const T*>(s.v) + token * s.v_token : nullptr;
  device::pdl_wait_primary();
  if (!p.early_trigger) device::pdl_trigger_secondary();
  const int64_t position = load_index(p.positions, p.positions64, token * p.positions_stride);
  [[maybe_unused]] int64_t slot = -1;
  if constexpr (kStore) slot = load_index(s.loc, s.loc64, token * s.loc_stride);
  for (int i = static_cast<int>(threadIdx.x); i < (heads + v_heads) * row_vecs; i += static_cast<int>(blockDim.x)) {
    const int h = i / row_vecs, col = (i - h * row_vecs) * kVec;
    const T* src;
    if (h < p.q_heads) {
      if (col >= q_vecs * kVec) continue;
      src = q + h * p.q_head;
    } else if (h < heads) {
      if (col >= k_vecs * kVec) continue;
      src = k + (h - p.q_heads) * p.k_head;
    } else {
      src = v + (h - heads) * s.v_head;
    }
    device::ptx::cp_async_16(rows + h * p.head_dim + col, src + col);
  }
  if (position < 0 || position >= p.max_position) {
    device::ptx::cp_async_wait_all();  // the copies land before the CTA's shared memory is released
    return;
  }
  const int unit = static_cast<int>(threadIdx.x) % p.units, group = static_cast<int>(threadIdx.x) / p.units;
  const int groups = static_cast<int>(blockDim.x) / p.units;
  const int col0 = kNeox ? unit * kVec : unit * 2 * kVec;
  const int pair = pair_offset<kNeox, kVec>(p);
  float c[kVec], sn[kVec];
  load_cos_sin(c, sn, p, cos_sin_at<T, kVec>(p, unit), position);
  [[maybe_unused]] const auto [k_row, v_row, k_div, v_div] = token_rows<kFp8, kStore>(s, slot);
  device::ptx::cp_async_wait_all();
  __syncthreads();

  T* q_out = p.q_out + token * p.qo_token;
  T* k_out = p.k_out + token * p.ko_token;
  for (int h = group; h < heads; h += groups) {
    Vec a, b;
    a.load(rows + h * p.head_dim + col0);
    b.load(rows + h * p.head_dim + col0 + pair);
    rotate<!kNeox && (kVec > 1)>(a, b, c, sn, p.cos_sin_t);
    store_rotated<kFp8>(p, q_out, k_out, k_row, k_div, h, col0, pair, a, b);
  }
  // v, and the unrotated columns where they are written (out of place, or k to the cache).
  if constexpr (kStore) {
    if (v_row != nullptr) {
      for (int i = static_cast<int>(threadIdx.x); i < v_heads * row_vecs; i += static_cast<int>(blockDim.x)) {
        Vec x;
        x.load(rows + (heads * row_vecs + i) * kVec);
        store_cache_values<kFp8>(v_row, int64_t{i} * kVec, x, v_div);
      }
    }
  }
  copy_tails<kFp8, T, kVec>(p, q_out, k_out, k_row, k_div, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x),
                            [&](bool is_q, int h) -> const T* { return rows + (is_q ? h : p.q_heads + h) * p.head_dim; });
#endif
}

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
// A q/k/v argument: [N, H, D] or [N, H * D], the last dimension contiguous.
struct HeadsArg {
  void* ptr = nullptr;
  int64_t token_stride = 0, head_stride = 0;
};

struct HeadsNames {
  const char *tensor, *token_stride, *head_stride, *width;
};


template <typename T>
HeadsArg heads_arg(TensorView t, host::SymbolicSize& N, host::SymbolicSize& H, int64_t D, host::SymbolicDevice& device,
                   const HeadsNames& names) {
  using namespace host;
  auto token = SymbolicSize{names.token_stride};
  if (t.dim() == 2) {
    auto W = SymbolicSize{names.width};
    TensorMatcher({N, W}).with_strides({token, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(t, names.tensor);
    RuntimeCheck(W.unwrap() % D == 0, names.tensor, " width ", W.unwrap(), " is not a multiple of head_size ", D);
    const int64_t heads = W.unwrap() / D;
    RuntimeCheck(!H.has_value() || H.unwrap() == heads, names.tensor, " holds ", heads, " heads of head_size ", D, " but ", H.get_name(), " is ",
                 H.has_value() ? H.unwrap() : 0);
    H.set_value(heads);
    return {t.data_ptr(), stride_of(token), D};
  }
  auto head = SymbolicSize{names.head_stride};
  TensorMatcher({N, H, D}).with_strides({token, head, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(t, names.tensor);
  return {t.data_ptr(), stride_of(token), stride_of(head)};
}

inline bool same_view(const HeadsArg& a, const HeadsArg& b) {
  return a.ptr == b.ptr && a.token_stride == b.token_stride && a.head_stride == b.head_stride;
}


// rope_kernel's launch for `tokens` tokens (few: at most one a SM) of `heads` q and k heads, each
// `units` threads: thread groups per CTA and rotating CTAs per token (the v CTA, with the store, on top);
// v_vecs: vectors of a token's v row; hints 0: automatic (see kRopeMinCtas).
struct RopeLaunch {
  int64_t groups, splits;
};
inline RopeLaunch rope_launch(int64_t units, int64_t heads, bool store, int64_t v_vecs, int64_t tokens, bool few, int64_t groups_hint,
                              int64_t splits_hint) {
  const int64_t wanted = groups_hint > 0 ? groups_hint : host::max<int64_t>(1, kRopeThreads / units);
  int64_t groups = host::max<int64_t>(1, host::min<int64_t>(host::min(heads, wanted), kRopeMaxThreads / units));
  const auto splits_for = [&](int64_t g) {  // at most 65534 (gridDim.y): room for the v CTA
    return host::min<int64_t>(host::min<int64_t>(host::div_ceil(heads, g), splits_hint > 0 ? splits_hint : few ? heads : 1), 65534);
  };
  if (groups_hint <= 0 && !host::pdl_early_trigger(tokens * (splits_for(groups) + (store ? 1 : 0)))) {
    const int64_t v_threads = store ? host::div_ceil(v_vecs, 2 * kVRowPerThread) : 0;  // that copy the v row in two rounds
    const int64_t fewest = host::min(groups, host::div_ceil(host::max<int64_t>(kRopeMinCtaThreads, v_threads), units));
    while (groups > fewest && tokens * splits_for(groups) < kRopeMinCtas) {
      const int64_t half = host::max(fewest, groups / 2);
      if (splits_for(half) == splits_for(groups)) break;  // capped (a hint, one CTA a token, gridDim.y)
      groups = half;
    }
  }
  return {groups, splits_for(groups)};
}

template <typename T>
struct RopeOps {
  // q [N, Hq, D] or [N, Hq * D] (and k, [N, Hk, ...], optional) rotated into q_out and k_out, which may
  // be q and k (in place). positions [N] int32/int64; cos_sin_cache [max_position, R] fp32 or T.
  // head_groups, head_splits: the launch shape (thread groups per CTA, CTAs per token; 0: chosen here),
  // for tuning.
  static void apply(TensorView positions, TensorView q, Optional<TensorView> k, TensorView q_out, Optional<TensorView> k_out,
                    TensorView cos_sin_cache, int64_t head_size, bool is_neox, int64_t head_groups, int64_t head_splits) {
    host::RuntimeCheck(k.has_value() == k_out.has_value(), "k and k_out must be given together");
    Setup setup(positions, q, k.has_value() ? &*k : nullptr, q_out, k_out.has_value() ? &*k_out : nullptr, cos_sin_cache, head_size,
                head_groups, head_splits);
    setup.template launch<false, false>(is_neox, KvStoreParams{}, {});
  }

  // apply, with the rotated k and value [N, Hk, D] written to k_buffer[cache_loc[i]], v_buffer[cache_loc[i]]
  // (caches [slots, Hk, D] or [pages, page_size, Hk, D], any row-compatible shape; T, or, through
  // apply_store_fp8, fp8 e4m3 as float8_e4m3fn or its bytes as uint8, with k_scale and v_scale: one export
  // per cache type, so that a first call compiles half the kernels). Locations outside the cache are skipped.
  static void apply_store(TensorView positions, TensorView q, TensorView k, TensorView q_out, TensorView k_out, TensorView cos_sin_cache,
                          int64_t head_size, bool is_neox, TensorView value, TensorView k_buffer, TensorView v_buffer, TensorView cache_loc,
                          double k_scale, double v_scale, int64_t head_groups, int64_t head_splits) {
    apply_store_as<false>(positions, q, k, q_out, k_out, cos_sin_cache, head_size, is_neox, value, k_buffer, v_buffer, cache_loc, k_scale, v_scale,
                          head_groups, head_splits);
  }
  static void apply_store_fp8(TensorView positions, TensorView q, TensorView k, TensorView q_out, TensorView k_out, TensorView cos_sin_cache,
                              int64_t head_size, bool is_neox, TensorView value, TensorView k_buffer, TensorView v_buffer, TensorView cache_loc,
                              double k_scale, double v_scale, int64_t head_groups, int64_t head_splits) {
    apply_store_as<true>(positions, q, k, q_out, k_out, cos_sin_cache, head_size, is_neox, value, k_buffer, v_buffer, cache_loc, k_scale, v_scale,
                         head_groups, head_splits);
  }

 private:
  template <bool kFp8>
  static void apply_store_as(TensorView positions, TensorView q, TensorView k, TensorView q_out, TensorView k_out, TensorView cos_sin_cache,
                             int64_t head_size, bool is_neox, TensorView v, TensorView k_cache, TensorView v_cache, TensorView cache_loc,
                             double k_scale, double v_scale, int64_t head_groups, int64_t head_splits) {
    using namespace host;
    Setup setup(positions, q, &k, q_out, &k_out, cos_sin_cache, head_size, head_groups, head_splits);
    auto N = SymbolicSize{"num_tokens"};
    N.set_value(setup.tokens);
    auto Hk = SymbolicSize{"num_kv_heads"};
    Hk.set_value(setup.p.k_heads);
    auto dev = SymbolicDevice{};
    dev.set_value(setup.device);
    const HeadsArg va = heads_arg<T>(v, N, Hk, head_size, dev, {"value", "value_token_stride", "value_head_stride", "value_width"});
    auto loc_stride = SymbolicSize{"cache_loc_stride"};
    TensorMatcher({N}).with_strides({loc_stride}).with_dtype<int32_t, int64_t>().with_device(device_v<kDLCUDA>, dev).verify(cache_loc, "cache_loc");
    const bool fp8 = is_type<uint8_t>(k_cache.dtype()) || is_type<fp8_e4m3_t>(k_cache.dtype());
    if (!fp8 && !is_type<T>(k_cache.dtype()))
      Raise(ErrorKind::kType, "k_buffer must have the inputs' dtype ", dtype_trait<T>::value, " or be float8_e4m3fn (or its bytes as uint8), got ",
            k_cache.dtype());
    if (fp8 != kFp8)
      Raise(ErrorKind::kType, "k_buffer is ", k_cache.dtype(), ": its cache write is ", fp8 ? "apply_store_fp8" : "apply_store", ", not ",
            kFp8 ? "apply_store_fp8" : "apply_store");
    if (!dtype_equal(v_cache.dtype(), k_cache.dtype()))
      Raise(ErrorKind::kType, "v_buffer must have k_buffer's dtype ", k_cache.dtype(), ", got ", v_cache.dtype());
    check_same_shape(k_cache, v_cache, "k_buffer", "v_buffer");
    check_distinct(k_cache, v_cache, "k_buffer", "v_buffer");
    RuntimeCheck(std::isfinite(k_scale) && k_scale > 0 && std::isfinite(v_scale) && v_scale > 0,
                 "k_scale and v_scale must be finite and positive, got ", k_scale, " and ", v_scale);
    RuntimeCheck(fp8 || (k_scale == 1.0 && v_scale == 1.0), "k_scale and v_scale apply to a float8_e4m3fn cache only; k_buffer is ",
                 k_cache.dtype());
    const int64_t row = setup.p.k_heads * head_size;
    KvStoreParams s{};
    s.v = va.ptr, s.v_token = va.token_stride, s.v_head = va.head_stride;
    s.k_cache = cache_layout(k_cache, row, setup.device.device_id, "k_buffer");
    s.v_cache = cache_layout(v_cache, row, setup.device.device_id, "v_buffer");
    s.loc = cache_loc.data_ptr(), s.loc_stride = stride_of(loc_stride), s.loc64 = is_type<int64_t>(cache_loc.dtype());
    s.k_scale = static_cast<float>(k_scale), s.v_scale = static_cast<float>(v_scale);
    const int64_t cb = fp8 ? 1 : sizeof(T), e = sizeof(T);
    const std::initializer_list<int64_t> bytes = {address(s.k_cache.base), address(s.v_cache.base), s.k_cache.page_stride, s.k_cache.row_stride,
                                                  s.v_cache.page_stride, s.v_cache.row_stride};
    const int64_t vec = setup.vec;
    const bool wide = vec > 1 && all_multiples(bytes, vec * cb) && all_multiples({address(va.ptr), va.token_stride * e, va.head_stride * e}, vec * e);
    setup.template launch<kFp8, true>(is_neox, s, wide);
  }

  static constexpr int kWideVec = device::kVec16<T>;

  // The verified arguments shared by both ops, as kernel parameters.
  struct Setup {
    RopeParams<T> p{};
    int64_t tokens = 0;
    DLDevice device{};
    int vec = 1;  // kWideVec when q, k, their outputs and the cos/sin rows allow it, else 1
    int64_t groups_hint = 0, splits_hint = 0;

    Setup(TensorView positions, TensorView q, const TensorView* k, TensorView q_out, const TensorView* k_out, TensorView cos_sin_cache,
          int64_t head_size, int64_t head_groups, int64_t head_splits)
        : groups_hint(head_groups), splits_hint(head_splits) {
      using namespace host;
      RuntimeCheck(head_size > 0, "head_size must be positive, got ", head_size);
      RuntimeCheck(head_groups >= 0 && head_splits >= 0 && head_splits < 65535,
                   "head_groups and head_splits must be 0 (automatic) or positive (head_splits at most 65534), got ", head_groups, " and ",
                   head_splits);
      auto N = SymbolicSize{"num_tokens"};
      auto Hq = SymbolicSize{"num_q_heads"}, Hk = SymbolicSize{"num_kv_heads"};
      auto P = SymbolicSize{"max_position"}, R = SymbolicSize{"rotary_dim"};
      auto pos_stride = SymbolicSize{"positions_stride"}, cs_stride = SymbolicSize{"cos_sin_cache_stride"};
      auto dev = SymbolicDevice{};
      TensorMatcher({N}).with_strides({pos_stride}).with_dtype<int32_t, int64_t>().with_device(device_v<kDLCUDA>, dev).verify(positions,
                                                                                                                           "positions");
      const HeadsArg qa = heads_arg<T>(q, N, Hq, head_size, dev, {"q", "q_token_stride", "q_head_stride", "q_width"});
      const HeadsArg qo = heads_arg<T>(q_out, N, Hq, head_size, dev, {"q_out", "q_out_token_stride", "q_out_head_stride", "q_out_width"});
      HeadsArg ka, ko;
      if (k != nullptr) {
        ka = heads_arg<T>(*k, N, Hk, head_size, dev, {"k", "k_token_stride", "k_head_stride", "k_width"});
        ko = heads_arg<T>(*k_out, N, Hk, head_size, dev, {"k_out", "k_out_token_stride", "k_out_head_stride", "k_out_width"});
      }
      // The heads written (in place: q and k themselves) must not overlap.
      check_disjoint(Extents{N.unwrap(), Hq.unwrap(), head_size}, Extents{qo.token_stride, qo.head_stride, 1}, same_view(qa, qo) ? "q" : "q_out");
      if (k != nullptr) {
        check_disjoint(Extents{N.unwrap(), Hk.unwrap(), head_size}, Extents{ko.token_stride, ko.head_stride, 1}, same_view(ka, ko) ? "k" : "k_out");
        check_distinct(q_out, *k_out, same_view(qa, qo) ? "q" : "q_out", same_view(ka, ko) ? "k" : "k_out");
      }
      TensorMatcher({P, R}).with_strides({cs_stride, 1}).with_dtype(dtype_v<float, T>).with_device(device_v<kDLCUDA>, dev).verify(cos_sin_cache,
                                                                                                                               "cos_sin_cache");
      const int64_t rot = R.unwrap();
      RuntimeCheck(rot >= 2 && rot % 2 == 0 && rot <= head_size, "cos_sin_cache width (the rotary dim) must be even and within [2, head_size ",
                   head_size, "], got ", rot);
      const int64_t heads = Hq.unwrap() + (k != nullptr ? Hk.unwrap() : 0);
      RuntimeCheck(heads < (int64_t{1} << 24) && head_size < (int64_t{1} << 24), "too many heads (", heads, ") or head_size too large (",
                   head_size, ")");
      const int64_t row_elems = (heads + (k != nullptr ? Hk.unwrap() : 0)) * head_size;  // q, k and the fused write's v
      RuntimeCheck(row_elems < (int64_t{1} << 31), "a token's q, k and v heads must hold fewer than 2^31 elements, got ", row_elems);
      RuntimeCheck(N.unwrap() < (int64_t{1} << 31), "at most 2^31 - 1 tokens per call, got ", N.unwrap());
      tokens = N.unwrap();
      device = dev.unwrap();
      p.positions = positions.data_ptr(), p.positions_stride = stride_of(pos_stride), p.positions64 = is_type<int64_t>(positions.dtype());
      p.cos_sin = cos_sin_cache.data_ptr(), p.cos_sin_stride = stride_of(cs_stride), p.max_position = P.unwrap();
      p.cos_sin_t = !is_type<float>(cos_sin_cache.dtype());
      p.q = static_cast<const T*>(qa.ptr), p.q_out = static_cast<T*>(qo.ptr);
      p.q_token = qa.token_stride, p.q_head = qa.head_stride, p.qo_token = qo.token_stride, p.qo_head = qo.head_stride;
      p.k = static_cast<const T*>(ka.ptr), p.k_out = static_cast<T*>(ko.ptr);
      p.k_token = ka.token_stride, p.k_head = ka.head_stride, p.ko_token = ko.token_stride, p.ko_head = ko.head_stride;
      p.q_heads = static_cast<int32_t>(Hq.unwrap()), p.k_heads = static_cast<int32_t>(k != nullptr ? Hk.unwrap() : 0);
      p.head_dim = static_cast<int32_t>(head_size), p.rot_half = static_cast<int32_t>(rot / 2);
      p.q_tail = !same_view(qa, qo), p.k_tail = k != nullptr && !same_view(ka, ko);
      const int64_t e = sizeof(T);
      const bool wide = p.rot_half % kWideVec == 0 && head_size % kWideVec == 0 &&
                        all_multiples({address(qa.ptr), address(qo.ptr), address(ka.ptr), address(ko.ptr), qa.token_stride * e, qa.head_stride * e,
                                       qo.token_stride * e, qo.head_stride * e, ka.token_stride * e, ka.head_stride * e, ko.token_stride * e,
                                       ko.head_stride * e},
                                      int64_t{16}) &&
                        (p.cos_sin_t ? all_multiples({address(p.cos_sin), p.cos_sin_stride * e}, 16)
                                     : all_multiples({address(p.cos_sin), p.cos_sin_stride * 4}, 4 * host::min(kWideVec, 4)));
      vec = wide ? kWideVec : 1;
    }

    // wide_store: the store operands (v, the caches) allow kWideVec as well.
    template <bool kFp8, bool kStore>
    void launch(bool neox, const KvStoreParams& s, bool wide_store) {
      if (tokens == 0 || p.q_heads + p.k_heads == 0) return;
      if (vec == kWideVec && (!kStore || wide_store)) {
        neox ? run<kFp8, true, kWideVec, kStore>(s) : run<kFp8, false, kWideVec, kStore>(s);
      } else {
        neox ? run<kFp8, true, 1, kStore>(s) : run<kFp8, false, 1, kStore>(s);
      }
    }

    template <bool kFp8, bool kNeox, int kVec, bool kStore>
    void run(const KvStoreParams& s) {
      using namespace host;
      const int64_t units = p.rot_half / kVec, heads = p.q_heads + p.k_heads;
      RuntimeCheck(units <= kRopeMaxThreads, "the rotary dim is too large for this alignment: ", 2 * p.rot_half);
      const bool few = tokens <= runtime::get_sm_count(device.device_id);
      if constexpr (kVec == kWideVec) {
        const int64_t staged_bytes = (heads + (kStore ? p.k_heads : 0)) * p.head_dim * static_cast<int64_t>(sizeof(T));
        if (!few && groups_hint <= 0 && splits_hint <= 0 && units <= kStagedThreads && staged_bytes <= kStagedMaxBytes) {
          RopeParams<T> c = p;
          c.units = static_cast<int32_t>(units);
          c.groups = static_cast<int32_t>(kStagedThreads / units), c.splits = 1;
          c.early_trigger = host::pdl_early_trigger(tokens);
          LaunchKernel(static_cast<unsigned>(tokens), static_cast<unsigned>(c.groups * units), device, static_cast<std::size_t>(staged_bytes))
              .enable_pdl()(rope_staged_kernel<T, kFp8, kNeox, kVec, kStore>, c, s);
          return;
        }
      }
      const RopeLaunch shape = rope_launch(units, heads, kStore, int64_t{p.k_heads} * (p.head_dim / kVec), tokens, few, groups_hint, splits_hint);
      RopeParams<T> c = p;
      c.units = static_cast<int32_t>(units), c.groups = static_cast<int32_t>(shape.groups), c.splits = static_cast<int32_t>(shape.splits);
      const int64_t ctas = shape.splits + (kStore ? 1 : 0);
      c.early_trigger = host::pdl_early_trigger(tokens * ctas);
      LaunchKernel(dim3(static_cast<unsigned>(tokens), static_cast<unsigned>(ctas)), dim3(static_cast<unsigned>(units), static_cast<unsigned>(shape.groups)),
                   device)
          .enable_pdl()(rope_kernel<T, kFp8, kNeox, kVec, kStore>, c, s);
    }
  };
};
#endif  // __CUDACC_RTC__

}  // namespace jitkern_rope
