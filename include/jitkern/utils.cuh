// Host-side CUDA launching for kernel authors: LaunchKernel (current-stream aware, PDL capable,
// errors reported at the launch site) and RuntimeDeviceCheck; device-side PDL helpers, load_as/store_as.
//
// The fp16/bf16/fp8 element types live in <jitkern/type.cuh>, not here: CUDA's half-precision headers
// add about 0.9 s to every nvcc compile (docs/benchmarks/design.md).
//
// A module built with host_without_nvcc compiles this file twice: nvcc makes its kernels (__CUDACC__
// defined), the host compiler alone its host code, where a kernel is a stub whose symbol (the
// kernel's mangled name) LaunchKernel looks the kernel up by in the module's device image.
#pragma once

#if defined(__CUDACC_RTC__)
// NVRTC: the device code below only.
#elif defined(__CUDACC__)
#include <cuda_runtime.h>
#else
#include <cuda_runtime_api.h>
#include <jitkern/detail/host_pass.h>
#include <jitkern/detail/kernel_image.h>
// A stub per kernel, never inlined, merged or cloned: its symbol names the kernel. Internal visibility
// (local in the module, as hidden) marks the stubs in the host pass's object, where the engine finds
// the kernels to give NVRTC (JITKERN_DEVICE_COMPILER=nvrtc).
#undef __global__
#if defined(__clang__)
#define __global__ __attribute__((noinline))
#else
#define __global__ __attribute__((noipa, visibility("internal")))
#endif
#endif
#include <jitkern/ptx.cuh>
#ifndef __CUDACC_RTC__
#include <jitkern/utils.h>
#include <tvm/ffi/extra/c_env_api.h>

#include <new>  // std::nothrow
#endif

#include <cstddef>
#include <cstdint>

