// KV-cache rows, shared by the families that write them (RoPE's fused cache write, csrc/rope.cuh; the KV
// row copies, csrc/kv_rows.cuh):
//   device::kv_cache::CacheLayout  where row `slot` of a flat or paged cache starts (CachePlace: its page
//                                  and offset);
//   device::kv_cache::Divisor      a quotient by a multiply, 64-bit (Divisor32: 32-bit; host::kv_cache::divisor
//                                  makes one);
//   device::kv_cache::load_index   index i of an int32 or int64 array (positions, cache locations);
//   host::kv_cache::cache_layout   a cache tensor checked and seen as a CacheLayout; row_is_compact,
//                                  check_same_shape, all_multiples (the byte alignment rule), address,
//                                  stride_of.
#pragma once

#include <jitkern/utils.cuh>
#ifndef __CUDACC_RTC__
#include <jitkern/tensor.h>
#endif

#include <cstdint>
#ifndef __CUDACC_RTC__
#include <initializer_list>
#endif

namespace device::kv_cache {

// n / d by a multiply: the high half of n * floor((2^bits - 1) / d) is the quotient or one less (n < 2^bits),
// so one correction: branches on the page size and a 64-bit division cost RoPE's fused cache write
// 0.13-0.24 us a decode step (H100, T = 1-64, docs/benchmarks/rope.md). U: uint64_t, or uint32_t where
// every quotient fits (a multiply-high and three instructions).
template <typename U>
struct BasicDivisor {
  U d;      // >= 1
  U magic;  // floor((2^bits - 1) / d)
  __device__ __forceinline__ U divide(U n, U& remainder) const {
    U q;
    if constexpr (sizeof(U) == 8) q = __umul64hi(n, magic);
    else q = __umulhi(n, magic);
    U r = n - q * d;
    if (r >= d) ++q, r -= d;
    remainder = r;
    return q;
  }
};
using Divisor = BasicDivisor<uint64_t>;
using Divisor32 = BasicDivisor<uint32_t>;

// A slot's page and its offset in the page (flat caches: the slot and 0).
struct CachePlace {
  int64_t page, offset;
};

// Where row `slot` of a KV cache starts, in bytes: flat [slots, *row] or paged [pages, page_size, *row]
// (slot = page * page_size + offset in the page).
struct CacheLayout {
  char* base;
  int64_t page_stride;  // bytes from one page to the next (flat: one row to the next)
  int64_t row_stride;   // bytes from one row of a page to the next
  Divisor page_size;    // 1 when flat
  int64_t slots;        // locations outside [0, slots) are skipped

  // Checked where the row is first needed, not where the location loads: a check at the load makes the
  // warp wait for it before issuing the loads that follow (H200, T = 1: fused write 1.87 -> 1.80 us,
  // store_cache 1.29 -> 1.08).
  __device__ __forceinline__ bool holds(int64_t slot) const { return slot >= 0 && slot < slots; }

  // slot in [0, slots). One branch-free path for every layout.
  __device__ __forceinline__ char* row(int64_t slot) const { return at(place(slot)); }

  // row() in two steps, so that caches of one page size (k and v) divide once: the slot's page and its
  // place in the page (slot in [0, slots)), and the row at such a place.
  __device__ __forceinline__ CachePlace place(int64_t slot) const {
    uint64_t offset;
    const uint64_t page = page_size.divide(static_cast<uint64_t>(slot), offset);
    return {static_cast<int64_t>(page), static_cast<int64_t>(offset)};
  }
  __device__ __forceinline__ char* at(CachePlace p) const { return base + p.page * page_stride + p.offset * row_stride; }
};

// Index i of an int32 or int64 array: its address, and the value there.
__device__ __forceinline__ const void* index_address(const void* ptr, bool wide, int64_t i) {
  return static_cast<const char*>(ptr) + (i << (wide ? 3 : 2));
}
__device__ __forceinline__ int64_t load_index_at(const void* at, bool wide) {
  return wide ? *static_cast<const int64_t*>(at) : static_cast<int64_t>(*static_cast<const int32_t*>(at));
}
__device__ __forceinline__ int64_t load_index(const void* ptr, bool wide, int64_t i) { return load_index_at(index_address(ptr, wide, i), wide); }

}  // namespace device::kv_cache

