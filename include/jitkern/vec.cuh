// AlignedVector<T, N>: N elements moved with one vector access (16 bytes; 32 bytes only on GPUs that
// have 256-bit loads, sm_100+).
#pragma once

#include <jitkern/utils.cuh>

#include <cstddef>

namespace device {

inline constexpr std::size_t kMaxVectorBytes =
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
    32;
#else
    16;
#endif

template <typename T, int N>
struct alignas(sizeof(T) * N) AlignedVector {
  static_assert(N > 0 && (N & (N - 1)) == 0, "AlignedVector: N must be a power of two");
  static constexpr int kSize = N;
  T data[N];

  JITKERN_DEVICE T& operator[](int i) { return data[i]; }
  JITKERN_DEVICE const T& operator[](int i) const { return data[i]; }

  // `ptr` must be aligned to sizeof(T) * N.
  JITKERN_DEVICE void load(const T* ptr) {
    static_assert(sizeof(T) * N <= kMaxVectorBytes, "AlignedVector: wider than this GPU's vector loads");
    *this = *reinterpret_cast<const AlignedVector*>(ptr);
  }
  JITKERN_DEVICE void store(T* ptr) const {
    static_assert(sizeof(T) * N <= kMaxVectorBytes, "AlignedVector: wider than this GPU's vector stores");
    *reinterpret_cast<AlignedVector*>(ptr) = *this;
  }
  JITKERN_DEVICE void fill(T value) {
#pragma unroll
    for (int i = 0; i < N; ++i) data[i] = value;
  }
};

}  // namespace device
