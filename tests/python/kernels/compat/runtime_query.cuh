// Reference-style runtime queries: host::runtime::get_sm_count, get_cc_major, get_runtime_version,
// get_blocks_per_sm, and the occupancy form of get_available_dynamic_smem_per_block.
#pragma once

#include <sgl_kernel/runtime.cuh>
#include <sgl_kernel/utils.cuh>

#include <cstdint>

__global__ void compat_empty_kernel() {}

// Which query (0..4) for device `device_id`: the test compares with torch.cuda's properties.
inline int64_t compat_runtime(int64_t which, int64_t device_id) {
  using namespace host::runtime;
  switch (which) {
    case 0: return get_sm_count(static_cast<int>(device_id));
    case 1: return get_cc_major(static_cast<int>(device_id));
    case 2: return get_runtime_version();
    case 3: return get_blocks_per_sm(compat_empty_kernel, 1024);
    default: return static_cast<int64_t>(get_available_dynamic_smem_per_block(compat_empty_kernel, 1, 128));
  }
}
