// A driver API function by name through the runtime (no link against libcuda). Host code only.
#pragma once

#include <cuda_runtime_api.h>

namespace host::detail {

// The driver function `name` as introduced in CUDA `since_version` (e.g. 12000), or null where the runtime
// cannot give it: before CUDA 12.5, or with an older driver (that query's error is cleared, and a pending
// one with it). A driver call leaves the calling thread's last runtime error as it was.
[[gnu::visibility("hidden")]] inline void* driver_entry(const char* name, int since_version) {
#if CUDART_VERSION >= 12050
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &entry, since_version, cudaEnableDefault, &found) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return found == cudaDriverEntryPointSuccess ? entry : nullptr;
#else
  (void)name, (void)since_version;
  return nullptr;
#endif
}

}  // namespace host::detail
