// add_constant for int32 CPU tensors: the same operation as add_constant.cuh, built with the host
// compiler through the same engine (the demo uses it on machines without a GPU).
#pragma once

#include <jitkern/tensor.h>
#include <jitkern/utils.h>

#include <cstdint>

template <int32_t kConstant>
void add_constant_cpu(jitkern::TensorView dst, jitkern::TensorView src) {
  using namespace host;
  SymbolicSize N{"num_elements"};
  TensorMatcher({N}).with_dtype<int32_t>().with_device<kDLCPU>().verify(dst).verify(src);
  auto* out = static_cast<int32_t*>(dst.data_ptr());
  const auto* in = static_cast<const int32_t*>(src.data_ptr());
  for (auto i : irange(N.unwrap()))  // wraps on overflow, like torch
    out[i] = static_cast<int32_t>(static_cast<uint32_t>(in[i]) + static_cast<uint32_t>(kConstant));
}
