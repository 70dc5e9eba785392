// The KV row copies, for rows of any dtype (moved as bytes):
//   KvRows::store_cache          k and v rows written to k_cache[indices[i]], v_cache[indices[i]] (flat or
//                                paged caches; any row of a multiple of 4 bytes);
//   KvRows::concat_mla_k, KvRows::concat_mla_absorb_q   the MLA layout concatenations.
// store_cache: a group of lanes (a power of two) per row; the concatenations: the output's vectors in
// order, a thread per kConcatUnroll of them (MLA's absorbed q, up to kWarpRowWaves waves of rows: a warp a row). 16-byte
// vectors where every address and stride allows.
// The cache layouts (shared with RoPE's fused cache write): <jitkern/impl/kv_cache.cuh>.
#pragma once

#include <jitkern/impl/kv_cache.cuh>
#include <jitkern/policy.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/utils.cuh>
#include <jitkern/utils.h>
#include <jitkern/warp.cuh>

#include <bit>
#include <cstdint>
#include <utility>

namespace jitkern_kv_rows {

using device::kv_cache::CacheLayout;
using device::kv_cache::load_index;
#ifndef __CUDACC_RTC__
using jitkern::TensorView;
using namespace host::kv_cache;
#endif

// CTAs of at most kRowThreads (narrower where that spreads the work over more SMs).
constexpr int kRowThreads = host::kRowKernels.copy_threads;
constexpr int kConcatUnroll = 2;  // vectors a concatenating thread loads before it stores

// store_cache's rows: k_cache[indices[r]] = k row r, v_cache[indices[r]] = v row r.
struct RowCopyParams {
  const char* x[2];  // k, v
  int64_t x_token[2];  // bytes from one token to the next
  CacheLayout caches[2];  // of one shape (one page size)
  const void* indices;
  int64_t indices_stride;
  int64_t rows;
  int32_t vecs;  // vectors per row
  int32_t lanes;  // threads per row, a power of two
  bool indices64;
  bool early_trigger;  // trigger the next launch once the loads are issued, else once the location has arrived
};

// The row a group of `lanes` lanes (a power of two; a group may span CTAs) copies and this thread's lane
// in it.
struct RowLane {
  int64_t row;
  int lane;
};
__device__ __forceinline__ RowLane row_and_lane(int32_t lanes) {
  const int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  return {t >> (__ffs(lanes) - 1), static_cast<int>(t & (lanes - 1))};
}

// Row r of k and v goes to their caches' row indices[r]; out-of-range locations are skipped. kPaged: the
// caches are [pages, page_size, *row] (the location divided once for both), else [slots, *row], a multiply.
// kOneVector: no lane has more than one vector of a row (vecs <= lanes), so the copy is one load and one
// store of each, no loop: after the location arrives only its check and the row's address stand between it
// and the stores (a loop and a division for each cache there cost 0.2-0.4 us at 16-256 tokens on an H200).
// The PDL wait comes first (the rows and locations may come from the kernel before). The next launch is
// triggered once the loads are issued, or on large grids once the location has arrived
// (host::pdl_late_trigger; 16 / 256 tokens of 8 x 128 bf16 on an H200: 0.78 / 0.97 us against 0.97 / 1.07).
template <typename Vec, bool kPaged, bool kOneVector>
__global__ void __launch_bounds__(kRowThreads) store_rows_kernel(const __grid_constant__ RowCopyParams p) {
#ifdef __CUDACC__
  const auto [r, lane] = row_and_lane(p.lanes);
  if (r >= p.rows || (kOneVector && lane >= p.vecs)) return;
  device::pdl_wait_primary();
  // The row's first vectors load before the location is checked (CacheLayout::holds).
  const int64_t slot = load_index(p.indices, p.indices64, r * p.indices_stride);
  const Vec* src[2] = {reinterpret_cast<const Vec*>(p.x[0] + r * p.x_token[0]), reinterpret_cast<const Vec*>(p.x[1] + r * p.x_token[1])};
  constexpr int kPerLane = kOneVector ? 1 : 2;  // vectors of each row a lane holds at a time
  Vec v[2][kPerLane];
  const auto load = [&](int c) {
#pragma unroll
    for (int u = 0; u < kPerLane; ++u)
#pragma unroll
      for (int b = 0; b < 2; ++b)
        if (kOneVector || c + u * p.lanes < p.vecs) v[b][u] = src[b][c + u * p.lanes];
  };
  load(lane);
  if (p.early_trigger) device::pdl_trigger_secondary();
  if (!p.caches[0].holds(slot)) return;
  if (!p.early_trigger) device::pdl_trigger_secondary();
  const device::kv_cache::CachePlace at = kPaged ? p.caches[0].place(slot) : device::kv_cache::CachePlace{slot, 0};
  Vec* dst[2] = {reinterpret_cast<Vec*>(p.caches[0].at(at)), reinterpret_cast<Vec*>(p.caches[1].at(at))};
  for (int c = lane; c < p.vecs; c += kPerLane * p.lanes) {
    if (c != lane) load(c);
#pragma unroll
    for (int u = 0; u < kPerLane; ++u)
#pragma unroll
      for (int b = 0; b < 2; ++b)
        if (kOneVector || c + u * p.lanes < p.vecs) dst[b][c + u * p.lanes] = v[b][u];
    if constexpr (kOneVector) break;
  }
#endif
}

struct ConcatParams {
  char* out;
  const char* x;
  const char* y;
  int64_t out_s0, out_s1, x_s0, x_s1, y_s0, y_s1;  // bytes
  int64_t vectors;  // of the output: rows * (x_vecs + y_vecs)
  device::kv_cache::Divisor row_vecs;  // x_vecs + y_vecs
  device::kv_cache::Divisor dim1;      // rows are (i0, i1), i1 < dim1
  int32_t x_vecs;
};

// out[i0, i1, :] = [x[i0, i1, :] | y[i0, i1, :]] (y_s1 = 0 broadcasts y over i1). The output's vectors
// in order, so no lane idles whatever the row's width (a power-of-two group of lanes per row left 56
// of 128 idle on MLA's 72-vector q rows). kUnroll vectors a thread (kConcatUnroll; others: bench_schedules.py).
template <typename Vec, int kUnroll = kConcatUnroll>
__global__ void __launch_bounds__(kRowThreads) concat_rows_kernel(const __grid_constant__ ConcatParams p) {
#ifdef __CUDACC__
  const int64_t first = int64_t{blockIdx.x} * blockDim.x * kUnroll + threadIdx.x;
  device::pdl_wait_primary();
  Vec v[kUnroll];
  Vec* out[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t g = first + int64_t{u} * blockDim.x;
    if (g < p.vectors) {
      uint64_t col, i1;
      const uint64_t row = p.row_vecs.divide(static_cast<uint64_t>(g), col);
      const int64_t i0 = static_cast<int64_t>(p.dim1.divide(row, i1));
      const int64_t c = static_cast<int64_t>(col), h = static_cast<int64_t>(i1);
      const char* src = c < p.x_vecs ? p.x + i0 * p.x_s0 + h * p.x_s1 + c * int64_t{sizeof(Vec)}
                                     : p.y + i0 * p.y_s0 + h * p.y_s1 + (c - p.x_vecs) * int64_t{sizeof(Vec)};
      v[u] = *reinterpret_cast<const Vec*>(src);
      out[u] = reinterpret_cast<Vec*>(p.out + i0 * p.out_s0 + h * p.out_s1 + c * int64_t{sizeof(Vec)});
    }
  }
  // Triggered once the loads are issued, as store_cache does.
  device::pdl_trigger_secondary();
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
    if (first + int64_t{u} * blockDim.x < p.vectors) *out[u] = v[u];
#endif
}

// MLA's absorbed q (rows of 1024 + 128 bytes: [T, H, 512 + 64] of 16-bit) a warp a row, up to
// kWarpRowWaves waves of rows: lane l copies x's 16-byte vectors l and l + 32 and y's 4-byte word l, loaded
// before the first store. Offsets are 32-bit (the host checks that every tensor's fit); kSplit: the row's
// token and head found by a 32-bit multiply-high (strided rows), else a row's offset is row * stride (rows
// evenly spaced in each tensor): 26 / 38 instructions before the first load, where a 64-bit quotient and
// strides put 78 (H200, [64, 128, 576]: 3.33 against 3.53 us; docs/benchmarks/vs_reference.md).
struct WarpRowParams {
  char* out;
  const char* x;
  const char* y;
  uint32_t out_s0, out_s1, x_s0, x_s1, y_s0, y_s1;  // bytes; !kSplit: s1 is a row's stride, s0 unused
  device::kv_cache::Divisor32 dim1;                 // kSplit: rows are (i0, i1), i1 < dim1
  uint32_t rows;
};
constexpr int kWarpRowXBytes = 1024, kWarpRowYBytes = 128, kWarpRowLanes = device::kWarpThreads;
// Waves of warps (every SM's resident warps) the warp-row kernel takes at most: 264 tokens of 128 heads on
// an H200; beyond, the output's vectors in order (1024 tokens: 72.89 against 73.80 us; 256: 19.44 / 19.39).
constexpr int64_t kWarpRowWaves = 4;

template <bool kSplit>
__global__ void __launch_bounds__(kRowThreads) concat_warp_rows_kernel(const __grid_constant__ WarpRowParams p) {
#ifdef __CUDACC__
  const uint32_t row = (blockIdx.x * blockDim.x + threadIdx.x) / device::kWarpThreads;
  const uint32_t lane = threadIdx.x % device::kWarpThreads;
  device::pdl_wait_primary();
  if (row >= p.rows) return;  // a whole warp
  uint32_t out_at, x_at, y_at;
  if constexpr (kSplit) {
    uint32_t i1;
    const uint32_t i0 = p.dim1.divide(row, i1);
    out_at = i0 * p.out_s0 + i1 * p.out_s1, x_at = i0 * p.x_s0 + i1 * p.x_s1, y_at = i0 * p.y_s0 + i1 * p.y_s1;
  } else {
    out_at = row * p.out_s1, x_at = row * p.x_s1, y_at = row * p.y_s1;
  }
  const int4* x = reinterpret_cast<const int4*>(p.x + x_at) + lane;
  const int4 x0 = x[0], x1 = x[device::kWarpThreads];
  const int y = reinterpret_cast<const int*>(p.y + y_at)[lane];
  device::pdl_trigger_secondary();  // once the loads are issued, as concat_rows_kernel
  int4* out = reinterpret_cast<int4*>(p.out + out_at) + lane;
  out[0] = x0;
  out[device::kWarpThreads] = x1;
  reinterpret_cast<int*>(p.out + out_at + kWarpRowXBytes)[lane] = y;
#endif
}

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
// Lanes per row: enough for one vector each, at most kRowThreads.
inline int32_t row_lanes(int64_t vecs) {
  return static_cast<int32_t>(host::min<int64_t>(kRowThreads, std::bit_ceil(static_cast<uint64_t>(host::max<int64_t>(vecs, 1)))));
}

// A class template so that a module instantiates only the kernels of the functions it exports.
template <typename = void>
struct KvRowsImpl {
  // k, v [N, *row] (each row contiguous; rows strided) -> k_cache, v_cache [slots, *row] or [pages,
  // page_size, *row], row indices[i] (int32/int64 [N]); a row is any multiple of 4 bytes; out-of-range
  // indices are skipped.
  static void store_cache(TensorView k, TensorView v, TensorView k_cache, TensorView v_cache, TensorView indices) {
    using namespace host;
    RuntimeCheck(k.dim() >= 1, "k must be [num_tokens, *row], got a scalar");
    RuntimeCheck(k.device().device_type == kDLCUDA, "k must be on a CUDA device, got ", k.device());
    check_same_shape(k, v, "k", "v");
    for (const auto& [t, name] : {std::pair{v, "v"}, std::pair{k_cache, "k_cache"}, std::pair{v_cache, "v_cache"}})
      if (!dtype_equal(t.dtype(), k.dtype())) Raise(ErrorKind::kType, name, " must have k's dtype ", k.dtype(), ", got ", t.dtype());
    RuntimeCheck(v.device().device_type == kDLCUDA && v.device().device_id == k.device().device_id, "v must be on k's device ", k.device(),
                 ", got ", v.device());
    RuntimeCheck(row_is_compact(k, 1), "k: each row (the dimensions after the first) must be contiguous");
    RuntimeCheck(row_is_compact(v, 1), "v: each row (the dimensions after the first) must be contiguous");
    const int64_t elem = static_cast<int64_t>(dtype_bytes(k.dtype()));
    int64_t row_elems = 1;
    for (int d = 1; d < k.dim(); ++d) row_elems *= k.size(d);
    const int64_t row_bytes = row_elems * elem;
    RuntimeCheck(row_bytes % 4 == 0 && row_bytes > 0, "rows must be a positive multiple of 4 bytes, got ", row_bytes);
    check_same_shape(k_cache, v_cache, "k_cache", "v_cache");
    check_distinct(k_cache, v_cache, "k_cache", "v_cache");
    auto N = SymbolicSize{"num_tokens"};
    N.set_value(k.size(0));
    auto stride = SymbolicSize{"indices_stride"};
    auto dev = SymbolicDevice{};
    dev.set_value(k.device());
    TensorMatcher({N}).with_strides({stride}).with_dtype<int32_t, int64_t>().with_device(device_v<kDLCUDA>, dev).verify(indices, "indices");
    RowCopyParams p{};
    p.caches[0] = cache_layout(k_cache, row_elems, k.device().device_id, "k_cache");
    p.caches[1] = cache_layout(v_cache, row_elems, k.device().device_id, "v_cache");
    p.x[0] = static_cast<const char*>(k.data_ptr()), p.x[1] = static_cast<const char*>(v.data_ptr());
    p.x_token[0] = k.size(0) > 1 ? k.stride(0) * elem : 0, p.x_token[1] = v.size(0) > 1 ? v.stride(0) * elem : 0;
    p.indices = indices.data_ptr(), p.indices_stride = stride_of(stride), p.indices64 = is_type<int64_t>(indices.dtype());
    p.rows = k.size(0);
    if (p.rows == 0) return;
    const bool wide = all_multiples({address(p.x[0]), address(p.x[1]), p.x_token[0], p.x_token[1], row_bytes, address(p.caches[0].base),
                                     address(p.caches[1].base), p.caches[0].page_stride, p.caches[0].row_stride, p.caches[1].page_stride,
                                     p.caches[1].row_stride},
                                    16);
    RuntimeCheck(wide || all_multiples({address(p.x[0]), address(p.x[1]), p.x_token[0], p.x_token[1], address(p.caches[0].base),
                                        address(p.caches[1].base), p.caches[0].page_stride, p.caches[0].row_stride, p.caches[1].page_stride,
                                        p.caches[1].row_stride},
                                       4),
                 "store_cache: every tensor's address and row strides must be multiples of 4 bytes");
    p.vecs = static_cast<int32_t>(row_bytes / (wide ? 16 : 4));
    p.lanes = row_lanes(p.vecs);
    p.early_trigger = !pdl_late_trigger(p.rows * p.lanes, runtime::get_sm_count(k.device().device_id), row_policy(k.device()).threads_per_sm);
    const auto by_shape = [&](auto vec) {
      using Vec = decltype(vec);
      const bool paged = p.caches[0].page_size.d != 1, one = p.vecs <= p.lanes;
      const auto kernel = paged ? (one ? store_rows_kernel<Vec, true, true> : store_rows_kernel<Vec, true, false>)
                                : (one ? store_rows_kernel<Vec, false, true> : store_rows_kernel<Vec, false, false>);
      launch_threads(kernel, p, p.rows * p.lanes, k.device());
    };
    if (wide) {
      by_shape(int4{});
    } else {
      by_shape(int{});
    }
  }

