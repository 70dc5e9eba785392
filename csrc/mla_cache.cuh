// The MLA cache write of DeepSeek-style attention, for fp16/bf16/fp32 inputs:
//   MlaCacheOps<T>::store      kv_buffer[loc[i]] = [k_nope[i] | k_rope[i]] (the compressed KV and the rope
//                              key in one row of a flat or paged cache of T), and optionally, in the same
//                              launch, q_out[i, h] = [q_nope[i, h] | q_rope[i, h]] (the absorbed query);
//   MlaCacheOps<T>::store_fp8  the same into a float8_e4m3 cache (and query), each value divided by its scale
//                              (k_scale, q_scale) and rounded as <jitkern/impl/quant.cuh> rounds.
// Locations outside the cache, and the reserved one (reserved_skip_index, e.g. the padding slot of CUDA
// graphs), are skipped. DeepSeek's KV rows alone (set_mla_kv_buffer, 512 + 64, not fp8) take
// mla_kv_rows_kernel where the cache's rows lie one stride apart; everything else mla_cache_kernel.
#pragma once

#include <jitkern/impl/kv_cache.cuh>
#include <jitkern/impl/quant.cuh>
#include <jitkern/optional.h>
#include <jitkern/runtime.cuh>
#include <jitkern/type.cuh>
#include <jitkern/utils.cuh>
#include <jitkern/vec.cuh>
#ifndef __CUDACC_RTC__
#include <jitkern/tensor.h>
#include <jitkern/utils.h>
#endif

#include <cstdint>
#include <type_traits>

