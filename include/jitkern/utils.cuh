// Host-side CUDA launching for kernel authors: LaunchKernel (current-stream aware, PDL capable,
// errors reported at the launch site) and RuntimeDeviceCheck; device-side PDL helpers, load_as/store_as.
//
// The fp16/bf16/fp8 element types live in <jitkern/type.cuh>, not here: CUDA's half-precision headers
// add about 0.9 s to every nvcc compile (docs/benchmarks.md, "Design measurements").
#pragma once

#include <cuda_runtime.h>
#include <jitkern/ptx.cuh>
#include <jitkern/utils.h>
#include <tvm/ffi/extra/c_env_api.h>

#include <cstddef>
#include <cstdint>

namespace device {
// Programmatic dependent launch (sm_90+): let the next kernel in the stream start its prologue
// early, and wait for the previous kernel's memory before touching it. No-ops below sm_90.
JITKERN_DEVICE void pdl_wait_primary() { ptx::griddepcontrol_wait(); }
JITKERN_DEVICE void pdl_trigger_secondary() { ptx::griddepcontrol_launch_dependents(); }
// Reinterpret memory as T for one aligned load/store (e.g. 16-byte vector access).
template <typename T>
JITKERN_DEVICE T load_as(const void* ptr) {
  return *static_cast<const T*>(ptr);
}
template <typename T>
JITKERN_DEVICE void store_as(void* ptr, const T& value) {
  *static_cast<T*>(ptr) = value;
}

}  // namespace device

namespace host {
// PDL trigger placement for kernels launched back to back: triggering at kernel start lets the next
// launch start earliest, but queued launches then crowd the SMs, which slows grids of more than a few
// CTAs (rmsnorm [32, 4096] in a CUDA graph of 2000 launches: 1.87 us triggering at start, 1.32 after the
// wait; docs/benchmarks.md, "Design measurements"). Grids of at most kPdlEarlyTriggerMaxCtas CTAs
// trigger at start, larger ones after their wait.
inline constexpr int64_t kPdlEarlyTriggerMaxCtas = 8;
inline bool pdl_early_trigger(int64_t grid) { return grid <= kPdlEarlyTriggerMaxCtas; }
}  // namespace host

namespace host {

// The runtime also keeps a failed call's error as the thread's last error; it is cleared before raising,
// or the caller's next CUDA operation (a torch kernel's launch check) would fail with it.
inline void RuntimeDeviceCheck(cudaError_t error, DebugInfo where = {}) {
  if (error != cudaSuccess) [[unlikely]] {
    (void)cudaGetLastError();
    detail::panic_with(where, "CUDA error", cudaGetErrorName(error), ": ", cudaGetErrorString(error));
  }
}
inline void RuntimeDeviceCheck(DebugInfo where = {}) { RuntimeDeviceCheck(cudaGetLastError(), where); }

class LaunchKernel {
 public:
  // Launch on the caller's current stream for `device` (torch's current stream when called from
  // Python through tvm-ffi, so stream contexts and CUDA-graph capture work).
  LaunchKernel(dim3 grid, dim3 block, DLDevice device, std::size_t dynamic_smem = 0, DebugInfo where = {})
      : LaunchKernel(grid, block, resolve_device(device, where), dynamic_smem, where) {
    m_device_id = device.device_id;
  }
  LaunchKernel(dim3 grid, dim3 block, cudaStream_t stream, std::size_t dynamic_smem = 0, DebugInfo where = {})
      : m_where(where) {
    m_config.gridDim = grid;
    m_config.blockDim = block;
    m_config.dynamicSmemBytes = dynamic_smem;
    m_config.stream = stream;
    m_config.attrs = nullptr;
    m_config.numAttrs = 0;
  }

  // The stream tvm-ffi's caller registered for this device (null: the legacy default stream).
  static cudaStream_t resolve_device(DLDevice device, DebugInfo where = {}) {
    if (device.device_type != kDLCUDA && device.device_type != kDLCUDAManaged) [[unlikely]]
      detail::panic_with(where, "LaunchKernel", "expected a CUDA device, got device type ", static_cast<int>(device.device_type));
    return static_cast<cudaStream_t>(TVMFFIEnvGetStream(device.device_type, device.device_id));
  }

  // Programmatic dependent launch; the kernel should call device::pdl_wait_primary() before
  // reading what the previous kernel wrote.
  LaunchKernel& enable_pdl(bool enable = true) & { return m_pdl = enable, *this; }
  LaunchKernel&& enable_pdl(bool enable = true) && { return m_pdl = enable, static_cast<LaunchKernel&&>(*this); }

  template <typename... KernelArgs, typename... Args>
  void operator()(void (*kernel)(KernelArgs...), Args&&... args) const {
    cudaLaunchConfig_t config = m_config;
    cudaLaunchAttribute attr;
    if (m_pdl) {
      attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr.val.programmaticStreamSerializationAllowed = 1;
      config.attrs = &attr, config.numAttrs = 1;
    }
    int previous = -1;
    if (m_device_id >= 0) {  // the stream belongs to the tensor's device, which may not be current
      RuntimeDeviceCheck(cudaGetDevice(&previous), m_where);
      if (previous != m_device_id) RuntimeDeviceCheck(cudaSetDevice(m_device_id), m_where);
    }
    const cudaError_t status = cudaLaunchKernelEx(&config, kernel, static_cast<KernelArgs>(args)...);
    if (previous >= 0 && previous != m_device_id) cudaSetDevice(previous);
    RuntimeDeviceCheck(status, m_where);
  }

 private:
  cudaLaunchConfig_t m_config{};
  DebugInfo m_where;
  int m_device_id = -1;
  bool m_pdl = false;
};

}  // namespace host
