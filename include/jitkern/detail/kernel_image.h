// A module's device image (nvcc's or NVRTC's fatbin of its kernels, linked in by the engine under
// JITKERN_DEVICE_IMAGE_SYMBOL) and its kernels found by their host stubs: how a host side compiled
// without nvcc's registration of kernels launches them (jitkern's LaunchKernel, and the compat layer's
// runtime calls, <jitkern/compat/host_launch.h>). Host code only.
#pragma once

#include <cuda_runtime_api.h>
#include <jitkern/detail/device_image.h>
#include <jitkern/detail/driver_entry.h>
#include <jitkern/detail/module_symbols.h>
#include <pthread.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

extern "C" const unsigned long long JITKERN_DEVICE_IMAGE_SYMBOL[];  // hidden: this module's own
extern "C" const unsigned long long JITKERN_DEVICE_PASSES_SYMBOL[];  // hidden: how many images it has
// The images of device passes 1 to 7 (a module built in several, <jitkern/detail/device_image.h>): weak and
// hidden, so that a module without them links (read only below the count: a linker may give an undefined
// weak symbol the module's own address instead of null).
#define JITKERN_PART_IMAGE_NAME_(base, part) base##_##part
#define JITKERN_PART_IMAGE_NAME(base, part) JITKERN_PART_IMAGE_NAME_(base, part)
#define JITKERN_PART_IMAGE(part) \
  extern "C" __attribute__((weak, visibility("hidden"))) const unsigned long long JITKERN_PART_IMAGE_NAME(JITKERN_DEVICE_IMAGE_SYMBOL, part)[];
JITKERN_PART_IMAGE(1)
JITKERN_PART_IMAGE(2)
JITKERN_PART_IMAGE(3)
JITKERN_PART_IMAGE(4)
JITKERN_PART_IMAGE(5)
JITKERN_PART_IMAGE(6)
JITKERN_PART_IMAGE(7)
static_assert(JITKERN_MAX_DEVICE_PARTS == 8, "declare the image of every device pass above");

