// Reference-style elementwise kernel: TensorMatcher, SymbolicSize/SymbolicDevice, LaunchKernel on a DLDevice.
#pragma once

#include <sgl_kernel/tensor.h>
#include <sgl_kernel/utils.cuh>
#include <sgl_kernel/utils.h>

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>

template <int32_t kConstant>
__global__ void compat_add_constant_kernel(int32_t* dst, const int32_t* src, size_t length) {
  const size_t idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx < length) dst[idx] = src[idx] + kConstant;
}

template <int32_t kConstant>
void compat_add_constant(tvm::ffi::TensorView dst, tvm::ffi::TensorView src) {
  using namespace host;
  SymbolicSize N = {"num_elements"};
  SymbolicDevice device_;
  TensorMatcher({N}).with_dtype<int32_t>().with_device<kDLCUDA>(device_).verify(dst).verify(src);
  const size_t n = N.unwrap();
  RuntimeCheck(n > 0, "empty input, num_elements = ", n);
  constexpr size_t kBlock = 256;
  LaunchKernel(div_ceil(n, kBlock), kBlock, device_.unwrap())(compat_add_constant_kernel<kConstant>, static_cast<int32_t*>(dst.data_ptr()),
                                                               static_cast<const int32_t*>(src.data_ptr()), n);
}