namespace jitkern_mla_cache {

using device::AlignedVector;
using device::kv_cache::CacheLayout;
#ifndef __CUDACC_RTC__
using jitkern::Optional;
using jitkern::TensorView;
#endif

// CTAs of kThreads, one warp per row (a KV row or a query head), kBatch vectors a lane in flight.
constexpr int kThreads = 128;
constexpr int kBatch = 4;
// DeepSeek's row (kv_lora_rank 512 + rope 64): its own instantiation, the vector counts compile-time.
constexpr int kFixedNope = 512, kFixedRope = 64;

template <typename T>
struct Params {
  // The KV path's fields first: the code before the PDL wait reads k_nope, tokens and loc64, which pulls the
  // constant-cache lines of the fields read after it (the cache, skip) in with them.
  const T* k_nope;
  const T* k_rope;
  int64_t k_nope_token, k_rope_token;  // elements
  const void* loc;
  int64_t loc_stride;
  CacheLayout cache;
  int64_t skip;  // reserved_skip_index
  int32_t tokens, heads;  // heads: 0 without the query
  int32_t nope_vecs, vecs;  // vectors of k_nope (and q_nope) and of a whole row
  float k_scale, q_scale;
  bool loc64;
  const T* q_nope;
  const T* q_rope;
  char* q_out;  // [N, H, Dn + Dr] contiguous, T or fp8 bytes
  int64_t q_nope_token, q_nope_head, q_rope_token, q_rope_head;  // elements
};

// Row r < tokens: token r's KV row to the cache; after those, query head (t, h) = r - tokens to q_out.
// Lane l copies vectors l, l + 32, ... of the row ([nope | rope]), kBatch loads before their stores. The
// location's address is worked out (and prefetched) before the PDL wait, the location and the row's first
// vectors load together, the location checked only where the stores need it, and the next launch is
// triggered once they are issued (triggering at start or after the stores was as fast or slower at every
// size). kFixed: rows of kFixedNope + kFixedRope in vectors of kVec, the vector counts compile-time (H200,
// 576 bf16 with the query, 1-256 tokens: 0.89-1.91 us against 0.91-1.99 with runtime counts,
// docs/benchmarks/kv_rows.md).
template <typename T, bool kFp8, int kVec, bool kFixed = false>
__global__ void __launch_bounds__(kThreads) mla_cache_kernel(const __grid_constant__ Params<T> p) {
#ifdef __CUDACC__
  // Rows load as 32-bit words, each load unconditional: 16-bit elements, or a branch around a load, had
  // nvcc unpack each vector as it arrived, which serialized the row's loads.
  constexpr bool kWords = kVec * sizeof(T) % 4 == 0;
  using E = std::conditional_t<kWords, uint32_t, T>;
  using Vec = AlignedVector<E, kWords ? kVec * sizeof(T) / 4 : kVec>;
  constexpr int64_t kOutBytes = kFp8 ? 1 : sizeof(T);
  constexpr int kNopeVecs = kFixedNope / kVec, kRowVecs = (kFixedNope + kFixedRope) / kVec;
  static_assert(!kFixed || (kFixedNope % kVec == 0 && kFixedRope % kVec == 0));
  const int nope_vecs = kFixed ? kNopeVecs : p.nope_vecs, vecs = kFixed ? kRowVecs : p.vecs;
  const uint32_t row = (blockIdx.x * kThreads + threadIdx.x) / 32;  // rows < 2^26 (checked at launch)
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= static_cast<uint32_t>(p.tokens) * (1 + p.heads)) return;
  const bool is_kv = row < static_cast<uint32_t>(p.tokens);
  const uint32_t q_row = row - p.tokens, q_token = is_kv ? 0 : q_row / static_cast<uint32_t>(p.heads);
  const int64_t token = is_kv ? row : q_token, head = is_kv ? 0 : q_row - q_token * p.heads;
  const T* nope = is_kv ? p.k_nope + token * p.k_nope_token : p.q_nope + token * p.q_nope_token + head * p.q_nope_head;
  const T* rope = is_kv ? p.k_rope + token * p.k_rope_token : p.q_rope + token * p.q_rope_token + head * p.q_rope_head;
  // Query rows load their token's location too (unused, not prefetched): the load stays unconditional, its
  // address known here (one location for every query row put all of them on one L2 line: 3x slower at
  // 256-4096 tokens).
  const void* loc_at = device::kv_cache::index_address(p.loc, p.loc64, token * p.loc_stride);
  if (is_kv) device::prefetch_before_wait(loc_at);
  device::pdl_wait_primary();
  const int64_t slot = device::kv_cache::load_index_at(loc_at, p.loc64);
  // Source of vector j (batch b) of the row; past the row its last vector again (no branch around each
  // load). kFixed, first batch: whether b lies in the nope or the rope part is known at compile time.
  const auto source = [&](int j, int b, bool first_batch) -> const T* {
    if (kFixed && first_batch && 32 * (b + 1) <= kNopeVecs) return nope + j * kVec;
    if (kFixed && first_batch && 32 * b >= kNopeVecs) return rope + (min(j, kRowVecs - 1) - kNopeVecs) * kVec;
    j = min(j, vecs - 1);
    return j < nope_vecs ? nope + j * kVec : rope + (j - nope_vecs) * kVec;
  };
  // Batch [first, first + 32 * kBatch) of the row: loads, then stores (the first batch apart: no vector
  // carried across the loop).
  constexpr int kFirstBatch = kFixed && (kRowVecs + 31) / 32 < kBatch ? (kRowVecs + 31) / 32 : kBatch;
  const auto load = [&](Vec(&v)[kBatch], int first, bool first_batch) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (!first_batch || b < kFirstBatch) v[b].load_global(reinterpret_cast<const E*>(source(first + 32 * b, b, first_batch)));
  };
  Vec x[kBatch];
  load(x, lane, true);
  device::pdl_trigger_secondary();
  char* out;
  if (is_kv) {
    if (slot == p.skip || static_cast<uint64_t>(slot) >= static_cast<uint64_t>(p.cache.slots)) return;  // holds(slot)
    // Flat caches (page size 1) skip the division.
    out = p.cache.page_size.d == 1 ? p.cache.base + slot * p.cache.page_stride : p.cache.row(slot);
  } else {
    out = p.q_out + (token * p.heads + head) * vecs * kVec * kOutBytes;
  }
  const device::quant::Divider div(kFp8 ? (is_kv ? p.k_scale : p.q_scale) : 1.0f);
  const auto store = [&](const Vec(&v)[kBatch], int first, bool first_batch) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = first + 32 * b;
      if ((first_batch && b >= kFirstBatch) || j >= vecs) break;
      if constexpr (kFp8) {
        AlignedVector<T, kVec> elements;
        __builtin_memcpy(&elements, &v[b], sizeof(elements));
        device::quant::store_quantized<fp8_e4m3_t>(reinterpret_cast<uint8_t*>(out) + first * kVec + 32 * b * kVec, elements, div);
      } else {  // the batch's offset apart: an immediate of the store
        v[b].store_global(reinterpret_cast<E*>(reinterpret_cast<T*>(out) + first * kVec + 32 * b * kVec));
      }
    }
  };
  store(x, lane, true);
  for (int first = lane + 32 * kFirstBatch; first < vecs; first += 32 * kBatch) {
    Vec y[kBatch];
    load(y, first, false);
    store(y, first, false);
  }