  // k [N, H, Dn + Dr] = [k_nope [N, H, Dn] | k_rope [N, 1, Dr] (or [N, Dr]) broadcast over the heads,
  // or [N, H, Dr]]; last dimensions contiguous.
  static void concat_mla_k(TensorView k, TensorView k_nope, TensorView k_rope) {
    using namespace host;
    auto N = SymbolicSize{"num_tokens"}, H = SymbolicSize{"num_heads"}, Dn = SymbolicSize{"nope_dim"}, Dr = SymbolicSize{"rope_dim"},
         D = SymbolicSize{"k_head_dim"};
    auto ks0 = SymbolicSize{"k_token_stride"}, ks1 = SymbolicSize{"k_head_stride"}, ns0 = SymbolicSize{"k_nope_token_stride"},
         ns1 = SymbolicSize{"k_nope_head_stride"}, rs0 = SymbolicSize{"k_rope_token_stride"}, rs1 = SymbolicSize{"k_rope_head_stride"};
    auto dtype = SymbolicDType{};
    auto dev = SymbolicDevice{};
    TensorMatcher({N, H, D}).with_strides({ks0, ks1, 1}).with_dtype(dtype).with_device(device_v<kDLCUDA>, dev).verify(k, "k");
    TensorMatcher({N, H, Dn}).with_strides({ns0, ns1, 1}).with_dtype(dtype).with_device(device_v<kDLCUDA>, dev).verify(k_nope, "k_nope");
    int64_t rope_head_stride = 0;
    if (k_rope.dim() == 2) {
      TensorMatcher({N, Dr}).with_strides({rs0, 1}).with_dtype(dtype).with_device(device_v<kDLCUDA>, dev).verify(k_rope, "k_rope");
    } else {
      auto Hr = SymbolicSize{"k_rope_heads"};
      TensorMatcher({N, Hr, Dr}).with_strides({rs0, rs1, 1}).with_dtype(dtype).with_device(device_v<kDLCUDA>, dev).verify(k_rope, "k_rope");
      RuntimeCheck(Hr.unwrap() == 1 || Hr.unwrap() == H.unwrap(), "k_rope must have 1 head (broadcast) or k's ", H.unwrap(), ", got ",
                   Hr.unwrap());
      if (Hr.unwrap() != 1) rope_head_stride = stride_of(rs1);
    }
    RuntimeCheck(D.unwrap() == Dn.unwrap() + Dr.unwrap(), "k's head dim ", D.unwrap(), " must be k_nope's ", Dn.unwrap(), " + k_rope's ",
                 Dr.unwrap());
    check_disjoint(Extents{N.unwrap(), H.unwrap(), D.unwrap()}, Extents{stride_of(ks0), stride_of(ks1), 1}, "k");
    const int64_t e = static_cast<int64_t>(dtype_bytes(dtype.unwrap()));
    ConcatParams p{};
    p.out = static_cast<char*>(k.data_ptr()), p.x = static_cast<const char*>(k_nope.data_ptr()), p.y = static_cast<const char*>(k_rope.data_ptr());
    p.out_s0 = stride_of(ks0) * e, p.out_s1 = stride_of(ks1) * e, p.x_s0 = stride_of(ns0) * e, p.x_s1 = stride_of(ns1) * e;
    p.y_s0 = stride_of(rs0) * e, p.y_s1 = rope_head_stride * e;
    concat(p, N.unwrap(), H.unwrap(), Dn.unwrap() * e, Dr.unwrap() * e, dev.unwrap());
  }

