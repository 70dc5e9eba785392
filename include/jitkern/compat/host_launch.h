// The runtime calls that take a kernel, for a reference kernel file whose host side the engine compiles
// without cudafe++ (src/engine/compile/host_transform.h): the rewrite renames each call of
// cudaLaunchKernelExC, cudaFuncSetAttribute, cudaOccupancy*... to jitkern_compat_<name>, defined here:
// a kernel stub of this module is replaced by its kernel in the module's device image
// (<jitkern/detail/kernel_image.h>), anything else is passed on unchanged; `kernel<<<...>>>(args)` becomes
// chevron(kernel, ...)(args), below. The build includes this file in every such module; where the rewrite
// is refused (nvcc's host chain compiles it), nothing calls these.
#pragma once

#if defined(__CUDACC__) && !defined(__CUDA_ARCH__) && !defined(__CUDACC_RTC__)
#include <cuda_runtime_api.h>
#include <jitkern/detail/kernel_image.h>

#include <cstdio>
#include <cstring>

// The module id nvcc's device code was compiled with (the engine defines it in a rewritten host side).
extern "C" [[gnu::weak, gnu::visibility("hidden")]] const char jitkern_compat_module_id[];

namespace jitkern::compat {
// A kernel in an unnamed namespace (or instantiated with a type in one): GCC's host code names the
// namespace _GLOBAL__N_1, nvcc's device code _GLOBAL__N_<module id>. The device name for `host_name`
// (from malloc), or null where it has no such part.
[[gnu::visibility("hidden")]] inline char* unnamed_namespace_device_name(const char* host_name, const char* module_id) {
  constexpr const char* kHost = "12_GLOBAL__N_1";
  if (module_id == nullptr || std::strstr(host_name, kHost) == nullptr) return nullptr;
  char device[64];
  const int n = std::snprintf(device, sizeof device, "%zu_GLOBAL__N_%s", std::strlen("_GLOBAL__N_") + std::strlen(module_id), module_id);
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof device) return nullptr;
  std::size_t count = 0;
  for (const char* at = std::strstr(host_name, kHost); at != nullptr; at = std::strstr(at + 1, kHost)) ++count;
  char* out = static_cast<char*>(std::malloc(std::strlen(host_name) + count * static_cast<std::size_t>(n) + 1));
  if (out == nullptr) return nullptr;
  char* to = out;
  for (const char* from = host_name;;) {
    const char* at = std::strstr(from, kHost);
    const std::size_t keep = at == nullptr ? std::strlen(from) : static_cast<std::size_t>(at - from);
    std::memcpy(to, from, keep), to += keep;
    if (at == nullptr) break;
    std::memcpy(to, device, static_cast<std::size_t>(n)), to += n;
    from = at + std::strlen(kHost);
  }
  *to = '\0';
  return out;
}

// The kernel that `func` stands for: the device image's kernel for a stub of this module (once per
// stub), else `func` itself (a kernel handle, another module's function). A stub the image lacks:
// cudaErrorInvalidDeviceFunction, as the runtime answers for a function it does not know.
[[gnu::visibility("hidden")]] inline cudaError_t routed_kernel(const void* func, const void** kernel) {
  cudaError_t status = cudaSuccess;
  *kernel = host::detail::kernel_for_stub(func, [&status](const void* stub) -> const void* {
    Dl_info mine{}, theirs{};
    if (dladdr(reinterpret_cast<const void*>(&routed_kernel), &mine) == 0 || dladdr(stub, &theirs) == 0 || mine.dli_fbase != theirs.dli_fbase)
      return stub;
    char* name = nullptr;
    const char* why = nullptr;
    cudaKernel_t found = host::detail::find_in_image(stub, &name, &status, &why);
    if (found == nullptr && name != nullptr && why != nullptr) {  // named, not in the image by it: in an unnamed namespace?
      char* device = unnamed_namespace_device_name(name, jitkern_compat_module_id);
      if (device != nullptr) found = host::detail::image_kernel(device, &status);
      std::free(device);
    }
    std::free(name);
    return found;
  });
  if (*kernel != nullptr) return cudaSuccess;
  return status != cudaSuccess ? status : cudaErrorInvalidDeviceFunction;
}
}  // namespace jitkern::compat

