// The compilers and the CUDA target: which programs compile, what identifies them in a cache key,
// and the architecture rule. The only code that probes the machine.
#pragma once

#include <string>

namespace jitkern::toolchain {

struct Compiler {
  std::string path;      // as found (absolute, or as named when it contains a '/')
  std::string real;      // its realpath
  std::string identity;  // realpath, size, mtime and --version output
  std::string version;   // the --version output alone: what a cache entry records (the same compiler
                         // installed elsewhere, or at another time, has the same)
};

// Finds `program` and identifies it; the --version output is remembered on disk under
// <cache_dir>/toolchains by (program, PATH, size, mtime), so warm loads run no subprocess.
Compiler identify(const std::string& program, const std::string& cache_dir, const char* role);

// The host compiler: $CXX or c++.
std::string cxx_program();
// nvcc: $CUDA_HOME/bin/nvcc, $CUDA_PATH/bin/nvcc, else nvcc on PATH. A CUDA_HOME without bin/nvcc
// is an error, not silently skipped.
std::string nvcc_program();
// The CUDA runtime library directory of the toolkit that `nvcc_path` belongs to.
std::string cuda_lib_dir(const std::string& nvcc_path);

// tvm-ffi's library and include directories, from the libtvm_ffi.so loaded in this process (the
// Python package loads it; its headers sit in ../include beside lib/). False when none is loaded.
bool loaded_tvm_ffi_dirs(std::string* lib_dir, std::string* include_dir);

// The target for a compute capability: sm_XY, with the 'a' suffix from sm_90 on (wgmma,
// setmaxnreg, ... need the architecture-specific target).
std::string arch_for_capability(int major, int minor);
// Throws std::invalid_argument unless `arch` has the form sm_XY, sm_XYa or sm_XYf.
const std::string& validate_arch(const std::string& arch);
// The target for a build: `requested` if given, else $JITKERN_CUDA_ARCH, else device `device`'s (a
// driver query, memoised; -1 means device 0).
std::string cuda_arch(const std::string& requested, int device);

}  // namespace jitkern::toolchain
