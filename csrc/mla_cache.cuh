// The MLA cache write of DeepSeek-style attention, for fp16/bf16/fp32 inputs:
//   MlaCacheOps<T>::store      kv_buffer[loc[i]] = [k_nope[i] | k_rope[i]] (the compressed KV and the rope
//                              key in one row of a flat or paged cache of T), and optionally, in the same
//                              launch, q_out[i, h] = [q_nope[i, h] | q_rope[i, h]] (the absorbed query);
//   MlaCacheOps<T>::store_fp8  the same into a float8_e4m3 cache (and query), each value divided by its scale
//                              (k_scale, q_scale) and rounded as <jitkern/impl/quant.cuh> rounds.
// Locations outside the cache, and the reserved one (reserved_skip_index, e.g. the padding slot of CUDA
// graphs), are skipped.
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

template <typename T>
struct Params {
  const T* k_nope;
  const T* k_rope;
  int64_t k_nope_token, k_rope_token;  // elements
  CacheLayout cache;
  const void* loc;
  int64_t loc_stride;
  int64_t skip;  // reserved_skip_index
  const T* q_nope;
  const T* q_rope;
  char* q_out;  // [N, H, Dn + Dr] contiguous, T or fp8 bytes
  int64_t q_nope_token, q_nope_head, q_rope_token, q_rope_head;  // elements
  int32_t tokens, heads;  // heads: 0 without the query
  int32_t nope_vecs, vecs;  // vectors of k_nope (and q_nope) and of a whole row
  float k_scale, q_scale;
  bool loc64, early_trigger;
};

// Row r < tokens: token r's KV row to the cache; after those, query head (t, h) = r - tokens to q_out.
// Lane l copies vectors l, l + 32, ... of the row ([nope | rope]), kBatch loads before their stores.
template <typename T, bool kFp8, int kVec>
__global__ void __launch_bounds__(kThreads) mla_cache_kernel(const __grid_constant__ Params<T> p) {
#ifdef __CUDACC__
  using Vec = AlignedVector<T, kVec>;
  constexpr int64_t kOutBytes = kFp8 ? 1 : sizeof(T);
  if (p.early_trigger) device::pdl_trigger_secondary();
  const int64_t row = (int64_t{blockIdx.x} * kThreads + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= int64_t{p.tokens} * (1 + p.heads)) return;
  const bool is_kv = row < p.tokens;
  const int64_t token = is_kv ? row : (row - p.tokens) / p.heads, head = is_kv ? 0 : row - p.tokens - token * p.heads;
  const T* nope = is_kv ? p.k_nope + token * p.k_nope_token : p.q_nope + token * p.q_nope_token + head * p.q_nope_head;
  const T* rope = is_kv ? p.k_rope + token * p.k_rope_token : p.q_rope + token * p.q_rope_token + head * p.q_rope_head;
  device::pdl_wait_primary();
  if (!p.early_trigger) device::pdl_trigger_secondary();
  char* out;
  if (is_kv) {
    const int64_t slot = device::kv_cache::load_index(p.loc, p.loc64, token * p.loc_stride);
    if (slot == p.skip || !p.cache.holds(slot)) return;
    out = p.cache.row(slot);
  } else {
    out = p.q_out + (token * p.heads + head) * p.vecs * kVec * kOutBytes;
  }
  const device::quant::Divider div(kFp8 ? (is_kv ? p.k_scale : p.q_scale) : 1.0f);
  for (int first = lane; first < p.vecs; first += 32 * kBatch) {
    Vec x[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = first + 32 * b;
      if (j < p.vecs) x[b].load(j < p.nope_vecs ? nope + j * kVec : rope + (j - p.nope_vecs) * kVec);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = first + 32 * b;
      if (j >= p.vecs) break;
      if constexpr (kFp8) {
        device::quant::store_quantized<fp8_e4m3_t>(reinterpret_cast<uint8_t*>(out) + j * kVec, x[b], div);
      } else {
        x[b].store(reinterpret_cast<T*>(out) + j * kVec);
      }
    }
  }
#endif
}

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only