#ifndef __CUDACC_RTC__  // host code
namespace host::kv_cache {

// A size-1 dimension leaves its stride symbol unresolved when nothing else fixes it: 0 then.
inline int64_t stride_of(const host::SymbolicSize& s) { return s.has_value() ? s.unwrap() : 0; }

// Whether the dimensions from `first` on are contiguous (size-1 dimensions may have any stride).
inline bool row_is_compact(jitkern::TensorView t, int first) {
  int64_t expected = 1;
  for (int d = t.dim() - 1; d >= first; --d) {
    if (t.size(d) != 1 && t.stride(d) != expected) return false;
    expected *= t.size(d);
  }
  return true;
}

template <typename U = uint64_t>
inline device::kv_cache::BasicDivisor<U> divisor(int64_t d) { return {static_cast<U>(d), static_cast<U>(~U{0} / static_cast<U>(d))}; }

// `cache` (dtype checked by the caller) as rows of `row_elems` contiguous elements on `device`: flat
// [slots, *row] when its dimensions after the first hold one row, else paged [pages, page_size, *row].
inline device::kv_cache::CacheLayout cache_layout(jitkern::TensorView cache, int64_t row_elems, int device, const char* name) {
  using namespace host;
  RuntimeCheck(cache.device().device_type == kDLCUDA && cache.device().device_id == device, name, " must be on cuda:", device, ", got ",
               cache.device());
  const auto elems_from = [&](int first) {
    int64_t n = 1;
    for (int d = first; d < cache.dim(); ++d) n *= cache.size(d);
    return n;
  };
  int first = 0;
  if (cache.dim() >= 2 && elems_from(1) == row_elems) first = 1;
  else if (cache.dim() >= 3 && elems_from(2) == row_elems) first = 2;
  RuntimeCheck(first > 0, name, " must be [slots, *row] or [pages, page_size, *row] with rows of ", row_elems, " elements; its ",
               cache.dim(), " dimensions hold ", elems_from(1), " elements after the first");
  RuntimeCheck(row_is_compact(cache, first), name, ": each row (the dimensions after the first ", first, ") must be contiguous");
  if (first == 2) {
    check_disjoint(Extents{cache.size(0), cache.size(1), row_elems}, Extents{cache.stride(0), cache.stride(1), 1}, name);
  } else {
    check_disjoint(Extents{cache.size(0), row_elems}, Extents{cache.stride(0), 1}, name);
  }
  const int64_t elem = static_cast<int64_t>(dtype_bytes(cache.dtype()));
  device::kv_cache::CacheLayout c{};
  c.base = static_cast<char*>(cache.data_ptr());
  const int64_t page_size = first == 2 ? cache.size(1) : 1;
  c.page_size = divisor(host::max<int64_t>(page_size, 1));  // [pages, 0, *row]: no slots
  c.page_stride = cache.stride(0) * elem;
  c.row_stride = first == 2 ? cache.stride(1) * elem : c.page_stride;
  c.slots = cache.size(0) * page_size;
  return c;
}

inline void check_same_shape(jitkern::TensorView a, jitkern::TensorView b, const char* a_name, const char* b_name) {
  host::RuntimeCheck(a.dim() == b.dim(), b_name, " must have ", a_name, "'s shape: ", b.dim(), " dimensions, not ", a.dim());
  for (int d = 0; d < a.dim(); ++d)
    host::RuntimeCheck(a.size(d) == b.size(d), b_name, " must have ", a_name, "'s shape: dimension ", d, " is ", b.size(d), ", not ", a.size(d));
}

// Whether every byte quantity (addresses, strides) is a multiple of `bytes`.
inline bool all_multiples(std::initializer_list<int64_t> quantities, int64_t bytes) {
  for (int64_t q : quantities)
    if (q % bytes != 0) return false;
  return true;
}

inline int64_t address(const void* p) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p)); }

}  // namespace host::kv_cache
#endif  // __CUDACC_RTC__
