// The kernel the C++ example JIT-compiles: y = a * x + y on float32 CPU tensors.
#pragma once

#include <jitkern/tensor.h>

template <int kA>
void saxpy(jitkern::TensorView y, jitkern::TensorView x) {
  using namespace host;
  SymbolicSize n{"n"};
  TensorMatcher({n}).with_dtype<float>().with_device<kDLCPU>().verify(y).verify(x);
  auto* py = static_cast<float*>(y.data_ptr());
  const auto* px = static_cast<const float*>(x.data_ptr());
  for (auto i : irange(n.unwrap())) py[i] += kA * px[i];
}
