// Bandwidth yardsticks for the benchmarks.
// copy_ceiling: a plain device-to-device copy, the second yardstick of the bandwidth ceiling (next to
// torch's copy_): 16-byte vectors, 1024 threads of one vector each. On the H100 it measured 3030 GB/s
// against 2964 for torch's copy_ (docs/benchmarks/README.md), so "% of the copy ceiling" is not flattered by a
// slow reference copy.
// rewrite_columns: the memory traffic of an in-place row op on a slice of a wider buffer (qknorm's q
// and k columns of a fused qkv buffer) and nothing else, as the ceiling for that access pattern.
// rewrite_pair: the same for an op that reads two buffers and writes both back (fused_add_rmsnorm).
// halve: reads 16 bytes and writes 8, twice per thread (a 2-byte to 1-byte conversion: 8-bit quantization).
// quarter: reads 32 bytes and writes 8 per thread (act-and-mul to 8 bits).
// read_all: reads every byte and writes one word per CTA (an amax pass).
// rewrite_to_cache: the memory traffic of RoPE fused with the KV-cache write and nothing else: per token,
// its q and k read and written back in place, its v read, k and v written to its cache rows.
// rewrite_to_cache_gathered: the same, with the dependency RoPE adds: q and k are written back only after
// a 16-byte vector of the table row at the token's position (its cos/sin row) has arrived, which can be
// read only once the position has. rewrite_gathered: the same without the cache rows.
// rewrite_rows: the dependency pattern of a wide-row norm at decode sizes and nothing else: one CTA per
// row, four 16-byte vectors per thread read, 0, 1 or 2 CTA-wide reductions in series, written back.
#pragma once

#include <jitkern/cta.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/utils.cuh>
#include <jitkern/utils.h>

#include <algorithm>
#include <cstdint>

namespace {

constexpr int kCopyCeilingThreads = 1024;
constexpr int64_t kCopyCeilingTileBytes = int64_t{16} * kCopyCeilingThreads;

__global__ void __launch_bounds__(kCopyCeilingThreads) copy_ceiling_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src) {
  const int64_t i = int64_t{blockIdx.x} * kCopyCeilingThreads + threadIdx.x;
  dst[i] = src[i];
}

// Verifies two contiguous int32 CUDA tensors of the same size, a multiple of 16 KiB, 16-byte aligned;
// returns the number of kCopyCeilingThreads-vector tiles they hold (0: empty) and their device.
inline unsigned whole_tiles(jitkern::TensorView a, jitkern::TensorView b, const char* who, DLDevice* device_out) {
  using namespace host;
  SymbolicSize n{"num_elements"};
  SymbolicDevice device;
  TensorMatcher({n}).with_dtype<int32_t>().with_device<kDLCUDA>(device).verify(a).verify(b);
  const int64_t bytes = n.unwrap() * 4;
  RuntimeCheck(bytes % kCopyCeilingTileBytes == 0, who, ": the size must be a multiple of ", kCopyCeilingTileBytes, " bytes, got ", bytes);
  RuntimeCheck(reinterpret_cast<uintptr_t>(a.data_ptr()) % 16 == 0 && reinterpret_cast<uintptr_t>(b.data_ptr()) % 16 == 0, who,
               ": both tensors must be 16-byte aligned");
  RuntimeCheck(bytes / kCopyCeilingTileBytes <= int64_t{0x7fffffff}, who, ": too large");
  *device_out = device.unwrap();
  return static_cast<unsigned>(bytes / kCopyCeilingTileBytes);
}

void copy_ceiling(jitkern::TensorView dst, jitkern::TensorView src) {
  DLDevice device;
  const unsigned tiles = whole_tiles(dst, src, "copy_ceiling", &device);
  if (tiles == 0) return;
  host::LaunchKernel(tiles, kCopyCeilingThreads, device)(copy_ceiling_kernel, static_cast<uint4*>(dst.data_ptr()),
                                                         static_cast<const uint4*>(src.data_ptr()));
}

__global__ void __launch_bounds__(kCopyCeilingThreads)
    rewrite_columns_kernel(uint4* buf, int64_t row_vecs, int64_t stride_vecs, int64_t total, uint32_t flip) {
  device::pdl_trigger_secondary();
  const int64_t i = int64_t{blockIdx.x} * kCopyCeilingThreads + threadIdx.x;
  const int64_t row = i / row_vecs, at = row * stride_vecs + (i - row * row_vecs);
  device::pdl_wait_primary();
  if (i < total) {
    uint4 v = buf[at];
    v.x ^= flip;
    buf[at] = v;
  }
}

