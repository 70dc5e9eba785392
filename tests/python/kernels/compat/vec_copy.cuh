// Reference-style vectorised copy: AlignedVector load/store with a vector offset (T* and void*),
// fill, operator[], data(); AlignedStorage's alignment. dst = src + 1 over n elements (n % kN == 0).
#pragma once

#include <sgl_kernel/tensor.h>
#include <sgl_kernel/utils.cuh>
#include <sgl_kernel/type.cuh>
#include <sgl_kernel/vec.cuh>

#include <cstdint>

static_assert(alignof(device::AlignedStorage<fp16_t, 8>) == 16 && sizeof(device::AlignedStorage<float, 4>) == 16);

template <typename T, std::size_t kN>
__global__ void compat_vec_add_one(void* dst, const T* src, int64_t num_vecs) {
  using namespace device;
  for (int64_t v = blockIdx.x * blockDim.x + threadIdx.x; v < num_vecs; v += gridDim.x * blockDim.x) {
    AlignedVector<T, kN> x, one;
    x.load(src, v);
    one.fill(dtype_trait<T>::from(1.0f));
    for (std::size_t i = 0; i < kN; ++i) x[i] = dtype_trait<T>::from(cast<float>(x.data()[i]) + cast<float>(one[i]));
    x.store(dst, v);
  }
}

template <typename T, std::size_t kN>
void compat_vec_add_one_run(tvm::ffi::TensorView dst, tvm::ffi::TensorView src) {
  using namespace host;
  auto n = SymbolicSize{"n"};
  auto device = SymbolicDevice{};
  TensorMatcher({n}).with_device<kDLCUDA>(device).with_dtype<T>().verify(dst).verify(src);
  RuntimeCheck(n.unwrap() % kN == 0, "n must be a multiple of ", kN);
  LaunchKernel(64, 128, device.unwrap())(compat_vec_add_one<T, kN>, dst.data_ptr(), static_cast<const T*>(src.data_ptr()),
                                         n.unwrap() / static_cast<int64_t>(kN));
}