#endif
}

// set_mla_kv_buffer's fixed rows (kNopeBytes + kRopeBytes, no query, no fp8) into a cache whose rows lie
// one stride apart (flat, or pages back to back): the fields such a row needs only, 64 bytes against
// Params' 192. Strides and counts fit 32 bits (checked at launch). H200, 576 bf16, 1-4096 tokens:
// 0.70-1.88 us (triggering once its loads are issued) where mla_cache_kernel took 0.77-2.06
// (docs/benchmarks/kv_rows.md).
struct RowParams {
  const char* k_nope;
  const char* k_rope;
  char* cache;  // row 0
  const void* loc;
  uint32_t k_nope_token, k_rope_token, row_stride;  // bytes
  uint32_t loc_stride;                              // elements
  uint32_t slots;                                   // < 2^32 - 1
  uint32_t skip;                                    // reserved_skip_index in [0, slots), else ~0u (matches no kept slot)
  uint32_t tokens;
};

// One warp a row, any CTA size (whole warps): lane l loads the row's 16-byte vectors l, l + 32, ... of
// k_nope and a word of kRopeBytes / 32 of k_rope, each load unconditional; the location's address is worked
// out (and prefetched) before the PDL wait; the next launch is triggered at the start (kTriggerFirst) or
// once the loads are issued, before anything waits for them; the location is checked where the stores
// need it.
template <int kNopeBytes, int kRopeBytes, typename Loc, bool kTriggerFirst>
__global__ void __launch_bounds__(1024) mla_kv_rows_kernel(const __grid_constant__ RowParams p) {
#ifdef __CUDACC__
  if constexpr (kTriggerFirst) device::pdl_trigger_secondary();
  static_assert(kNopeBytes % (32 * 16) == 0 && (kRopeBytes == 32 * 4 || kRopeBytes == 32 * 8 || kRopeBytes == 32 * 16));
  constexpr int kNopeVecs = kNopeBytes / (32 * 16), kRopeWords = kRopeBytes / 32 / 4;
  using Vec = AlignedVector<uint32_t, 4>;
  using Word = AlignedVector<uint32_t, kRopeWords>;
  const uint32_t row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;  // rows < 2^26 (checked at launch)
  const uint32_t lane = threadIdx.x % 32;
  if (row >= p.tokens) return;
  const Loc* at = static_cast<const Loc*>(p.loc) + static_cast<uint64_t>(row) * p.loc_stride;
  const char* nope = p.k_nope + static_cast<uint64_t>(row) * p.k_nope_token + lane * 16;
  const char* rope = p.k_rope + static_cast<uint64_t>(row) * p.k_rope_token + lane * sizeof(Word);
  device::prefetch_before_wait(at);
  device::pdl_wait_primary();
  const Loc slot = *at;
  Vec v[kNopeVecs];
#pragma unroll
  for (int i = 0; i < kNopeVecs; ++i) v[i].load_global(reinterpret_cast<const uint32_t*>(nope + i * 32 * 16));
  Word w;
  w.load_global(reinterpret_cast<const uint32_t*>(rope));
  // (kTriggerFirst: again, without effect: ptxas otherwise moves the row's loads past the check)
  device::pdl_trigger_secondary();
  // Negative locations are out of range as unsigned (rows_of takes int32 ones for at most 2^31 slots); a kept one fits 32 bits.
  using Unsigned = std::conditional_t<sizeof(Loc) == 8, uint64_t, uint32_t>;
  if (static_cast<Unsigned>(slot) >= p.slots || static_cast<uint32_t>(slot) == p.skip) return;
  char* out = p.cache + static_cast<uint64_t>(static_cast<uint32_t>(slot)) * p.row_stride;
#pragma unroll
  for (int i = 0; i < kNopeVecs; ++i) v[i].store_global(reinterpret_cast<uint32_t*>(out + lane * 16 + i * 32 * 16));
  w.store_global(reinterpret_cast<uint32_t*>(out + kNopeBytes + lane * sizeof(Word)));
#endif
}

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only