// Reads the first `width` elements of every row of the 2-D tensor `buf` and writes them back XORed
// with `flip` (0 leaves the data as it was; a run-time value, so the stores are kept). Launched like
// the norm kernels (PDL), so back-to-back launches overlap alike.
void rewrite_columns(jitkern::TensorView buf, int64_t width, int64_t flip) {
  using namespace host;
  SymbolicSize rows{"rows"}, cols{"columns"}, stride{"row_stride"};
  SymbolicDevice device;
  TensorMatcher({rows, cols}).with_strides({stride, 1}).with_dtype<int32_t>().with_device<kDLCUDA>(device).verify(buf);
  RuntimeCheck(width > 0 && width <= cols.unwrap() && width % 4 == 0, "rewrite_columns: width must be a positive multiple of 4 "
               "elements, at most ", cols.unwrap(), ", got ", width);
  const int64_t row_stride = rows.unwrap() > 1 ? stride.unwrap() : width;
  RuntimeCheck(row_stride % 4 == 0 && reinterpret_cast<uintptr_t>(buf.data_ptr()) % 16 == 0,
               "rewrite_columns: rows must start 16-byte aligned");
  const int64_t total = rows.unwrap() * (width / 4);
  if (total == 0) return;
  RuntimeCheck(div_ceil(total, kCopyCeilingThreads) <= int64_t{0x7fffffff}, "rewrite_columns: too large");
  LaunchKernel(static_cast<unsigned>(div_ceil(total, kCopyCeilingThreads)), kCopyCeilingThreads, device.unwrap())
      .enable_pdl()(rewrite_columns_kernel, static_cast<uint4*>(buf.data_ptr()), width / 4, row_stride / 4, total,
                    static_cast<uint32_t>(flip));
}

__global__ void __launch_bounds__(kCopyCeilingThreads) rewrite_pair_kernel(uint4* a, uint4* b, uint32_t flip) {
  device::pdl_trigger_secondary();
  const int64_t i = int64_t{blockIdx.x} * kCopyCeilingThreads + threadIdx.x;
  device::pdl_wait_primary();
  uint4 x = a[i], y = b[i];
  x.x ^= flip;
  y.x ^= flip;
  a[i] = x;
  b[i] = y;
}

// a, b: as for copy_ceiling; both read, both written back XORed with `flip`.
void rewrite_pair(jitkern::TensorView a, jitkern::TensorView b, int64_t flip) {
  DLDevice device;
  const unsigned tiles = whole_tiles(a, b, "rewrite_pair", &device);
  if (tiles == 0) return;
  host::LaunchKernel(tiles, kCopyCeilingThreads, device)
      .enable_pdl()(rewrite_pair_kernel, static_cast<uint4*>(a.data_ptr()), static_cast<uint4*>(b.data_ptr()), static_cast<uint32_t>(flip));
}

// Two 16-byte reads per thread, issued together (as the quantization kernels do), and kWrites 8-byte
// writes: 2 for halve (2 bytes to 1: 8-bit quantization), 1 for quarter (a pair of 2-byte values to one
// byte: act-and-mul to fp8).
template <int kWrites>
__global__ void __launch_bounds__(kCopyCeilingThreads) shrink_kernel(uint2* dst, const uint4* src, int64_t n) {
  device::pdl_trigger_secondary();
  const int64_t i = int64_t{blockIdx.x} * 2 * kCopyCeilingThreads + threadIdx.x, j = i + kCopyCeilingThreads;
  device::pdl_wait_primary();
  const uint4 a = src[i];
  const uint4 b = j < n ? src[j] : make_uint4(0, 0, 0, 0);
  if constexpr (kWrites == 2) {
    dst[i] = make_uint2(a.x ^ a.y, a.z ^ a.w);
    if (j < n) dst[j] = make_uint2(b.x ^ b.y, b.z ^ b.w);
  } else {
    dst[int64_t{blockIdx.x} * kCopyCeilingThreads + threadIdx.x] = make_uint2(a.x ^ a.y ^ b.x ^ b.y, a.z ^ a.w ^ b.z ^ b.w);
  }
}

