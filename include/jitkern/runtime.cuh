// host::runtime: CUDA device queries, cached per device, errors checked: the device attributes
// (<jitkern/utils.cuh>, where LaunchKernel asks them) and the occupancy queries.
#pragma once

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles device code only

#include <jitkern/detail/driver_entry.h>
#include <jitkern/utils.cuh>

#include <cstdint>

namespace host::runtime {

// Resident blocks per SM for `kernel` at this block size and dynamic shared memory.
template <typename Kernel>
inline int get_blocks_per_sm(Kernel kernel, int block_size, std::size_t dynamic_smem = 0, DebugInfo where = {}) {
  int blocks = 0;
  RuntimeDeviceCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel_handle(kernel, where), block_size, dynamic_smem), where);
  return blocks;
}

namespace detail {
// resident_ctas_per_sm's answers, for any kernel of the module: state 0 free, 1 being written, 2 ready.
struct ResidentCtas {
  const void* kernel;
  uint64_t key;  // device << 48 | threads << 32 | bytes
  int ctas, state;
};
inline ResidentCtas* resident_ctas_table() {
  static ResidentCtas table[32] = {};
  return table;
}
}  // namespace detail

// CTAs of `kernel` at `threads` a CTA and `dynamic_smem` bytes that an SM of `device` holds at once (at least
// one, else an error): the occupancy API's answer, asked once per (kernel, device, threads, bytes) and then
// read lock-free (launch paths call it on every launch). The kernel is an argument, not a template argument:
// an instantiation on a kernel would take its stub's internal visibility, the mark of kernels for NVRTC; and
// the compiler's atomic builtins, as <atomic> would add its parse to every module that includes this header.
template <typename Kernel>
inline int resident_ctas_per_sm(Kernel kernel, int threads, std::size_t dynamic_smem, int device, DebugInfo where = {}) {
  constexpr int kSlots = 32;
  RuntimeCheck(where, device >= 0 && device < (1 << 15) && threads > 0 && threads < (1 << 16) && dynamic_smem < (std::size_t{1} << 32),
               "resident_ctas_per_sm: device ", device, ", ", threads, " threads, ", dynamic_smem, " bytes out of range");
  const void* const id = reinterpret_cast<const void*>(kernel);
  const uint64_t key = uint64_t(device) << 48 | uint64_t(threads) << 32 | uint64_t(dynamic_smem);
  const uint64_t hash = ((key ^ reinterpret_cast<uintptr_t>(id)) * 0x9E3779B97F4A7C15ull) >> 32;
  const auto ask = [&] {
    const DeviceGuard guard(device, where);  // the occupancy API asks the current device
    const int ctas = get_blocks_per_sm(kernel, threads, dynamic_smem, where);
    RuntimeCheck(where, ctas > 0, "a kernel cannot run with ", threads, " threads and ", dynamic_smem, " bytes of shared memory a CTA");
    return ctas;
  };
  detail::ResidentCtas* const table = detail::resident_ctas_table();
  for (int i = 0; i < kSlots; ++i) {
    detail::ResidentCtas& slot = table[(hash + i) % kSlots];
    const int state = __atomic_load_n(&slot.state, __ATOMIC_ACQUIRE);
    if (state == 2 && slot.kernel == id && slot.key == key) return slot.ctas;
    if (state != 0) continue;
    const int ctas = ask();
    int free = 0;  // another thread may have taken the slot meanwhile: then the answer stands uncached
    if (__atomic_compare_exchange_n(&slot.state, &free, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
      slot.kernel = id, slot.key = key, slot.ctas = ctas;
      __atomic_store_n(&slot.state, 2, __ATOMIC_RELEASE);
    }
    return ctas;
  }
  return ask();
}

namespace detail {
// The driver's cuDeviceGet and cuKernelSetAttribute (driver_entry; CUresult as int, CUdevice an int, CUkernel the
// runtime's cudaKernel_t): null where the runtime cannot give them.
using DriverDeviceGet = int (*)(int*, int);
using DriverKernelSetAttribute = int (*)(int, int, cudaKernel_t, int);
[[gnu::visibility("hidden")]] inline DriverDeviceGet driver_device_get() {
  static const auto get = reinterpret_cast<DriverDeviceGet>(host::detail::driver_entry("cuDeviceGet", 2000));
  return get;
}
[[gnu::visibility("hidden")]] inline DriverKernelSetAttribute driver_kernel_set_attribute() {
  static const auto set = reinterpret_cast<DriverKernelSetAttribute>(host::detail::driver_entry("cuKernelSetAttribute", 12000));
  return set;
}
}  // namespace detail

// The grid of a kernel whose CTAs take work items blockIdx.x, + gridDim.x, ..., where `resident` CTAs fit the SMs
// at once: below kBalancedFrom items a resident CTA, min(items, resident), each CTA taking its items in turn; from
// there four CTAs for every five items, a CTA taking one or two and the SMs new CTAs as theirs finish. A grid of
// resident CTAs leaves an SM idle once its CTAs are done while the slowest SM still works (H200: 10% of a
// 16384-token fused_qknorm_rope; docs/benchmarks/qknorm_rope.md, "The staged kernel's grid").
constexpr int64_t kBalancedFrom = 3;
inline int64_t balanced_grid(int64_t items, int64_t resident) {
  if (items < kBalancedFrom * resident) return items < resident ? items : resident;
  return div_ceil(items * 4, int64_t{5});
}

// Sets `attribute` of `kernel` to `value` for `device` (negative: the current one) and returns the outcome, a
// refusal included, without leaving it as the thread's last error. A module's host code compiled without nvcc
// takes the driver's cuKernelSetAttribute where the runtime gives it (CUDA 12.5+ headers, a 12.0+ driver; the two
// APIs number the settable attributes alike), which leaves an error the caller has yet to check as its last
// error: the runtime's cudaFuncSetAttribute, taken elsewhere, resets it even when it succeeds (H200, CUDA 13).
template <typename Kernel>
inline cudaError_t set_kernel_attribute(Kernel kernel, cudaFuncAttribute attribute, int value, int device, DebugInfo where = {}) {
  const void* const handle = kernel_handle(kernel, where);
  if (device < 0) device = host::runtime::detail::current_device(where);
#ifndef __CUDACC__  // (nvcc's host code: the kernel is its stub, not a cudaKernel_t)
  const detail::DriverDeviceGet device_get = detail::driver_device_get();
  const detail::DriverKernelSetAttribute set = detail::driver_kernel_set_attribute();
  if (device_get != nullptr && set != nullptr) {
    int driver_device = 0;
    int status = device_get(&driver_device, device);
    if (status == 0) status = set(static_cast<int>(attribute), value, static_cast<cudaKernel_t>(const_cast<void*>(handle)), driver_device);
    return static_cast<cudaError_t>(status);
  }
#endif
  const DeviceGuard guard(device, std::nothrow);
  cudaError_t status = guard.status();
  if (status == cudaSuccess) status = cudaFuncSetAttribute(handle, attribute, value);
  if (status != cudaSuccess) (void)cudaGetLastError();
  return status;
}

}  // namespace host::runtime
#endif  // __CUDACC_RTC__
