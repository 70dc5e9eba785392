// host::runtime: CUDA device queries, cached per device, errors checked: the device attributes
// (<jitkern/utils.cuh>, where LaunchKernel asks them) and the occupancy queries.
#pragma once

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles device code only

#include <jitkern/utils.cuh>

namespace host::runtime {

// Resident blocks per SM for `kernel` at this block size and dynamic shared memory.
template <typename Kernel>
inline int get_blocks_per_sm(Kernel kernel, int block_size, std::size_t dynamic_smem = 0, DebugInfo where = {}) {
  int blocks = 0;
  RuntimeDeviceCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel_handle(kernel, where), block_size, dynamic_smem), where);
  return blocks;
}

}  // namespace host::runtime
#endif  // __CUDACC_RTC__