// src: int32, a multiple of 16 KiB (halve) or 32 KiB (quarter); dst: int32, src's elements / (4 / kWrites).
template <int kWrites>
void shrink(jitkern::TensorView dst, jitkern::TensorView src, const char* name) {
  using namespace host;
  constexpr int kRatio = 4 / kWrites;
  const int64_t unit = kCopyCeilingTileBytes * (kWrites == 2 ? 1 : 2);
  SymbolicSize n{"num_elements"}, m{"dst_elements"};
  SymbolicDevice device;
  TensorMatcher({n}).with_dtype<int32_t>().with_device<kDLCUDA>(device).verify(src, "src");
  TensorMatcher({m}).with_dtype<int32_t>().with_device<kDLCUDA>(device).verify(dst, "dst");
  RuntimeCheck(n.unwrap() * 4 % unit == 0 && m.unwrap() * kRatio == n.unwrap(), name, ": src must be a multiple of ", unit / 1024,
               " KiB and dst 1/", kRatio, " of it");
  const int64_t tiles = n.unwrap() * 4 / kCopyCeilingTileBytes;
  if (tiles == 0) return;
  LaunchKernel(static_cast<unsigned>(div_ceil(tiles, 2)), kCopyCeilingThreads, device.unwrap())
      .enable_pdl()(shrink_kernel<kWrites>, static_cast<uint2*>(dst.data_ptr()), static_cast<const uint4*>(src.data_ptr()),
                    tiles * kCopyCeilingThreads);
}

void halve(jitkern::TensorView dst, jitkern::TensorView src) { shrink<2>(dst, src, "halve"); }
void quarter(jitkern::TensorView dst, jitkern::TensorView src) { shrink<1>(dst, src, "quarter"); }

// Each thread reads four 16-byte vectors per step of a grid-stride loop (loads in flight), folds them
// with XOR and adds one atomic per warp at the end.
__global__ void __launch_bounds__(kCopyCeilingThreads) read_all_kernel(unsigned* out, const uint4* src, int64_t n) {
  device::pdl_trigger_secondary();
  const int64_t step = int64_t{gridDim.x} * kCopyCeilingThreads;
  device::pdl_wait_primary();
  unsigned x = 0;
  for (int64_t i = int64_t{blockIdx.x} * kCopyCeilingThreads + threadIdx.x; i < n; i += 4 * step) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = i + u * step < n ? src[i + u * step] : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (int offset = 16; offset > 0; offset /= 2) x ^= __shfl_xor_sync(0xffffffffu, x, offset);
  if (threadIdx.x % 32 == 0) atomicXor(out, x);
}

// src: int32, a multiple of 16 KiB; out: int32 [1], XORed with every word of src.
void read_all(jitkern::TensorView out, jitkern::TensorView src) {
  DLDevice device;
  const unsigned tiles = whole_tiles(src, src, "read_all", &device);
  host::TensorMatcher({1}).with_dtype<int32_t>().with_device<kDLCUDA>().verify(out, "out");
  if (tiles == 0) return;
  const unsigned grid = std::min<unsigned>(tiles, 2 * static_cast<unsigned>(host::runtime::get_sm_count(device.device_id)));
  host::LaunchKernel(grid, kCopyCeilingThreads, device)
      .enable_pdl()(read_all_kernel, static_cast<unsigned*>(out.data_ptr()), static_cast<const uint4*>(src.data_ptr()),
                    int64_t{tiles} * kCopyCeilingThreads);
}

constexpr int kRewriteRowsVecs = 4;

// One CTA per token: its first `rewrite` 16-byte vectors (q, then k) read and written back XORed with
// `flip`, the last `cached` of them also written to the token's k cache row, the next `cached` (v) read
// and written to its v cache row; every load of a token in flight before its stores (256 threads, 4
// vectors each: a whole 12 KiB row of q, k and v of 32 / 8 / 8 heads of 128). It triggers the next
// launch where the RoPE kernel does (host::pdl_early_trigger), so back-to-back launches overlap alike.
// kGather: positions (int64, one per token) and table (rows of table_vecs vectors) are read too, and
// what q and k are XORed with comes from the table row at the token's position.
constexpr int kRowCacheThreads = 256, kRowCacheItems = 4;
template <bool kGather>
__global__ void __launch_bounds__(kRowCacheThreads) rewrite_to_cache_kernel(uint4* rows, int64_t row_vecs, int rewrite, int cached,
                                                                            const int64_t* loc, uint4* kc, uint4* vc, uint32_t flip,
                                                                            bool early_trigger, const int64_t* positions,
                                                                            const uint4* table, int table_vecs) {
  if (early_trigger) device::pdl_trigger_secondary();
  uint4* row = rows + int64_t{blockIdx.x} * row_vecs;
  device::pdl_wait_primary();
  if (!early_trigger) device::pdl_trigger_secondary();
  const int64_t slot = cached > 0 ? loc[blockIdx.x] : 0;  // cached 0: no cache rows (rewrite_gathered)
  if constexpr (kGather) flip ^= table[positions[blockIdx.x] * table_vecs + threadIdx.x % table_vecs].x;
  uint4* k_row = cached > 0 ? kc + slot * cached : nullptr;
  uint4* v_row = cached > 0 ? vc + slot * cached : nullptr;
  const int total = rewrite + cached, k_first = rewrite - cached;
  for (int base = threadIdx.x; base < total; base += kRowCacheThreads * kRowCacheItems) {
    uint4 x[kRowCacheItems];
#pragma unroll
    for (int u = 0; u < kRowCacheItems; ++u)
      if (base + u * kRowCacheThreads < total) x[u] = row[base + u * kRowCacheThreads];
#pragma unroll
    for (int u = 0; u < kRowCacheItems; ++u) {
      const int i = base + u * kRowCacheThreads;
      if (i >= total) continue;
      if (i < rewrite) {
        x[u].x ^= flip;
        row[i] = x[u];
        if (i >= k_first) k_row[i - k_first] = x[u];
      } else {
        v_row[i - rewrite] = x[u];
      }
    }
  }
}