template <typename T>
struct MlaCacheOps {
  // cache_k_nope [N, Dn], cache_k_rope [N, Dr] (rows strided, last dimension contiguous) to kv_buffer rows of Dn + Dr
  // ([slots, Dn + Dr], [slots, 1, Dn + Dr] or paged [pages, page_size, 1, Dn + Dr]) at loc [N] int32/int64;
  // with q_nope [N, H, Dn], q_rope [N, H, Dr] also q_out [N, H, Dn + Dr] (contiguous). T here; fp8 caches
  // (float8_e4m3fn or its bytes as uint8, q_out too) through store_fp8.
  static void store(TensorView kv_buffer, TensorView loc, TensorView cache_k_nope, TensorView cache_k_rope, Optional<TensorView> q_nope,
                    Optional<TensorView> q_rope, Optional<TensorView> q_out, int64_t reserved_skip_index, double k_scale, double q_scale) {
    store_as<false>(kv_buffer, loc, cache_k_nope, cache_k_rope, q_nope, q_rope, q_out, reserved_skip_index, k_scale, q_scale);
  }
  static void store_fp8(TensorView kv_buffer, TensorView loc, TensorView cache_k_nope, TensorView cache_k_rope, Optional<TensorView> q_nope,
                        Optional<TensorView> q_rope, Optional<TensorView> q_out, int64_t reserved_skip_index, double k_scale, double q_scale) {
    store_as<true>(kv_buffer, loc, cache_k_nope, cache_k_rope, q_nope, q_rope, q_out, reserved_skip_index, k_scale, q_scale);
  }

  // A checked call: its parameters, the vector width (kWideVec or 1), whether its rows are kFixedNope +
  // kFixedRope (in vectors of kWideVec), its CTAs (0: nothing to write) and device; kv_rows: the call
  // mla_kv_rows_kernel takes (with rows, its parameters, and trigger_first, where it triggers the next launch).
  struct Launch {
    Params<T> p;
    int vec;
    bool fixed;
    int64_t ctas;
    DLDevice device;
    bool kv_rows;
    RowParams rows;
    bool trigger_first;
  };
  template <typename Loc, bool kTriggerFirst>
  static constexpr auto kRowsKernel = mla_kv_rows_kernel<kFixedNope * sizeof(T), kFixedRope * sizeof(T), Loc, kTriggerFirst>;
  static constexpr int kWideVec = device::kVec16<T>;

