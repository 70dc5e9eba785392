// device::tile::Memory<T>: cooperative, bounds-checked element I/O for a thread, a warp or a CTA.
// Participant `rank` of `size` handles elements rank, rank + size, rank + 2*size, ... so that
// consecutive threads touch consecutive addresses (coalesced).
#pragma once

#include <jitkern/warp.cuh>

#include <cstdint>

namespace device::tile {

template <typename T>
struct Memory {
  int rank;
  int size;

  // Participant `rank` of `size`; any integer types (the reference framework passes uint32_t).
  template <typename R, typename S>
  JITKERN_DEVICE constexpr Memory(R rank, S size) : rank(static_cast<int>(rank)), size(static_cast<int>(size)) {}

  static JITKERN_DEVICE Memory thread() { return {0, 1}; }
  // `n` lanes per group (default: the whole warp).
  static JITKERN_DEVICE Memory warp(int n = kWarpThreads) { return {static_cast<int>(threadIdx.x % n), n}; }
  static JITKERN_DEVICE Memory cta() { return {threadIdx.x, blockDim.x}; }
  static JITKERN_DEVICE Memory cta(int n) { return {threadIdx.x, n}; }

  // dst[k] = src[rank + k * size] for k < N, or `fill` past the end `n`.
  template <int N>
  JITKERN_DEVICE void load(T (&dst)[N], const T* src, int64_t n, T fill = T{}) const {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int64_t i = rank + int64_t{k} * size;
      dst[k] = i < n ? src[i] : fill;
    }
  }
  template <int N>
  JITKERN_DEVICE void store(T* dst, const T (&src)[N], int64_t n) const {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int64_t i = rank + int64_t{k} * size;
      if (i < n) dst[i] = src[k];
    }
  }

  // One element, unchecked: element rank + k * size of `ptr` (the reference framework's form; pair
  // it with in_bound).
  JITKERN_DEVICE T load(const void* ptr, int64_t k = 0) const { return static_cast<const T*>(ptr)[rank + k * size]; }
  JITKERN_DEVICE void store(void* ptr, T value, int64_t k = 0) const { static_cast<T*>(ptr)[rank + k * size] = value; }
  JITKERN_DEVICE bool in_bound(int64_t count, int64_t k = 0) const { return rank + k * size < count; }
};

}  // namespace device::tile