// rows: int32 [tokens, >= (rewrite + cached) * 4] (a fused qkv buffer seen as int32); with a cache (cache:
// loc, int64 [tokens], then kc and vc, int32 caches of rows of `cached` vectors; null: none, cached 0);
// rewrite, cached in 16-byte vectors.
template <bool kGather>
void launch_rewrite_to_cache(jitkern::TensorView rows, const jitkern::TensorView* cache, int64_t rewrite, int64_t cached, int64_t flip,
                             const int64_t* positions, const uint4* table, int64_t table_vecs) {
  using namespace host;
  SymbolicSize tokens{"tokens"}, width{"width"}, stride{"row_stride"}, slots{"cache_words"};
  SymbolicDevice device;
  TensorMatcher({tokens, width}).with_strides({stride, 1}).with_dtype<int32_t>().with_device<kDLCUDA>(device).verify(rows);
  if (cache != nullptr) {
    TensorMatcher({tokens}).with_dtype<int64_t>().with_device<kDLCUDA>(device).verify(cache[0]);
    TensorMatcher({slots}).with_dtype<int32_t>().with_device<kDLCUDA>(device).verify(cache[1]).verify(cache[2]);
  }
  RuntimeCheck(rewrite > cached && cached >= 0 && (cached > 0) == (cache != nullptr) && (rewrite + cached) * 4 <= width.unwrap(),
               "rewrite_to_cache: bad row split");
  if (tokens.unwrap() == 0) return;
  const auto data = [&](int i) { return cache == nullptr ? nullptr : cache[i].data_ptr(); };
  LaunchKernel(static_cast<unsigned>(tokens.unwrap()), kRowCacheThreads, device.unwrap())
      .enable_pdl()(rewrite_to_cache_kernel<kGather>, static_cast<uint4*>(rows.data_ptr()), stride.unwrap() / 4, static_cast<int>(rewrite),
                    static_cast<int>(cached), static_cast<const int64_t*>(data(0)), static_cast<uint4*>(data(1)), static_cast<uint4*>(data(2)),
                    static_cast<uint32_t>(flip), pdl_early_trigger(tokens.unwrap()), positions, table, static_cast<int>(table_vecs));
}

void rewrite_to_cache(jitkern::TensorView rows, jitkern::TensorView loc, jitkern::TensorView kc, jitkern::TensorView vc,
                      int64_t rewrite, int64_t cached, int64_t flip) {
  const jitkern::TensorView cache[] = {loc, kc, vc};
  launch_rewrite_to_cache<false>(rows, cache, rewrite, cached, flip, nullptr, nullptr, 1);
}

// rewrite_to_cache_gathered's (null cache: rewrite_gathered's) launch; positions: int64 [tokens], each in
// [0, table rows); table: int32 [rows, words], words a multiple of 4.
void launch_gathered(jitkern::TensorView rows, const jitkern::TensorView* cache, jitkern::TensorView positions, jitkern::TensorView table,
                     int64_t rewrite, int64_t cached, int64_t flip) {
  using namespace host;
  SymbolicSize tokens{"tokens"}, table_rows{"table_rows"}, words{"table_words"};
  SymbolicDevice device;
  device.set_value(rows.device());
  TensorMatcher({tokens}).with_dtype<int64_t>().with_device<kDLCUDA>(device).verify(positions);
  TensorMatcher({table_rows, words}).with_dtype<int32_t>().with_device<kDLCUDA>(device).verify(table);
  RuntimeCheck(words.unwrap() % 4 == 0 && words.unwrap() > 0 && reinterpret_cast<uintptr_t>(table.data_ptr()) % 16 == 0,
               "rewrite_to_cache_gathered: table rows must be whole 16-byte vectors");
  RuntimeCheck(tokens.unwrap() == rows.size(0), "rewrite_to_cache_gathered: one position per token");
  launch_rewrite_to_cache<true>(rows, cache, rewrite, cached, flip, static_cast<const int64_t*>(positions.data_ptr()),
                                static_cast<const uint4*>(table.data_ptr()), words.unwrap() / 4);
}

