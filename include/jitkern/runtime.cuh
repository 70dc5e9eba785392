// host::runtime: CUDA device queries, cached per device, errors checked.
#pragma once

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles device code only

#include <jitkern/utils.cuh>

namespace host::runtime {

namespace detail {
inline constexpr int kMaxDevices = 64;
template <cudaDeviceAttr kAttr>
inline int cached_attribute(int device, DebugInfo where) {
  static int cache[kMaxDevices] = {};  // 0 = unknown; every attribute used here is positive
  if (device < 0 || device >= kMaxDevices) Panic("host::runtime: device index ", device, " out of range");
  if (cache[device] == 0) {
    int value = 0;
    RuntimeDeviceCheck(cudaDeviceGetAttribute(&value, kAttr, device), where);
    cache[device] = value;
  }
  return cache[device];
}
inline int current_device(DebugInfo where) {
  int device = 0;
  RuntimeDeviceCheck(cudaGetDevice(&device), where);
  return device;
}
}  // namespace detail

inline int get_sm_count(int device = -1, DebugInfo where = {}) {
  return detail::cached_attribute<cudaDevAttrMultiProcessorCount>(device < 0 ? detail::current_device(where) : device, where);
}
inline int get_cc_major(int device = -1, DebugInfo where = {}) {
  return detail::cached_attribute<cudaDevAttrComputeCapabilityMajor>(device < 0 ? detail::current_device(where) : device, where);
}
// Largest dynamic shared memory a block may opt into (cudaFuncSetAttribute raises the 48 KB default).
inline int get_available_dynamic_smem_per_block(int device = -1, DebugInfo where = {}) {
  return detail::cached_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(device < 0 ? detail::current_device(where) : device,
                                                                           where);
}
inline int get_runtime_version(DebugInfo where = {}) {
  static int version = 0;
  if (version == 0) RuntimeDeviceCheck(cudaRuntimeGetVersion(&version), where);
  return version;
}
// Resident blocks per SM for `kernel` at this block size and dynamic shared memory.
template <typename Kernel>
inline int get_blocks_per_sm(Kernel kernel, int block_size, std::size_t dynamic_smem = 0, DebugInfo where = {}) {
  int blocks = 0;
  RuntimeDeviceCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel_handle(kernel, where), block_size, dynamic_smem), where);
  return blocks;
}

}  // namespace host::runtime
#endif  // __CUDACC_RTC__