  // out [A, B, Da + Db] = [a [A, B, Da] | b [A, B, Db]]; last dimensions contiguous.
  static void concat_mla_absorb_q(TensorView a, TensorView b, TensorView out) {
    using namespace host;
    auto A = SymbolicSize{"dim_0"}, B = SymbolicSize{"dim_1"}, Da = SymbolicSize{"a_last_dim"}, Db = SymbolicSize{"b_last_dim"},
         Do = SymbolicSize{"out_last_dim"};
    auto as0 = SymbolicSize{"a_stride_0"}, as1 = SymbolicSize{"a_stride_1"}, bs0 = SymbolicSize{"b_stride_0"}, bs1 = SymbolicSize{"b_stride_1"},
         os0 = SymbolicSize{"out_stride_0"}, os1 = SymbolicSize{"out_stride_1"};
    auto dtype = SymbolicDType{};
    auto dev = SymbolicDevice{};
    TensorMatcher({A, B, Da}).with_strides({as0, as1, 1}).with_dtype(dtype).with_device(device_v<kDLCUDA>, dev).verify(a, "a");
    TensorMatcher({A, B, Db}).with_strides({bs0, bs1, 1}).with_dtype(dtype).with_device(device_v<kDLCUDA>, dev).verify(b, "b");
    TensorMatcher({A, B, Do}).with_strides({os0, os1, 1}).with_dtype(dtype).with_device(device_v<kDLCUDA>, dev).verify(out, "out");
    RuntimeCheck(Do.unwrap() == Da.unwrap() + Db.unwrap(), "out's last dimension ", Do.unwrap(), " must be a's ", Da.unwrap(), " + b's ",
                 Db.unwrap());
    const int64_t e = static_cast<int64_t>(dtype_bytes(dtype.unwrap()));
    ConcatParams p{};
    p.out = static_cast<char*>(out.data_ptr()), p.x = static_cast<const char*>(a.data_ptr()), p.y = static_cast<const char*>(b.data_ptr());
    p.out_s0 = stride_of(os0) * e, p.out_s1 = stride_of(os1) * e, p.x_s0 = stride_of(as0) * e, p.x_s1 = stride_of(as1) * e;
    p.y_s0 = stride_of(bs0) * e, p.y_s1 = stride_of(bs1) * e;
    concat(p, A.unwrap(), B.unwrap(), Da.unwrap() * e, Db.unwrap() * e, dev.unwrap());
  }