// The runtime's own functions, by their symbols (the rewrite renames their C++ names).
#define JITKERN_COMPAT_RUNTIME(name) __asm__(#name)
extern "C" {
cudaError_t jitkern_cudart_cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) JITKERN_COMPAT_RUNTIME(cudaLaunchKernel);
cudaError_t jitkern_cudart_cudaLaunchKernelExC(const cudaLaunchConfig_t*, const void*, void**) JITKERN_COMPAT_RUNTIME(cudaLaunchKernelExC);
cudaError_t jitkern_cudart_cudaLaunchCooperativeKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t)
    JITKERN_COMPAT_RUNTIME(cudaLaunchCooperativeKernel);
cudaError_t jitkern_cudart_cudaFuncSetCacheConfig(const void*, enum cudaFuncCache) JITKERN_COMPAT_RUNTIME(cudaFuncSetCacheConfig);
cudaError_t jitkern_cudart_cudaFuncGetAttributes(struct cudaFuncAttributes*, const void*) JITKERN_COMPAT_RUNTIME(cudaFuncGetAttributes);
cudaError_t jitkern_cudart_cudaFuncSetAttribute(const void*, enum cudaFuncAttribute, int) JITKERN_COMPAT_RUNTIME(cudaFuncSetAttribute);
cudaError_t jitkern_cudart_cudaFuncGetName(const char**, const void*) JITKERN_COMPAT_RUNTIME(cudaFuncGetName);
cudaError_t jitkern_cudart_cudaFuncGetParamInfo(const void*, size_t, size_t*, size_t*) JITKERN_COMPAT_RUNTIME(cudaFuncGetParamInfo);
cudaError_t jitkern_cudart_cudaFuncSetSharedMemConfig(const void*, enum cudaSharedMemConfig) JITKERN_COMPAT_RUNTIME(cudaFuncSetSharedMemConfig);
cudaError_t jitkern_cudart_cudaOccupancyMaxActiveBlocksPerMultiprocessor(int*, const void*, int, size_t)
    JITKERN_COMPAT_RUNTIME(cudaOccupancyMaxActiveBlocksPerMultiprocessor);
cudaError_t jitkern_cudart_cudaOccupancyAvailableDynamicSMemPerBlock(size_t*, const void*, int, int)
    JITKERN_COMPAT_RUNTIME(cudaOccupancyAvailableDynamicSMemPerBlock);
cudaError_t jitkern_cudart_cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int*, const void*, int, size_t, unsigned int)
    JITKERN_COMPAT_RUNTIME(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags);
cudaError_t jitkern_cudart_cudaOccupancyMaxPotentialClusterSize(int*, const void*, const cudaLaunchConfig_t*)
    JITKERN_COMPAT_RUNTIME(cudaOccupancyMaxPotentialClusterSize);
cudaError_t jitkern_cudart_cudaOccupancyMaxActiveClusters(int*, const void*, const cudaLaunchConfig_t*)
    JITKERN_COMPAT_RUNTIME(cudaOccupancyMaxActiveClusters);
cudaError_t jitkern_cudart_cudaGetKernel(cudaKernel_t*, const void*) JITKERN_COMPAT_RUNTIME(cudaGetKernel);

// Each renamed call: the kernel routed, then the runtime's function. Inline: compiled only where the
// rewrite calls them; hidden (-fvisibility=hidden): every module has its own, bound to its own image.
#define JITKERN_COMPAT_ROUTE(call)                                        \
  const void* kernel = nullptr;                                           \
  if (const cudaError_t e = jitkern::compat::routed_kernel(func, &kernel)) \
    return e;                                                             \
  return call