namespace host::detail {
// Hidden, with their statics: each module has its own (a default visibility would make them
// process-wide unique symbols, shared by every module).

// How many device images this module has (1 unless several device passes built it).
[[gnu::visibility("hidden")]] inline int image_count() { return static_cast<int>(JITKERN_DEVICE_PASSES_SYMBOL[0]); }

// This module's device images, in device pass order; null past the last.
[[gnu::visibility("hidden")]] inline const void* image_data(int part) {
  static const void* const images[JITKERN_MAX_DEVICE_PARTS] = {
      JITKERN_DEVICE_IMAGE_SYMBOL,
      JITKERN_PART_IMAGE_NAME(JITKERN_DEVICE_IMAGE_SYMBOL, 1),
      JITKERN_PART_IMAGE_NAME(JITKERN_DEVICE_IMAGE_SYMBOL, 2),
      JITKERN_PART_IMAGE_NAME(JITKERN_DEVICE_IMAGE_SYMBOL, 3),
      JITKERN_PART_IMAGE_NAME(JITKERN_DEVICE_IMAGE_SYMBOL, 4),
      JITKERN_PART_IMAGE_NAME(JITKERN_DEVICE_IMAGE_SYMBOL, 5),
      JITKERN_PART_IMAGE_NAME(JITKERN_DEVICE_IMAGE_SYMBOL, 6),
      JITKERN_PART_IMAGE_NAME(JITKERN_DEVICE_IMAGE_SYMBOL, 7)};
  return part >= 0 && part < image_count() && part < JITKERN_MAX_DEVICE_PARTS ? images[part] : nullptr;
}

// Device pass `part`'s image, loaded once per process (a failed load is tried again by the next call).
[[gnu::visibility("hidden")]] inline cudaError_t device_image(int part, cudaLibrary_t* out) {
  static cudaLibrary_t libraries[JITKERN_MAX_DEVICE_PARTS] = {};
  static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  cudaLibrary_t loaded = __atomic_load_n(&libraries[part], __ATOMIC_ACQUIRE);
  cudaError_t status = cudaSuccess;
  if (loaded == nullptr) {
    pthread_mutex_lock(&mutex);
    if ((loaded = libraries[part]) == nullptr &&
        (status = cudaLibraryLoadData(&loaded, image_data(part), nullptr, nullptr, 0, nullptr, nullptr, 0)) == cudaSuccess)
      __atomic_store_n(&libraries[part], loaded, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mutex);
  }
  *out = loaded;
  return status;
}

// The driver's cuLibraryGetKernel and cuKernelGetParamInfo (driver_entry; CUresult as int, CUlibrary and CUkernel
// are the runtime's handles, and driver and runtime share these calls' error codes: CUDA_ERROR_NOT_FOUND is
// cudaErrorSymbolNotFound). What the engine asks of a module's images goes through them where it can: the
// runtime's cudaLibraryGetKernel makes a miss the thread's last error and cudaFuncGetParamInfo resets it even when
// it succeeds, either dropping an error the caller has yet to check.
using DriverLibraryGetKernel = int (*)(cudaKernel_t*, cudaLibrary_t, const char*);
using DriverKernelGetParamInfo = int (*)(cudaKernel_t, std::size_t, std::size_t*, std::size_t*);
[[gnu::visibility("hidden")]] inline DriverLibraryGetKernel driver_library_get_kernel() {
  static const auto get = reinterpret_cast<DriverLibraryGetKernel>(driver_entry("cuLibraryGetKernel", 12000));
  return get;
}
[[gnu::visibility("hidden")]] inline DriverKernelGetParamInfo driver_kernel_get_param_info() {
  static const auto get = reinterpret_cast<DriverKernelGetParamInfo>(driver_entry("cuKernelGetParamInfo", 12040));
  return get;
}

// The image (device pass) whose kernels include `name`, by listing each image's kernels with the driver
// (cuLibraryGetKernelCount, cuLibraryEnumerateKernels, cuKernelGetName: CUDA 12.4): asking the images in turn
// makes each miss an API error, which tools such as compute-sanitizer report and count. -1 where no listed
// image has it or the images cannot be listed (then they are asked in turn).
using DriverLibraryGetKernelCount = int (*)(unsigned*, cudaLibrary_t);
using DriverLibraryEnumerateKernels = int (*)(cudaKernel_t*, unsigned, cudaLibrary_t);
using DriverKernelGetName = int (*)(const char**, cudaKernel_t);
[[gnu::visibility("hidden")]] inline int listed_image(const char* name) {
  static const auto count_of = reinterpret_cast<DriverLibraryGetKernelCount>(driver_entry("cuLibraryGetKernelCount", 12040));
  static const auto list = reinterpret_cast<DriverLibraryEnumerateKernels>(driver_entry("cuLibraryEnumerateKernels", 12040));
  static const auto name_of = reinterpret_cast<DriverKernelGetName>(driver_entry("cuKernelGetName", 12030));
  if (count_of == nullptr || list == nullptr || name_of == nullptr) return -1;
  for (int part = 0; part < image_count(); ++part) {
    cudaLibrary_t library = nullptr;
    unsigned count = 0;
    if (device_image(part, &library) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    if (count_of(&count, library) != 0 || count == 0) continue;
    auto* const kernels = static_cast<cudaKernel_t*>(std::malloc(count * sizeof(cudaKernel_t)));
    if (kernels == nullptr) return -1;
    bool found = false;
    if (list(kernels, count, library) == 0) {
      for (unsigned i = 0; i < count && !found; ++i) {
        const char* listed = nullptr;
        found = name_of(&listed, kernels[i]) == 0 && listed != nullptr && std::strcmp(listed, name) == 0;
      }
    }
    std::free(kernels);
    if (found) return part;
  }
  return -1;
}

// The kernel named `name` in the first device image that has it; null with `*status` set if an image cannot
// be loaded (the runtime's last error cleared) or none has such a kernel (then `*missing`, if given).
[[gnu::visibility("hidden")]] inline cudaKernel_t image_kernel(const char* name, cudaError_t* status, bool* missing = nullptr) {
  if (missing != nullptr) *missing = false;
  const DriverLibraryGetKernel driver_get = driver_library_get_kernel();
  // With several images and the driver's calls, the one image that has the kernel is asked, and only it.
  const int listed = image_count() > 1 && driver_get != nullptr ? listed_image(name) : -1;
  for (int part = listed < 0 ? 0 : listed; part == 0 || part < image_count(); ++part) {
    cudaLibrary_t library = nullptr;
    cudaKernel_t kernel = nullptr;
    if ((*status = device_image(part, &library)) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    if (driver_get != nullptr) {
      if ((*status = static_cast<cudaError_t>(driver_get(&kernel, library, name))) == cudaSuccess) return kernel;
      continue;
    }
    if ((*status = cudaLibraryGetKernel(&kernel, library, name)) == cudaSuccess) return kernel;
    (void)cudaGetLastError();
  }
  if (missing != nullptr) *missing = true;
  return nullptr;
}

// The kernel that `stub` (a function of this module) stands for in the device image, by the stub's
// symbol (in `*name`, from malloc: the caller frees it). Null when the symbol cannot be read (`*why`
// says why, `*name` null), the image cannot be loaded (`*status`, `*why` null) or has no such kernel
// (`*status` and `*why`).
[[gnu::visibility("hidden")]] inline cudaKernel_t find_in_image(const void* stub, char** name, cudaError_t* status, const char** why) {
  *status = cudaSuccess, *why = nullptr;
  if ((*name = function_symbol(stub, why)) == nullptr) return nullptr;
  *why = nullptr;
  bool missing = false;
  const cudaKernel_t kernel = image_kernel(*name, status, &missing);
  if (missing)
    *why = image_count() > 1 ? "is it named under host::in_device_part tests of two different parts (then no device pass builds it), or "
                               "static, or in an anonymous namespace, or instantiated with a type that is?"
                             : "is it static, or in an anonymous namespace, or instantiated with a type that is?";
  return kernel;
}

// The kernel of each stub, found once by `resolve(stub)` (under a lock; a null result is not kept): a
// lock-free table of what was found (GCC's atomic built-ins: <atomic> and <mutex> would double the
// host pass's parsing). Each `Resolve` type has its own table.
template <typename Resolve>
[[gnu::visibility("hidden")]] inline const void* kernel_for_stub(const void* stub, const Resolve& resolve) {
  constexpr std::size_t kSlots = 1024;  // beyond, a kernel's launches repeat the lookup
  static const void* stubs[kSlots];
  static const void* kernels[kSlots];
  static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  const std::size_t home = (reinterpret_cast<std::uintptr_t>(stub) >> 4) % kSlots;
  for (std::size_t i = 0; i < kSlots; ++i) {
    const std::size_t slot = (home + i) % kSlots;
    const void* seen = __atomic_load_n(&stubs[slot], __ATOMIC_ACQUIRE);
    if (seen == stub) return kernels[slot];
    if (seen == nullptr) break;
  }
  struct Locked {
    explicit Locked(pthread_mutex_t* m) : m(m) { pthread_mutex_lock(m); }
    ~Locked() { pthread_mutex_unlock(m); }
    pthread_mutex_t* m;
  } locked(&mutex);
  const void* kernel = resolve(stub);
  if (kernel == nullptr) return nullptr;
  for (std::size_t i = 0; i < kSlots; ++i) {
    const std::size_t slot = (home + i) % kSlots;
    const void* seen = __atomic_load_n(&stubs[slot], __ATOMIC_RELAXED);
    if (seen == stub) return kernels[slot];
    if (seen == nullptr) {
      kernels[slot] = kernel;
      __atomic_store_n(&stubs[slot], stub, __ATOMIC_RELEASE);
      break;
    }
  }
  return kernel;  // a full table only costs the lookup again
}
}  // namespace host::detail