  // The call's checks and launch shape; store / store_fp8 launch it as is (benchmarks: other kernels on
  // the same parameters).
  template <bool kFp8>
  static Launch prepare(TensorView kv_buffer, TensorView loc, TensorView k_nope, TensorView k_rope, Optional<TensorView> q_nope,
                       Optional<TensorView> q_rope, Optional<TensorView> q_out, int64_t reserved_skip_index, double k_scale, double q_scale) {
    using namespace host;
    using namespace host::kv_cache;
    auto N = SymbolicSize{"num_tokens"}, H = SymbolicSize{"num_heads"}, Dn = SymbolicSize{"nope_dim"}, Dr = SymbolicSize{"rope_dim"};
    auto kn_token = SymbolicSize{"cache_k_nope_token_stride"}, kr_token = SymbolicSize{"cache_k_rope_token_stride"};
    auto qn_token = SymbolicSize{"q_nope_token_stride"}, qn_head = SymbolicSize{"q_nope_head_stride"};
    auto qr_token = SymbolicSize{"q_rope_token_stride"}, qr_head = SymbolicSize{"q_rope_head_stride"};
    auto loc_stride = SymbolicSize{"loc_stride"};
    auto dev = SymbolicDevice{};
    TensorMatcher({N, Dn}).with_strides({kn_token, 1}).with_dtype<T>().with_device(device_v<kDLCUDA>, dev).verify(k_nope, "cache_k_nope");
    TensorMatcher({N, Dr}).with_strides({kr_token, 1}).with_dtype<T>().with_device(device_v<kDLCUDA>, dev).verify(k_rope, "cache_k_rope");
    TensorMatcher({N}).with_strides({loc_stride}).with_dtype<int32_t, int64_t>().with_device(device_v<kDLCUDA>, dev).verify(loc, "loc");
    const bool fp8 = is_type<uint8_t>(kv_buffer.dtype()) || is_type<fp8_e4m3_t>(kv_buffer.dtype());
    if (kFp8 && !fp8) Raise(ErrorKind::kType, "kv_buffer must be float8_e4m3fn (or its bytes as uint8) for store_fp8, got ", kv_buffer.dtype());
    if (!kFp8 && !is_type<T>(kv_buffer.dtype()))
      Raise(ErrorKind::kType, "kv_buffer must have the inputs' dtype ", dtype_trait<T>::value, " (fp8 caches: store_fp8), got ",
            kv_buffer.dtype());
    RuntimeCheck(std::isfinite(k_scale) && k_scale > 0 && std::isfinite(q_scale) && q_scale > 0,
                 "k_scale and q_scale must be finite and positive, got ", k_scale, " and ", q_scale);
    RuntimeCheck(kFp8 || (k_scale == 1.0 && q_scale == 1.0), "k_scale and q_scale apply to float8_e4m3fn outputs only; kv_buffer is ",
                 kv_buffer.dtype());
    const int64_t nope = Dn.unwrap(), width = nope + Dr.unwrap();
    const DLDevice device = dev.unwrap();
    Params<T> p{};
    p.cache = cache_layout(kv_buffer, width, device.device_id, "kv_buffer");
    p.k_nope = static_cast<const T*>(k_nope.data_ptr()), p.k_rope = static_cast<const T*>(k_rope.data_ptr());
    p.k_nope_token = stride_of(kn_token), p.k_rope_token = stride_of(kr_token);
    p.loc = loc.data_ptr(), p.loc_stride = stride_of(loc_stride), p.loc64 = is_type<int64_t>(loc.dtype());
    p.skip = reserved_skip_index;
    p.k_scale = static_cast<float>(k_scale), p.q_scale = static_cast<float>(q_scale);
    RuntimeCheck(q_nope.has_value() == q_rope.has_value() && q_nope.has_value() == q_out.has_value(),
                 "q_nope, q_rope and q_out must be given together");
    if (q_nope.has_value()) {
      TensorMatcher({N, H, Dn}).with_strides({qn_token, qn_head, 1}).with_dtype<T>().with_device(device_v<kDLCUDA>, dev).verify(*q_nope, "q_nope");
      TensorMatcher({N, H, Dr}).with_strides({qr_token, qr_head, 1}).with_dtype<T>().with_device(device_v<kDLCUDA>, dev).verify(*q_rope, "q_rope");
      if constexpr (kFp8) {
        TensorMatcher({N, H, width}).with_dtype<fp8_e4m3_t, uint8_t>().with_device(device_v<kDLCUDA>, dev).verify(*q_out, "q_out");
      } else {
        TensorMatcher({N, H, width}).with_dtype<T>().with_device(device_v<kDLCUDA>, dev).verify(*q_out, "q_out");
      }
      RuntimeCheck(q_out->is_contiguous(), "q_out must be contiguous");
      p.q_nope = static_cast<const T*>(q_nope->data_ptr()), p.q_rope = static_cast<const T*>(q_rope->data_ptr());
      p.q_out = static_cast<char*>(q_out->data_ptr());
      p.q_nope_token = stride_of(qn_token), p.q_nope_head = stride_of(qn_head), p.q_rope_token = stride_of(qr_token), p.q_rope_head = stride_of(qr_head);
      p.heads = static_cast<int32_t>(H.unwrap());
    }
    const int64_t tokens = N.unwrap();
    RuntimeCheck(tokens * (1 + p.heads) < (int64_t{1} << 26) && width < (int64_t{1} << 24), "too many rows (", tokens, " tokens of ", p.heads,
                 " query heads) or rows too wide (", width, ")");
    if (tokens == 0) return {p, 1, false, 0, device, false, {}, false};
    p.tokens = static_cast<int32_t>(tokens);
    const int ob = kFp8 ? 1 : static_cast<int>(sizeof(T));
    const bool wide = nope % kWideVec == 0 && all_multiples({p.cache.page_stride, p.cache.row_stride}, ob * kWideVec) &&
                      vector_width(kWideVec, Dr.unwrap(),
                                   {VecOperand(p.k_nope), VecOperand(p.k_rope), VecOperand(p.q_nope), VecOperand(p.q_rope),
                                    VecOperand(p.cache.base, ob), VecOperand(p.q_out, ob)},
                                   {p.k_nope_token, p.k_rope_token, p.q_nope_token, p.q_nope_head, p.q_rope_token, p.q_rope_head}) == kWideVec;
    const int vec = wide ? kWideVec : 1;
    p.nope_vecs = static_cast<int32_t>(nope / vec), p.vecs = static_cast<int32_t>(width / vec);
    const bool fixed = wide && nope == kFixedNope && Dr.unwrap() == kFixedRope;
    Launch l{p, vec, fixed, div_ceil(tokens * (1 + p.heads) * 32, int64_t{kThreads}), device, false, {}, false};
    l.kv_rows = !kFp8 && fixed && p.heads == 0 && rows_of(p, l.rows);
    // The rows kernel triggers at its start while its grid holds at most kPdlLateTriggerThreadsPerSm threads an
    // SM (H200, 1-256 tokens: 0.63-0.72 us against 0.70-0.80 once the loads are issued; 4096: 1.93 against 1.88).
    l.trigger_first = l.kv_rows && l.ctas * kThreads <= kPdlLateTriggerThreadsPerSm * runtime::get_sm_count(device.device_id);
    return l;
  }

