// add_constant written against tvm-ffi's C++ TensorView (as the reference guide writes kernels), for
// the compile-time and per-call comparisons: the same device code and validation as
// csrc/add_constant.cuh, but the translation unit parses tvm-ffi's C++ headers, and the kernel is
// launched as the tutorial launches it (no PDL attribute).
#pragma once

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>

#include "../../csrc/add_constant.cuh"

template <int32_t kConstant>
void add_constant_tvm(tvm::ffi::TensorView dst, tvm::ffi::TensorView src) {
  using namespace host;
  SymbolicSize N{"num_elements"};
  SymbolicDevice device;
  TensorMatcher({N}).with_dtype<int32_t>().with_device<kDLCUDA>(device).verify(dst).verify(src);
  launch_add_constant<kConstant>(static_cast<int32_t*>(dst.data_ptr()), static_cast<const int32_t*>(src.data_ptr()), N.unwrap(),
                                 device.unwrap(), /*pdl=*/false);
}
