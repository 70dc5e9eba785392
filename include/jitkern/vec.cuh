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

namespace detail {
// Bits of one element as an unsigned integer of the same size.
template <typename T>
JITKERN_DEVICE unsigned int element_bits(const T& value) {
  if constexpr (sizeof(T) == 1) {
    unsigned char bits;
    __builtin_memcpy(&bits, &value, 1);
    return bits;
  } else if constexpr (sizeof(T) == 2) {
    unsigned short bits;
    __builtin_memcpy(&bits, &value, 2);
    return bits;
  } else {
    unsigned int bits;
    __builtin_memcpy(&bits, &value, 4);
    return bits;
  }
}
}  // namespace detail

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
    // 16 bytes are packed into four 32-bit words and stored by one instruction: a plain struct copy
    // of computed values was split by the compiler (nvcc 13.0, sm_90a: AlignedVector<bf16_t, 8> in
    // the narrow norm kernel became four 4-byte STG in SASS). Measured on H100: qknorm T = 256
    // 2.12 -> 1.89 us, T = 1024 5.39 -> 5.03 us (docs/benchmarks.md). A generic-address store, so
    // shared memory works too; the "memory" clobber keeps it ordered with other accesses.
    if constexpr (sizeof(T) * N == 16 && sizeof(T) <= 4) {
      constexpr int kPerWord = 4 / sizeof(T);
      unsigned int words[4];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        unsigned int bits = 0;
#pragma unroll
        for (int e = 0; e < kPerWord; ++e) bits |= detail::element_bits(data[w * kPerWord + e]) << (8 * sizeof(T) * e);
        words[w] = bits;
      }
      asm volatile("st.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(words[0]), "r"(words[1]), "r"(words[2]), "r"(words[3])
                   : "memory");
    } else {
      *reinterpret_cast<AlignedVector*>(ptr) = *this;
    }
  }
  JITKERN_DEVICE void fill(T value) {
#pragma unroll
    for (int i = 0; i < N; ++i) data[i] = value;
  }
};

}  // namespace device