 private:
  // p as RowParams where its cache's rows lie one stride apart and every stride and count fits 32 bits.
  static bool rows_of(const Params<T>& p, RowParams& r) {
    const CacheLayout& c = p.cache;
    const int64_t stride = c.page_size.d == 1 ? c.page_stride : c.row_stride, elem = sizeof(T);
    const bool even = c.page_size.d == 1 || c.page_stride == static_cast<int64_t>(c.page_size.d) * c.row_stride;
    const auto u32 = [](int64_t x) { return x >= 0 && x <= int64_t{UINT32_MAX}; };
    // int32 locations: negative ones stay out of range as unsigned only while the slots fit 31 bits.
    const bool slots_fit = c.slots < (p.loc64 ? int64_t{UINT32_MAX} : int64_t{INT32_MAX} + 1);
    if (!even || !u32(stride) || !u32(p.k_nope_token * elem) || !u32(p.k_rope_token * elem) || !u32(p.loc_stride) || !slots_fit)
      return false;
    r = {reinterpret_cast<const char*>(p.k_nope), reinterpret_cast<const char*>(p.k_rope), c.base, p.loc,
         static_cast<uint32_t>(p.k_nope_token * elem), static_cast<uint32_t>(p.k_rope_token * elem), static_cast<uint32_t>(stride),
         static_cast<uint32_t>(p.loc_stride), static_cast<uint32_t>(c.slots),
         p.skip >= 0 && p.skip < c.slots ? static_cast<uint32_t>(p.skip) : ~0u, static_cast<uint32_t>(p.tokens)};
    return true;
  }

  template <bool kFp8>
  static void store_as(TensorView kv_buffer, TensorView loc, TensorView k_nope, TensorView k_rope, Optional<TensorView> q_nope,
                       Optional<TensorView> q_rope, Optional<TensorView> q_out, int64_t reserved_skip_index, double k_scale, double q_scale) {
    const Launch l = prepare<kFp8>(kv_buffer, loc, k_nope, k_rope, q_nope, q_rope, q_out, reserved_skip_index, k_scale, q_scale);
    if (l.ctas == 0) return;
    if (l.kv_rows) {
      host::LaunchKernel(static_cast<unsigned>(l.ctas), static_cast<unsigned>(kThreads), l.device)
          .enable_pdl()(l.trigger_first ? (l.p.loc64 ? kRowsKernel<int64_t, true> : kRowsKernel<int32_t, true>)
                                        : (l.p.loc64 ? kRowsKernel<int64_t, false> : kRowsKernel<int32_t, false>),
                        l.rows);
      return;
    }
    host::LaunchKernel(static_cast<unsigned>(l.ctas), static_cast<unsigned>(kThreads), l.device)
        .enable_pdl()(l.fixed                ? mla_cache_kernel<T, kFp8, kWideVec, true>
                      : l.vec == kWideVec ? mla_cache_kernel<T, kFp8, kWideVec>
                                          : mla_cache_kernel<T, kFp8, 1>,
                      l.p);
  }
};
#endif  // __CUDACC_RTC__

}  // namespace jitkern_mla_cache