  // out[i0, i1] = [x[i0, i1] | y[i0, i1]] for p's pointers and byte strides. kUnroll 0: the launch rules
  // below; else concat_rows_kernel with kUnroll vectors a thread (bench_schedules.py).
  template <int kUnroll = 0>
  static void concat(ConcatParams p, int64_t dim0, int64_t dim1, int64_t x_bytes, int64_t y_bytes, DLDevice device) {
    using namespace host;
    RuntimeCheck(dim1 < (int64_t{1} << 31) && x_bytes + y_bytes < (int64_t{1} << 31), "concat: rows too wide or too many heads");
    const int64_t rows = dim0 * dim1;
    if (rows == 0 || x_bytes + y_bytes == 0) return;
    p.dim1 = divisor(dim1);
    const auto fits = [&](int64_t w) {
      return all_multiples({address(p.out), address(p.x), address(p.y), p.out_s0, p.out_s1, p.x_s0, p.x_s1, p.y_s0, p.y_s1, x_bytes, y_bytes}, w);
    };
    if (kUnroll == 0 && x_bytes == kWarpRowXBytes && y_bytes == kWarpRowYBytes && fits(16) && warp_rows(p, dim0, dim1, device, 0)) return;
    const auto go = [&](auto vec) {
      using Vec = decltype(vec);
      const int64_t row_vecs = (x_bytes + y_bytes) / int64_t{sizeof(Vec)};
      p.x_vecs = static_cast<int32_t>(x_bytes / int64_t{sizeof(Vec)});
      p.row_vecs = divisor(row_vecs);
      p.vectors = rows * row_vecs;
      RuntimeCheck(p.vectors < (int64_t{1} << 62), "concat: too many elements: ", p.vectors);
      constexpr int kFlatUnroll = kUnroll == 0 ? kConcatUnroll : kUnroll;
      launch_threads(concat_rows_kernel<Vec, kFlatUnroll>, p, div_ceil(p.vectors, int64_t{kFlatUnroll}), device);
    };
    if (fits(16)) {
      go(int4{});
    } else if (fits(2)) {
      go(uint16_t{});
    } else {
      go(uint8_t{});
    }
  }

