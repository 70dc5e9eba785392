// The JIT engine's C++ API: compile a kernel module on demand, cache it content-addressed on
// disk, load it, and call its exported functions, with no Python involved.
// (Host programs only: this header is not meant for JIT translation units.)
#pragma once

#include <tvm/ffi/c_api.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace jitkern {

// Raised when a module cannot be built: carries the failing command and the compiler's output.
struct BuildError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Raised instead of compiling when JITKERN_ON_MISS=error and the module is not cached.
struct CacheMissError : BuildError {
  using BuildError::BuildError;
};

// One exported function: module.<name> calls the C++ function `expr`. `arg_names` ("a, b, c",
// optional) names its parameters in argument errors.
struct Wrapper {
  Wrapper(std::string name, std::string expr, std::string arg_names = {})
      : name(std::move(name)), expr(std::move(expr)), arg_names(std::move(arg_names)) {}
  std::string name, expr, arg_names;
};

// What to build, in the terms of the Python load_jit(): file names are relative to the package's
// csrc/ directory unless absolute.
struct BuildRequest {
  std::vector<std::string> name_parts;  // load_jit's *args marker, e.g. {"add_constant", "5"}
  std::vector<std::string> cpp_files, cuda_files;
  std::vector<Wrapper> cpp_wrappers, cuda_wrappers;
  std::vector<std::string> extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths;
  std::string build_directory;  // empty: the cache directory
  std::string cuda_arch;        // empty: $JITKERN_CUDA_ARCH, else the current device's (e.g. "sm_90a")
  int cuda_device = -1;         // device whose arch to use when probing (-1: device 0)
  // The CUDA source's host code compiled by the host compiler alone (device code under #ifdef
  // __CUDACC__), its kernels by nvcc or NVRTC (JITKERN_DEVICE_COMPILER) into a device image they launch
  // from by name: no CUDA front end parses the host code.
  bool host_without_nvcc = false;
  // With host_without_nvcc: the host pass starts with <jitkern/host_prelude.h>, which builds run many at
  // once compile once for all their host passes (a precompiled header) instead of parsing it in each.
  bool host_prelude = false;
  // With host_without_nvcc: nvcc compiles the kernels in this many device passes at once (1 to
  // JITKERN_MAX_DEVICE_PARTS), each into an image of its own; pass k defines JITKERN_DEVICE_PART=k and
  // builds only the kernels its launches name under host::in_device_part (<jitkern/utils.cuh>), so a lone
  // build waits for the longest pass, not their sum. Builds run many at once, a process with fewer CPUs
  // than the passes' threads, and NVRTC compile every kernel in one image.
  int device_parts = 1;
  // The CUDA source compiled by nvcc's phases, but its host side without cudafe++: nvcc's host
  // preprocessing, rewritten (device-only bodies removed, kernel-taking runtime calls routed to the
  // device image: src/engine/compile/host_transform.h), then one host compile. Where the rewrite
  // refuses or its compile fails, nvcc's host chain compiles it. For kernel files written for nvcc
  // (the reference framework's), which include <jitkern/compat/host_launch.h>.
  bool host_without_cudafe = false;
  // With host_without_cudafe: the first host_shared_files of cuda_files are headers that many modules
  // start with (the reference framework's kernel files: <sgl_kernel/tensor.h>). Their host side, as the
  // rewrite gives it, is compiled once per process (a precompiled header) for the later modules that
  // start with the same text: the same objects, built sooner. No part of the module's identity.
  int host_shared_files = 0;
};

// Where things are. Empty fields are filled from the environment and the installed package:
// JITKERN_CACHE_DIR (~/.cache/jitkern), JITKERN_LOCK_DIR (<cache>/locks), JITKERN_TVM_FFI_INCLUDE,
// JITKERN_TVM_FFI_LIB, and the runtime library's own location for include/ and csrc/.
struct EngineConfig {
  std::string cache_dir, lock_dir;
  std::string package_dir;  // holds include/, csrc/, lib/
  std::string tvm_ffi_include_dir, dlpack_include_dir, tvm_ffi_lib_dir, tvm_ffi_version;
  // This build is one of many run at once (a warmup, a prebuild): with JITKERN_DEVICE_COMPILER=auto its
  // kernels go to NVRTC (the least compile work) rather than to nvcc beside the host pass (the shortest wait).
  // (This header and libjitkern_engine.so ship together: the struct's layout is theirs.)
  bool parallel_build = false;
};

// Returns the path of the up-to-date shared library for `request`, building it if needed.
// Thread-safe and multi-process safe. Throws BuildError (the build failed; a compiler error is
// remembered while the inputs are unchanged, anything transient is not), std::invalid_argument (a
// bad request, naming the field) or std::runtime_error (unsafe cache directory, no compiler, ...).
std::string build(const BuildRequest& request, const EngineConfig& config = {});

// The names a built module exports for `request` (its wrappers' names, C++ ones first); validates it.
std::vector<std::string> export_names(const BuildRequest& request);

// A loaded module; functions are looked up as the tvm-ffi C ABI symbols `__tvm_ffi_<name>`.
class Module {
 public:
  explicit Module(const std::string& path);
  // Maps the library open at `fd` (the file the cache checked; a rename of `path` since cannot swap
  // it), taking `fd` (closed once mapped); `path` names it in messages and to debuggers.
  Module(const std::string& path, int fd);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  TVMFFISafeCallType function(const std::string& name) const;  // throws if absent
  // Any symbol visible through the module (its own, then its dependencies'); nullptr if none.
  void* symbol(const std::string& name) const;
  const std::string& path() const { return m_path; }

 private:
  void* m_handle = nullptr;
  std::string m_path;
};

// build() + load, memoised per process.
std::shared_ptr<Module> load(const BuildRequest& request, const EngineConfig& config = {});

}  // namespace jitkern
