// AlignedVector<T, N>: N elements moved with one vector access (16 bytes; 32 bytes only on GPUs that
// have 256-bit loads, sm_100+); device::kVec16<T>, the kernels' vector width, and host::vector_width,
// the widest vector an operand set allows.
#pragma once

#ifdef SGL_KERNEL_VEC_CUH_
#error "<jitkern/vec.cuh> and <sgl_kernel/vec.cuh> define device::AlignedVector differently; include one per translation unit"
#endif
#define JITKERN_VEC_CUH_

#include <jitkern/utils.cuh>

#include <cstddef>
#include <cstdint>
#ifndef __CUDACC_RTC__
#include <initializer_list>
#endif

namespace device {

inline constexpr std::size_t kMaxVectorBytes =
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
    32;
#else
    16;
#endif

// Elements of T in one 16-byte access: the vector the kernels move where pointers and strides allow it
// (host and device agree on it, unlike kMaxVectorBytes, which the device pass alone sees per GPU).
template <typename T>
inline constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

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
  JITKERN_DEVICE void store(T* ptr) const { store_to<false>(ptr); }
  // The same where `ptr` points to global memory, which nvcc cannot always infer (pointers picked from
  // a parameter block at run time): ld.global/st.global instead of generic accesses.
  JITKERN_DEVICE void load_global(const T* ptr) {
    __builtin_assume(__isGlobal(ptr));
    load(ptr);
  }
  JITKERN_DEVICE void store_global(T* ptr) const { store_to<true>(ptr); }

 private:
  template <bool kGlobal>
  JITKERN_DEVICE void store_to(T* ptr) const {
    static_assert(sizeof(T) * N <= kMaxVectorBytes, "AlignedVector: wider than this GPU's vector stores");
    // 16 bytes go out as one st.v4.b32: nvcc split a plain struct copy of computed values into four
    // 4-byte stores (docs/benchmarks/design.md).
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
      if constexpr (kGlobal) {
        ptx::st_global_v4_b32(ptr, words[0], words[1], words[2], words[3]);
      } else {
        ptx::st_v4_b32(ptr, words[0], words[1], words[2], words[3]);
      }
    } else {
      if constexpr (kGlobal) __builtin_assume(__isGlobal(ptr));
      *reinterpret_cast<AlignedVector*>(ptr) = *this;
    }
  }

 public:
  JITKERN_DEVICE void fill(T value) {
#pragma unroll
    for (int i = 0; i < N; ++i) data[i] = value;
  }
};

}  // namespace device

#ifndef __CUDACC_RTC__
namespace host {
// One operand of a vector_width question: its base pointer (null: not used) and its elements' bytes.
struct VecOperand {
  template <typename E>
  VecOperand(const E* p) : ptr(p), elem_bytes(sizeof(E)) {}
  VecOperand(const void* p, int bytes) : ptr(p), elem_bytes(bytes) {}
  const void* ptr;
  int elem_bytes;
};

// The argument lists' types, named at calls in templates: nvcc's host pass (cudafe++) re-emits a bare braced
// argument there as `({...})`, which the host compiler reads as a statement expression.
using VecOperands = std::initializer_list<VecOperand>;
using RowStrides = std::initializer_list<int64_t>;

// `vec` elements per access where the row width, every operand's base (aligned to vec of its elements)
// and every row stride (in elements; 0 where a single row makes it irrelevant) allow it, else 1.
inline int vector_width(int vec, int64_t width, VecOperands operands, RowStrides strides) {
  if (width % vec != 0) return 1;
  for (const VecOperand& o : operands)
    if (o.ptr != nullptr && reinterpret_cast<uintptr_t>(o.ptr) % (static_cast<uintptr_t>(vec) * o.elem_bytes) != 0) return 1;
  for (int64_t s : strides)
    if (s % vec != 0) return 1;
  return vec;
}
}  // namespace host
#endif  // __CUDACC_RTC__
