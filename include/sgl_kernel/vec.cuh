// <sgl_kernel/vec.cuh>: the reference framework's AlignedStorage and AlignedVector (size_t N, data(),
// load/store with a vector offset from T* or void*). jitkern's <jitkern/vec.cuh> has another
// device::AlignedVector (int N, a public data array); a translation unit includes one of the two.
#pragma once

#ifdef JITKERN_VEC_CUH_
#error "<sgl_kernel/vec.cuh> and <jitkern/vec.cuh> define device::AlignedVector differently; include one per translation unit"
#endif
#define SGL_KERNEL_VEC_CUH_

#include <sgl_kernel/utils.cuh>

#include <cstddef>
#include <type_traits>

namespace device {

template <typename T, std::size_t N>
struct alignas(sizeof(T) * N) AlignedStorage {
  T data[N];
};

template <typename T, std::size_t N>
struct AlignedVector {
  static_assert(N > 0 && (N & (N - 1)) == 0, "AlignedVector: N must be a power of two");
  static_assert(sizeof(T) * N <= 32, "AlignedVector: at most 32 bytes");

  // Vector `offset` (in units of N elements) of `ptr`, which must be aligned to sizeof(T) * N.
  template <typename U>
  SGL_DEVICE void load(const U* ptr, std::size_t offset = 0) {
    static_assert(std::is_same_v<U, T> || std::is_void_v<U>, "AlignedVector::load: from T* or void*");
    m_storage = static_cast<const AlignedStorage<T, N>*>(static_cast<const void*>(ptr))[offset];
  }
  template <typename U>
  SGL_DEVICE void store(U* ptr, std::size_t offset = 0) const {
    static_assert(std::is_same_v<U, T> || std::is_void_v<U>, "AlignedVector::store: to T* or void*");
    static_cast<AlignedStorage<T, N>*>(static_cast<void*>(ptr))[offset] = m_storage;
  }
  SGL_DEVICE void fill(T value) {
#pragma unroll
    for (std::size_t i = 0; i < N; ++i) m_storage.data[i] = value;
  }
  SGL_DEVICE T& operator[](std::size_t i) { return m_storage.data[i]; }
  SGL_DEVICE const T& operator[](std::size_t i) const { return m_storage.data[i]; }
  SGL_DEVICE T* data() { return m_storage.data; }
  SGL_DEVICE const T* data() const { return m_storage.data; }

 private:
  AlignedStorage<T, N> m_storage;
};

}  // namespace device
