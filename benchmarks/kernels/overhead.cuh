// Entry points that stop at successive stages of a kernel call, to attribute per-call host overhead:
// argument conversion only, + TensorMatcher, + stream lookup (the full launch is add_constant itself).
#pragma once

#include <jitkern/tensor.h>
#include <jitkern/utils.cuh>

inline void call_only(jitkern::TensorView, jitkern::TensorView) {}

inline void verify_only(jitkern::TensorView dst, jitkern::TensorView src) {
  using namespace host;
  SymbolicSize N{"num_elements"};
  SymbolicDevice device;
  TensorMatcher({N}).with_dtype<int32_t>().with_device<kDLCUDA>(device).verify(dst).verify(src);
}

inline int64_t verify_and_stream(jitkern::TensorView dst, jitkern::TensorView src) {
  using namespace host;
  SymbolicSize N{"num_elements"};
  SymbolicDevice device;
  TensorMatcher({N}).with_dtype<int32_t>().with_device<kDLCUDA>(device).verify(dst).verify(src);
  return reinterpret_cast<int64_t>(LaunchKernel::resolve_device(device.unwrap()));
}
