// Entry points that stop at successive stages of a kernel call, to attribute per-call host overhead:
// argument conversion only, + TensorMatcher, + stream lookup (the full launch is add_constant itself).
#pragma once

#include <jitkern/tensor.h>
#include <jitkern/tensor_alloc.h>
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

// The CUDA launch itself, without add_constant's work: an empty kernel through LaunchKernel, and
// through a bare <<<>>> on the same stream (what LaunchKernel's own bookkeeping costs).
__global__ void empty_kernel() {}
__global__ void empty_pdl_kernel() { device::pdl_wait_primary(); }

inline void launch_empty(jitkern::TensorView dst, jitkern::TensorView src) {
  verify_only(dst, src);
  host::LaunchKernel(1, 32, src.device())(empty_kernel);
}

// The same launch queued as a PDL secondary (what add_constant does on sm_90+).
inline void launch_empty_pdl(jitkern::TensorView dst, jitkern::TensorView src) {
  verify_only(dst, src);
  host::LaunchKernel(1, 32, src.device()).enable_pdl()(empty_pdl_kernel);
}

inline void launch_empty_bare(jitkern::TensorView dst, jitkern::TensorView src) {
  empty_kernel<<<1, 32, 0, reinterpret_cast<cudaStream_t>(verify_and_stream(dst, src))>>>();
}

// An output allocated in C++ through the caller's framework and returned (no kernel).
inline jitkern::Tensor allocate_only(jitkern::TensorView src) { return jitkern::Tensor::empty_like(src); }
