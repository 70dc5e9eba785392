// out = in * FACTOR, where FACTOR comes from an included header or a -D flag (engine tests edit both).
#pragma once

#include <jitkern/tensor.h>

#include "factor_value.h"

inline void apply_factor(jitkern::TensorView out, jitkern::TensorView in) {
  using namespace host;
  SymbolicSize n{"n"};
  TensorMatcher({n}).with_dtype<float>().with_device<kDLCPU>().verify(out).verify(in);
  auto* dst = static_cast<float*>(out.data_ptr());
  const auto* src = static_cast<const float*>(in.data_ptr());
  for (auto i : irange(n.unwrap())) dst[i] = src[i] * FACTOR;
}