void rewrite_to_cache_gathered(jitkern::TensorView rows, jitkern::TensorView loc, jitkern::TensorView positions, jitkern::TensorView table,
                               jitkern::TensorView kc, jitkern::TensorView vc, int64_t rewrite, int64_t cached, int64_t flip) {
  const jitkern::TensorView cache[] = {loc, kc, vc};
  launch_gathered(rows, cache, positions, table, rewrite, cached, flip);
}

// rewrite_to_cache_gathered without the cache: each token's first `rewrite` 16-byte vectors of rows read and
// written back after its table row arrived (the in-place QK-norm + RoPE's bytes and dependency).
void rewrite_gathered(jitkern::TensorView rows, jitkern::TensorView positions, jitkern::TensorView table, int64_t rewrite, int64_t flip) {
  launch_gathered(rows, nullptr, positions, table, rewrite, 0, flip);
}

// Triggers after its wait, as the wide-row norm kernels do.
template <int kReductions>
__global__ void __launch_bounds__(kCopyCeilingThreads) rewrite_rows_kernel(uint4* buf, int64_t row_vecs, uint32_t flip) {
  uint4* row = buf + int64_t{blockIdx.x} * row_vecs;
  device::pdl_wait_primary();
  device::pdl_trigger_secondary();
  uint4 v[kRewriteRowsVecs];
#pragma unroll
  for (int k = 0; k < kRewriteRowsVecs; ++k) v[k] = row[k * blockDim.x + threadIdx.x];
  float stat = 0.0f;  // a value of the whole row that the stores depend on
  if constexpr (kReductions >= 1) {
    float part = 0.0f;
#pragma unroll
    for (int k = 0; k < kRewriteRowsVecs; ++k) part += static_cast<float>(v[k].x & 0xffu);
    stat = device::cta::reduce_sum_once(part);
    if constexpr (kReductions >= 2) stat = device::cta::reduce_max_nonnegative_once(fabsf(stat - static_cast<float>(v[0].y & 0xffu)));
  }
  const uint32_t f = stat != -1.0f ? flip : 0u;  // always flip; the compiler cannot know
#pragma unroll
  for (int k = 0; k < kRewriteRowsVecs; ++k) {
    v[k].x ^= f;
    row[k * blockDim.x + threadIdx.x] = v[k];
  }
}

// buf: int32 [rows, width] contiguous (width / 16 threads of four vectors per row); every row read and written back XORed with `flip`, after `reductions` (0-2) CTA-wide
// reductions the stores depend on.
void rewrite_rows(jitkern::TensorView buf, int64_t reductions, int64_t flip) {
  using namespace host;
  SymbolicSize rows{"rows"}, width{"width"};
  SymbolicDevice device;
  TensorMatcher({rows, width}).with_dtype<int32_t>().with_device<kDLCUDA>(device).verify(buf);
  const int64_t row_vecs = width.unwrap() / 4;
  RuntimeCheck(width.unwrap() % 512 == 0 && width.unwrap() <= 16 * kCopyCeilingThreads,  // whole warps of four vectors a thread
               "rewrite_rows: width must be a multiple of 512 int32 words, at most ", 16 * kCopyCeilingThreads, ", got ", width.unwrap());
  RuntimeCheck(reductions >= 0 && reductions <= 2, "rewrite_rows: reductions must be 0, 1 or 2, got ", reductions);
  RuntimeCheck(reinterpret_cast<uintptr_t>(buf.data_ptr()) % 16 == 0, "rewrite_rows: buf must be 16-byte aligned");
  if (rows.unwrap() == 0) return;
  LaunchKernel launch(static_cast<unsigned>(rows.unwrap()), static_cast<unsigned>(row_vecs / kRewriteRowsVecs), device.unwrap());
  launch.enable_pdl();
  auto* p = static_cast<uint4*>(buf.data_ptr());
  if (reductions == 0) launch(rewrite_rows_kernel<0>, p, row_vecs, static_cast<uint32_t>(flip));
  if (reductions == 1) launch(rewrite_rows_kernel<1>, p, row_vecs, static_cast<uint32_t>(flip));
  if (reductions == 2) launch(rewrite_rows_kernel<2>, p, row_vecs, static_cast<uint32_t>(flip));
}

}  // namespace