inline cudaError_t jitkern_compat_cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t smem, cudaStream_t stream) {
  JITKERN_COMPAT_ROUTE(jitkern_cudart_cudaLaunchKernel(kernel, grid, block, args, smem, stream));
}
inline cudaError_t jitkern_compat_cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  JITKERN_COMPAT_ROUTE(jitkern_cudart_cudaLaunchKernelExC(config, kernel, args));
}
inline cudaError_t jitkern_compat_cudaLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block, void** args, size_t smem, cudaStream_t stream) {
  JITKERN_COMPAT_ROUTE(jitkern_cudart_cudaLaunchCooperativeKernel(kernel, grid, block, args, smem, stream));
}
inline cudaError_t jitkern_compat_cudaFuncSetCacheConfig(const void* func, enum cudaFuncCache config) {
  JITKERN_COMPAT_ROUTE(jitkern_cudart_cudaFuncSetCacheConfig(kernel, config));
}
inline cudaError_t jitkern_compat_cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) {
  JITKERN_COMPAT_ROUTE(jitkern_cudart_cudaFuncGetAttributes(attr, kernel));
}
inline cudaError_t jitkern_compat_cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
  JITKERN_COMPAT_ROUTE(jitkern_cudart_cudaFuncSetAttribute(kernel, attr, value));
}
inline cudaError_t jitkern_compat_cudaFuncGetName(const char** name, const void* func) {
  JITKERN_COMPAT_ROUTE(jitkern_cudart_cudaFuncGetName(name, kernel));
}
inline cudaError_t jitkern_compat_cudaFuncGetParamInfo(const void* func, size_t index, size_t* offset, size_t* size) {
  JITKERN_COMPAT_ROUTE(jitkern_cudart_cudaFuncGetParamInfo(kernel, index, offset, size));
}
inline cudaError_t jitkern_compat_cudaFuncSetSharedMemConfig(const void* func, enum cudaSharedMemConfig config) {
  JITKERN_COMPAT_ROUTE(jitkern_cudart_cudaFuncSetSharedMemConfig(kernel, config));
}
inline cudaError_t jitkern_compat_cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size, size_t smem) {
  JITKERN_COMPAT_ROUTE(jitkern_cudart_cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel, block_size, smem));
}
inline cudaError_t jitkern_compat_cudaOccupancyAvailableDynamicSMemPerBlock(size_t* smem, const void* func, int blocks, int block_size) {
  JITKERN_COMPAT_ROUTE(jitkern_cudart_cudaOccupancyAvailableDynamicSMemPerBlock(smem, kernel, blocks, block_size));
}
inline cudaError_t jitkern_compat_cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* func, int block_size, size_t smem,
                                                                                  unsigned int flags) {
  JITKERN_COMPAT_ROUTE(jitkern_cudart_cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, kernel, block_size, smem, flags));
}
inline cudaError_t jitkern_compat_cudaOccupancyMaxPotentialClusterSize(int* size, const void* func, const cudaLaunchConfig_t* config) {
  JITKERN_COMPAT_ROUTE(jitkern_cudart_cudaOccupancyMaxPotentialClusterSize(size, kernel, config));
}
inline cudaError_t jitkern_compat_cudaOccupancyMaxActiveClusters(int* clusters, const void* func, const cudaLaunchConfig_t* config) {
  JITKERN_COMPAT_ROUTE(jitkern_cudart_cudaOccupancyMaxActiveClusters(clusters, kernel, config));
}
inline cudaError_t jitkern_compat_cudaGetKernel(cudaKernel_t* out, const void* func) {
  const void* kernel = nullptr;
  if (const cudaError_t e = jitkern::compat::routed_kernel(func, &kernel)) return e;
  if (kernel != func) return *out = static_cast<cudaKernel_t>(const_cast<void*>(kernel)), cudaSuccess;
  return jitkern_cudart_cudaGetKernel(out, func);
}
}

namespace jitkern::compat {
// A triple-chevron launch, `kernel<<<grid, block, smem, stream>>>(args...)`, as the rewrite spells it:
// chevron(kernel, grid, block, smem, stream)(args...), through the routed cudaLaunchKernel.
template <typename... P>
struct Chevron {
  void (*kernel)(P...);
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  template <typename... A>
  void operator()(A&&... args) const {
    launch(static_cast<A&&>(args)...);
  }
  void launch(P... values) const {  // the arguments as the kernel's parameter types, by value
    void* pointers[] = {const_cast<void*>(static_cast<const void*>(&values))..., nullptr};
    (void)jitkern_compat_cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, pointers, smem, stream);
  }
};
template <typename... P>
inline Chevron<P...> chevron(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = nullptr) {
  return {kernel, grid, block, smem, stream};
}
}  // namespace jitkern::compat
#undef JITKERN_COMPAT_ROUTE
#undef JITKERN_COMPAT_RUNTIME
#endif