  // MLA's absorbed q rows a warp a row (concat_warp_rows_kernel) where they are at most kWarpRowWaves waves
  // (or any number: `force`, bench_schedules.py) and every tensor's offsets fit 32 bits; false: not taken.
  // cta 0: the copy kernels' CTA width (launch_threads), else that many threads.
  static bool warp_rows(const ConcatParams& c, int64_t dim0, int64_t dim1, DLDevice device, int64_t cta, bool force = false) {
    using namespace host;
    const int64_t rows = dim0 * dim1;
    const int64_t waves = kWarpRowWaves * runtime::get_sm_count(device.device_id) * (row_policy(device).threads_per_sm / kWarpRowLanes);
    // The byte just past each tensor's last row (strides are not negative).
    const auto end = [&](int64_t s0, int64_t s1, int64_t row_bytes) { return (dim0 - 1) * s0 + (dim1 - 1) * s1 + row_bytes; };
    if ((force ? rows >= (int64_t{1} << 26) : rows > waves) ||  // force: rows * 32 threads within 32 bits
        end(c.out_s0, c.out_s1, kWarpRowXBytes + kWarpRowYBytes) >= (int64_t{1} << 31) ||
        end(c.x_s0, c.x_s1, kWarpRowXBytes) >= (int64_t{1} << 31) || end(c.y_s0, c.y_s1, kWarpRowYBytes) >= (int64_t{1} << 31))
      return false;
    WarpRowParams p{c.out, c.x, c.y};
    p.out_s0 = static_cast<uint32_t>(c.out_s0), p.out_s1 = static_cast<uint32_t>(c.out_s1), p.x_s0 = static_cast<uint32_t>(c.x_s0),
    p.x_s1 = static_cast<uint32_t>(c.x_s1), p.y_s0 = static_cast<uint32_t>(c.y_s0), p.y_s1 = static_cast<uint32_t>(c.y_s1);
    p.dim1 = divisor<uint32_t>(dim1);
    p.rows = static_cast<uint32_t>(rows);
    // Rows evenly spaced in a tensor: one stride (the token's where there is one head).
    const auto even = [&](uint32_t& s0, uint32_t& s1) {
      if (dim1 == 1) s1 = s0;
      return dim0 == 1 || dim1 == 1 || s0 == dim1 * s1;
    };
    const bool split = !(even(p.out_s0, p.out_s1) && even(p.x_s0, p.x_s1) && even(p.y_s0, p.y_s1));
    const auto kernel = split ? concat_warp_rows_kernel<true> : concat_warp_rows_kernel<false>;
    const int64_t threads = rows * kWarpRowLanes;
    if (cta == 0) {
      launch_threads(kernel, p, threads, device);
    } else {
      LaunchKernel(static_cast<unsigned>(div_ceil(threads, cta)), static_cast<unsigned>(cta), device).enable_pdl()(kernel, p);
    }
    return true;
  }

 private:
  // `threads` threads in CTAs of 32-kRowThreads: the narrowest that leave at most one warp per SM (then
  // two, four) where the work is small, so that it spreads over every SM; kRowThreads once it is large.
  template <typename Params>
  static void launch_threads(void (*kernel)(Params), const Params& p, int64_t threads, DLDevice device) {
    using namespace host;
    const int64_t warps = div_ceil(threads, 32), sms = runtime::get_sm_count(device.device_id);
    int64_t cta = kRowThreads;
    for (int64_t w = 1; w * 32 < kRowThreads; w *= 2)
      if (warps <= sms * w) {
        cta = w * 32;
        break;
      }
    const int64_t grid = div_ceil(threads, cta);
    RuntimeCheck(grid < (int64_t{1} << 31), "too many rows for one launch");
    LaunchKernel(static_cast<unsigned>(grid), static_cast<unsigned>(cta), device).enable_pdl()(kernel, p);
  }
};
using KvRows = KvRowsImpl<>;
#endif  // __CUDACC_RTC__

}  // namespace jitkern_kv_rows
