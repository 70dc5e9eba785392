// The compilers and the CUDA target: which programs compile, what identifies them in a cache key,
// and the architecture rule. The only code that probes the machine.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "base/fs_util.h"

namespace jitkern::store {
class Store;
}
namespace jitkern::manifest {
struct Manifest;
}

namespace jitkern::toolchain {

struct Compiler {
  std::string path;      // as found (absolute, or as named when it contains a '/')
  std::string real;      // its realpath (identify() fills it)
  fs::FileSig sig;       // the size and mtime of the file it leads to
  std::string version;   // the --version output: what a cache entry records (the same compiler
                         // installed elsewhere, or at another time, has the same)
  // Directories holding the compiler's own files (its headers): not tracked as dependencies,
  // because its version covers them. Never a whole prefix that also holds other packages.
  std::vector<std::string> own_dirs;
};

// Where `program` resolves here (a lookup in `path`, the configuration's PATH, and a stat; no
// subprocess), memoised per process on (program, path); an empty path when it is not found.
Compiler locate(const std::string& program, const std::string& path);
// locate(), then the --version output: remembered in `store`'s toolchain records by (program, PATH,
// real path, size, mtime), so that only a new or changed compiler is run. Throws naming `role`
// (with the fix) when the program is missing.
// `config` gives PATH, the probe's temporary directory and the compilers' environment.
Compiler identify(const std::string& program, const store::Store& store, const char* role, const config::Config& config);

// What the compilers are searched with: the settings that name them and PATH.
std::string search_key(const config::Config& config, bool cuda);
// Whether a library built by the compilers `m` records may be served here: this machine's compilers
// are found at the same paths and lead to files of the same size and mtime (no subprocess; with the
// same search_key as the build, the recorded files are stat'ed instead of searching PATH again), or
// it has none (a serving machine), or they report the same versions (identify: runs each new
// compiler once).
bool accepts(const manifest::Manifest& m, const store::Store& store, const config::Config& config, bool cuda);
// What identifies a toolchain across machines: the C++ compiler's and (for CUDA) nvcc's --version.
std::string id(const Compiler& cxx, const Compiler* nvcc);

// nvcc as the configuration names it ($CUDA_HOME/bin/nvcc, $CUDA_PATH/bin/nvcc, else nvcc on PATH). A
// CUDA_HOME without bin/nvcc is an error, not silently skipped.
std::string nvcc_program(const config::Config& config);
// The CUDA runtime library directory of the toolkit that `nvcc_path` belongs to.
std::string cuda_lib_dir(const std::string& nvcc_path);
// Its headers' directory (cuda_runtime_api.h): a host pass's include path.
std::string cuda_include_dir(const std::string& nvcc_path);
// The toolkit's NVRTC library (in cuda_lib_dir), or "" where it has none.
std::string nvrtc_library(const std::string& nvcc_path);

// tvm-ffi's library and include directories, from the libtvm_ffi.so loaded in this process (the
// Python package loads it; its headers sit in ../include beside lib/). False when none is loaded.
bool loaded_tvm_ffi_dirs(std::string* lib_dir, std::string* include_dir);

// The target for a compute capability: sm_XY, with the 'a' suffix from sm_90 on (wgmma,
// setmaxnreg, ... need the architecture-specific target).
std::string arch_for_capability(int major, int minor);
// Throws std::invalid_argument unless `arch` has the form sm_XY, sm_XYa or sm_XYf; the message names
// `origin`, where the value came from (JITKERN_CUDA_ARCH, the spec's cuda_arch, the device).
const std::string& validate_arch(const std::string& arch, const std::string& origin);
// validate_arch's origin for a request's own cuda_arch.
inline constexpr const char* kSpecArch = "the spec's cuda_arch";
// The target for a build: `requested` if given, else the configuration's JITKERN_CUDA_ARCH, else
// device `device`'s (a driver query, memoised; -1 means device 0).
std::string cuda_arch(const std::string& requested, int device, const config::Config& config);

}  // namespace jitkern::toolchain
