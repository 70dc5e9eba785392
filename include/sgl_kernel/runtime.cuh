// <sgl_kernel/runtime.cuh>: jitkern's host::runtime queries, plus the reference's occupancy form of
// get_available_dynamic_smem_per_block.
#pragma once

#include <jitkern/runtime.cuh>

#include <cstddef>

namespace host::runtime {
// Dynamic shared memory per block left when `num_blocks` blocks of `block_size` threads of `kernel`
// share an SM (an occupancy query on the kernel; the one-argument form is the device's opt-in limit).
template <typename Kernel>
inline std::size_t get_available_dynamic_smem_per_block(Kernel kernel, int num_blocks, int block_size, DebugInfo where = {}) {
  std::size_t bytes = 0;
  RuntimeDeviceCheck(cudaOccupancyAvailableDynamicSMemPerBlock(&bytes, kernel, num_blocks, block_size), where);
  return bytes;
}
}  // namespace host::runtime