template <typename T>
struct MlaCacheOps {
  // k_nope [N, Dn], k_rope [N, Dr] (rows strided, last dimension contiguous) to kv_buffer rows of Dn + Dr
  // ([slots, Dn + Dr], [slots, 1, Dn + Dr] or paged [pages, page_size, 1, Dn + Dr]) at loc [N] int32/int64;
  // with q_nope [N, H, Dn], q_rope [N, H, Dr] also q_out [N, H, Dn + Dr] (contiguous). T here; fp8 caches
  // (float8_e4m3fn or its bytes as uint8, q_out too) through store_fp8.
  static void store(TensorView kv_buffer, TensorView loc, TensorView k_nope, TensorView k_rope, Optional<TensorView> q_nope,
                    Optional<TensorView> q_rope, Optional<TensorView> q_out, int64_t reserved_skip_index, double k_scale, double q_scale) {
    store_as<false>(kv_buffer, loc, k_nope, k_rope, q_nope, q_rope, q_out, reserved_skip_index, k_scale, q_scale);
  }
  static void store_fp8(TensorView kv_buffer, TensorView loc, TensorView k_nope, TensorView k_rope, Optional<TensorView> q_nope,
                        Optional<TensorView> q_rope, Optional<TensorView> q_out, int64_t reserved_skip_index, double k_scale, double q_scale) {
    store_as<true>(kv_buffer, loc, k_nope, k_rope, q_nope, q_rope, q_out, reserved_skip_index, k_scale, q_scale);
  }

 private:
  static constexpr int kWideVec = device::kVec16<T>;

  template <bool kFp8>
  static void store_as(TensorView kv_buffer, TensorView loc, TensorView k_nope, TensorView k_rope, Optional<TensorView> q_nope,
                       Optional<TensorView> q_rope, Optional<TensorView> q_out, int64_t reserved_skip_index, double k_scale, double q_scale) {
    using namespace host;
    using namespace host::kv_cache;
    auto N = SymbolicSize{"num_tokens"}, H = SymbolicSize{"num_heads"}, Dn = SymbolicSize{"nope_dim"}, Dr = SymbolicSize{"rope_dim"};
    auto kn_token = SymbolicSize{"k_nope_token_stride"}, kr_token = SymbolicSize{"k_rope_token_stride"};
    auto qn_token = SymbolicSize{"q_nope_token_stride"}, qn_head = SymbolicSize{"q_nope_head_stride"};
    auto qr_token = SymbolicSize{"q_rope_token_stride"}, qr_head = SymbolicSize{"q_rope_head_stride"};
    auto loc_stride = SymbolicSize{"loc_stride"};
    auto dev = SymbolicDevice{};
    TensorMatcher({N, Dn}).with_strides({kn_token, 1}).with_dtype<T>().with_device(device_v<kDLCUDA>, dev).verify(k_nope, "k_nope");
    TensorMatcher({N, Dr}).with_strides({kr_token, 1}).with_dtype<T>().with_device(device_v<kDLCUDA>, dev).verify(k_rope, "k_rope");
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
    if (tokens == 0) return;
    p.tokens = static_cast<int32_t>(tokens);
    const int ob = kFp8 ? 1 : static_cast<int>(sizeof(T));
    const bool wide = nope % kWideVec == 0 && all_multiples({p.cache.page_stride, p.cache.row_stride}, ob * kWideVec) &&
                      vector_width(kWideVec, Dr.unwrap(),
                                   {VecOperand(p.k_nope), VecOperand(p.k_rope), VecOperand(p.q_nope), VecOperand(p.q_rope),
                                    VecOperand(p.cache.base, ob), VecOperand(p.q_out, ob)},
                                   {p.k_nope_token, p.k_rope_token, p.q_nope_token, p.q_nope_head, p.q_rope_token, p.q_rope_head}) == kWideVec;
    const int vec = wide ? kWideVec : 1;
    p.nope_vecs = static_cast<int32_t>(nope / vec), p.vecs = static_cast<int32_t>(width / vec);
    const int64_t ctas = div_ceil(tokens * (1 + p.heads) * 32, int64_t{kThreads});
    p.early_trigger = pdl_early_trigger(ctas);
    LaunchKernel(static_cast<unsigned>(ctas), static_cast<unsigned>(kThreads), device)
        .enable_pdl()(wide ? mla_cache_kernel<T, kFp8, kWideVec> : mla_cache_kernel<T, kFp8, 1>, p);
  }
};
#endif  // __CUDACC_RTC__

}  // namespace jitkern_mla_cache
