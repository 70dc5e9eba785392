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

  static JITKERN_DEVICE Memory thread() { return {0, 1}; }
  static JITKERN_DEVICE Memory warp() { return {static_cast<int>(threadIdx.x % kWarpThreads), kWarpThreads}; }
  static JITKERN_DEVICE Memory cta() { return {static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)}; }

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
};

}  // namespace device::tile