namespace device {
// Programmatic dependent launch (sm_90+): let the next kernel in the stream start its prologue
// early, and wait for the previous kernel's memory before touching it. No-ops below sm_90.
JITKERN_DEVICE void pdl_wait_primary() { ptx::griddepcontrol_wait(); }
JITKERN_DEVICE void pdl_trigger_secondary() { ptx::griddepcontrol_launch_dependents(); }
// Where a kernel whose launch picks it (host::pdl_trigger_for) triggers the next launch.
enum class PdlTrigger : int { kStart, kAfterWait, kAfterStores };
// The trigger, where `place` is the one `trigger` names.
JITKERN_DEVICE void pdl_trigger_at(PdlTrigger trigger, PdlTrigger place) {
  if (trigger == place) pdl_trigger_secondary();
}
// pdl_wait_primary(), then the trigger where it is placed after the wait.
JITKERN_DEVICE void pdl_wait_primary(PdlTrigger trigger) {
  pdl_wait_primary();
  pdl_trigger_at(trigger, PdlTrigger::kAfterWait);
}
// Called before pdl_wait_primary() with an address of global memory the kernel reads after it: the
// address is then worked out before the wait, where it overlaps the kernel before (ptxas otherwise moves
// address arithmetic after the wait, next to the load), and L2 is asked for its line. Safe on memory the
// kernel before still writes: L2 is where those writes land. Nothing below sm_90, whose wait is a no-op.
JITKERN_DEVICE void prefetch_before_wait(const void* ptr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ptx::prefetch_global_l2(ptr);
#else
  (void)ptr;
#endif
}
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

#ifndef __CUDACC_RTC__
namespace host {
// PDL trigger placement for kernels launched back to back: triggering at kernel start lets the next
// launch start earliest, but queued launches then crowd the SMs, which slows grids of more than a few
// CTAs (rmsnorm [32, 4096] in a CUDA graph of 2000 launches: 1.87 us triggering at start, 1.32 after the
// wait; docs/benchmarks/design.md). Grids of at most kPdlEarlyTriggerMaxCtas CTAs
// trigger at start, larger ones after their wait.
inline constexpr int64_t kPdlEarlyTriggerMaxCtas = 8;
inline bool pdl_early_trigger(int64_t grid) { return grid <= kPdlEarlyTriggerMaxCtas; }
// Grids of more than kPdlLateTriggerThreadsPerSm threads per SM that the SMs still hold at once (at most
// `threads_per_sm`, host::RowPolicy's) trigger late, after their last store or once the data their stores
// need has arrived: the next launch's CTAs, queued beside them earlier, slow them down (H200, back to back in
// a CUDA graph: store_cache 1024 tokens of 8 x 128 bf16 1.71 us against 2.07 after the wait, fp8 group
// quantization [256, 7168] bf16 2.13 against 2.34; at 256 / 16 tokens, 32768 / 7168 threads, after the wait
// was the faster, and so at [4096, 7168], several waves: 22.0 against 22.4).
inline constexpr int64_t kPdlLateTriggerThreadsPerSm = 256;
inline bool pdl_late_trigger(int64_t threads, int64_t sm_count, int64_t threads_per_sm) {
  return threads > kPdlLateTriggerThreadsPerSm * sm_count && threads <= threads_per_sm * sm_count;
}
// The trigger of a grid of `ctas` CTAs of `cta_threads`: at the start of a few CTAs (pdl_early_trigger), after the
// stores of one wave of many threads per SM (pdl_late_trigger), else after the wait.
inline device::PdlTrigger pdl_trigger_for(int64_t ctas, int64_t cta_threads, int64_t sm_count, int64_t threads_per_sm) {
  if (pdl_early_trigger(ctas)) return device::PdlTrigger::kStart;
  if (pdl_late_trigger(ctas * cta_threads, sm_count, threads_per_sm)) return device::PdlTrigger::kAfterStores;
  return device::PdlTrigger::kAfterWait;
}
}  // namespace host

namespace host {

// A module built in several device passes at once (JitSpec's device_parts = N: its first call waits for
// the longest pass, not their sum) compiles in pass k the kernels that its launch code names under
// `if constexpr (host::in_device_part(p))` for the p with p % N == k, and those named outside any such
// test in every pass. It must be a template's code (else the other passes instantiate them too); the host
// pass, NVRTC and a module built in one pass see every branch.
constexpr bool in_device_part(int part) {
#ifdef JITKERN_DEVICE_PART
  return part % JITKERN_DEVICE_PARTS == JITKERN_DEVICE_PART;
#else
  return part >= 0;
#endif
}

// The runtime also keeps a failed call's error as the thread's last error; it is cleared before raising,
// or the caller's next CUDA operation (a torch kernel's launch check) would fail with it.
inline void RuntimeDeviceCheck(cudaError_t error, DebugInfo where = {}) {
  if (error != cudaSuccess) [[unlikely]] {
    (void)cudaGetLastError();
    detail::panic_with(where, "CUDA error", cudaGetErrorName(error), ": ", cudaGetErrorString(error));
  }
}
inline void RuntimeDeviceCheck(DebugInfo where = {}) { RuntimeDeviceCheck(cudaGetLastError(), where); }

// host::runtime: CUDA device queries, cached per device, errors checked (LaunchKernel asks the capability
// for PDL, so they live here; <jitkern/runtime.cuh> adds the occupancy queries).
namespace runtime {
namespace detail {
inline constexpr int kMaxDevices = 64;
template <cudaDeviceAttr kAttr>
inline int cached_attribute(int device, DebugInfo where) {
  static int cache[kMaxDevices] = {};  // value + 1; 0 = unknown
  if (device < 0 || device >= kMaxDevices) Panic("host::runtime: device index ", device, " out of range");
  if (cache[device] == 0) {
    int value = 0;
    RuntimeDeviceCheck(cudaDeviceGetAttribute(&value, kAttr, device), where);
    cache[device] = value + 1;
  }
  return cache[device] - 1;
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
inline int get_cc_minor(int device = -1, DebugInfo where = {}) {
  return detail::cached_attribute<cudaDevAttrComputeCapabilityMinor>(device < 0 ? detail::current_device(where) : device, where);
}
// The compute capability as one number, major * 10 + minor (90 for sm_90): what host::policy_for takes.
inline int get_arch(int device = -1, DebugInfo where = {}) {
  if (device < 0) device = detail::current_device(where);
  return get_cc_major(device, where) * 10 + get_cc_minor(device, where);
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
// Programmatic dependent launch needs sm_90 or newer.
inline bool has_pdl(int device = -1, DebugInfo where = {}) { return get_cc_major(device, where) >= 9; }
}  // namespace runtime

// Makes `device` current for the guard's lifetime and then restores the device that was current (no
// switch where it is current already; a negative device leaves the current one as it is).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device, DebugInfo where = {}) : DeviceGuard(device, std::nothrow) { RuntimeDeviceCheck(m_status, where); }
  // For code that must not throw (a watchdog thread): the switch's outcome is status().
  DeviceGuard(int device, const std::nothrow_t&) noexcept : m_device(device) {
    if (device < 0) return;
    m_status = cudaGetDevice(&m_previous);
    if (m_status == cudaSuccess && m_previous != device) m_status = cudaSetDevice(device);
  }
  ~DeviceGuard() {
    // A destructor cannot raise: a failed switch back leaves no last error for the caller's next launch check.
    if (m_previous >= 0 && m_previous != m_device && cudaSetDevice(m_previous) != cudaSuccess) (void)cudaGetLastError();
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t status() const noexcept { return m_status; }

 private:
  int m_device, m_previous = -1;
  cudaError_t m_status = cudaSuccess;
};

#ifndef __CUDACC__
namespace detail {
// Refuses a kernel whose parameters, as its device code lays them out, differ in size from what the host
// code passes (`sizes`, `count` of them): a type the two passes see differently (a member under
// #ifdef __CUDACC__) would otherwise launch with bytes of the wrong layout. (A different count fails
// nvcc's compile of the launch.) A runtime that cannot tell lets it pass.
[[gnu::visibility("hidden")]] inline void check_parameters(cudaKernel_t kernel, const char* name, const std::size_t* sizes, std::size_t count,
                                                         DebugInfo where) {
  const DriverKernelGetParamInfo driver_info = driver_kernel_get_param_info();  // (kernel_image.h: why the driver's)
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t offset = 0, size = 0;
    const cudaError_t status = driver_info != nullptr ? static_cast<cudaError_t>(driver_info(kernel, i, &offset, &size))
                                                      : cudaFuncGetParamInfo(reinterpret_cast<const void*>(kernel), i, &offset, &size);
    if (status != cudaSuccess) {
      if (driver_info == nullptr) (void)cudaGetLastError();
      return;
    }
    if (size != sizes[i])
      panic_with(where, "LaunchKernel", "kernel ", name, ": parameter ", i, " is ", size, " bytes in its device code but ", sizes[i],
                 " in the host code: a type the two passes see differently (a member under #ifdef __CUDACC__?)");
  }
}

// The kernel that `stub` stands for (kernel_image.h), found once per stub, its parameters checked
// against `sizes` (check_parameters).
[[gnu::visibility("hidden")]] inline const void* kernel_in_image(const void* stub, const std::size_t* sizes, std::size_t count, DebugInfo where) {
  return kernel_for_stub(stub, [&](const void* s) -> const void* {
    char* name = nullptr;
    const char* why = nullptr;
    cudaError_t status = cudaSuccess;
    const cudaKernel_t kernel = find_in_image(s, &name, &status, &why);
    struct Freed {
      ~Freed() { std::free(p); }
      char* p;
    } freed{name};
    if (name == nullptr) panic_with(where, "LaunchKernel", "cannot name a kernel of this module: ", why);
    if (why == nullptr) RuntimeDeviceCheck(status, where);  // the image did not load
    if (kernel == nullptr)
      panic_with(where, "LaunchKernel", "kernel ", static_cast<const char*>(name), " is not in this module's device image (",
                 cudaGetErrorName(status), "): ", why);
    check_parameters(kernel, name, sizes, count, where);
    return kernel;
  });
}
}  // namespace detail
#endif

// What the runtime API takes as a kernel (launches, attributes, occupancy): the kernel itself when nvcc
// compiles the host code, its handle in the device image otherwise.
template <typename... KernelArgs>
inline const void* kernel_handle(void (*kernel)(KernelArgs...), DebugInfo where = {}) {
#ifdef __CUDACC__
  (void)where;
  return reinterpret_cast<const void*>(kernel);
#else
  constexpr std::size_t sizes[] = {sizeof(KernelArgs)..., 0};
  return detail::kernel_in_image(reinterpret_cast<const void*>(kernel), sizes, sizeof...(KernelArgs), where);
#endif
}
// A kernel as the runtime API takes it already (nvcc's kernel as a pointer, a cudaKernel_t): unchanged.
inline const void* kernel_handle(const void* kernel, DebugInfo = {}) { return kernel; }

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

  // Programmatic dependent launch where the device has it (sm_90+; elsewhere the launch is a plain one);
  // the kernel should call device::pdl_wait_primary() before reading what the previous kernel wrote.
  LaunchKernel& enable_pdl(bool enable = true) & { return m_pdl = enable, *this; }
  LaunchKernel&& enable_pdl(bool enable = true) && { return m_pdl = enable, static_cast<LaunchKernel&&>(*this); }

  template <typename... KernelArgs, typename... Args>
  void operator()(void (*kernel)(KernelArgs...), Args&&... args) const {
    cudaLaunchConfig_t config = m_config;
    cudaLaunchAttribute attr;
    if (m_pdl && runtime::has_pdl(m_device_id, m_where)) {
      attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr.val.programmaticStreamSerializationAllowed = 1;
      config.attrs = &attr, config.numAttrs = 1;
    }
#ifndef __CUDACC__
    const void* handle = kernel_handle(kernel, m_where);  // before the device switch: a failed lookup throws
#endif
    cudaError_t status;
    {
      const DeviceGuard guard(m_device_id, m_where);  // the stream belongs to the tensor's device, which may not be current
#ifdef __CUDACC__
      status = cudaLaunchKernelEx(&config, kernel, static_cast<KernelArgs>(args)...);
#else
      status = launch_by_handle<KernelArgs...>(config, handle, static_cast<KernelArgs>(args)...);
#endif
    }
    RuntimeDeviceCheck(status, m_where);
  }

 private:
#ifndef __CUDACC__
  // The arguments as the kernel's parameter types, by value: what the runtime copies from.
  template <typename... KernelArgs>
  static cudaError_t launch_by_handle(const cudaLaunchConfig_t& config, const void* kernel, KernelArgs... values) {
    void* pointers[] = {static_cast<void*>(&values)..., nullptr};
    return cudaLaunchKernelExC(&config, kernel, pointers);
  }
#endif
  cudaLaunchConfig_t m_config{};
  DebugInfo m_where;
  int m_device_id = -1;
  bool m_pdl = false;
};

}  // namespace host
#endif  // __CUDACC_RTC__
