// The pure part of a build: a request, the configuration and the toolchain in; the validated
// request, its cache key, its entry and lock paths and its compile/link commands out. No side
// effects, so every rule here is unit-tested (tests/cpp/test_plan.cc).
#pragma once

#include <jitkern/jit.h>

#include <string>
#include <vector>

#include "base/fs_util.h"
#include "config/config.h"
#include "compile/toolchain.h"

namespace jitkern::plan {

// The configuration stage's result (config.h): where things are and every setting's value.
using Config = config::Config;

// Throws std::invalid_argument naming the field for anything a build cannot use: no name or sources,
// no wrappers (nothing to export), wrappers without sources, export names that are not C identifiers or are reserved, expressions
// that are not one line, NUL bytes or newlines in names, files or flags.
void validate(const BuildRequest& request);

// The request's kernel files, resolved (relative names against the package's csrc/); throws
// std::invalid_argument naming a missing one and where it was looked for.
std::vector<std::string> sources(const BuildRequest& request, const Config& config);

// The export names of a request, in the order of its wrappers (C++ ones first).
std::vector<std::string> export_names(const BuildRequest& request);

// The compilers in the plan's commands until bind() names them: the key is computed once, before any
// compiler is looked for (a warm lookup runs none), from commands that differ from the ones a build runs
// only in these two words.
inline constexpr const char* kCxx = "@cxx";
inline constexpr const char* kNvcc = "@nvcc";

struct Toolchain {
  toolchain::Compiler cxx;
  toolchain::Compiler nvcc;  // empty path when the request has no CUDA sources
};

struct Plan {
  std::string name, request_key;
  std::string spec;  // the first name part (the JitSpec's name): recorded for `jitkern cache rm <spec>`
  // The toolchain's versions (hashed; bind() sets it: the lookup needs none).
  std::string toolchain_id;
  // The commands as they run here (real directories, compilers' paths), the toolchain and the compilers'
  // environment: what a failure is remembered against (a broken JITKERN_INCLUDE_DIR fails other commands
  // than a good one). bind() sets it.
  std::string config_key;
  // Directories that may sit elsewhere on another machine (the package's include/, csrc/, lib/,
  // tvm-ffi's): (token, directory), longest directory first. Keys and recorded dependencies name
  // files under them by token, so a cache built in one tree is valid in another.
  std::vector<std::pair<std::string, std::string>> roots;
  std::string cpp_source, cuda_source;
  // Without inputs and outputs; argv[0] (and nvcc's -ccbin) is kCxx / kNvcc until bind().
  std::vector<std::string> cpp_compile, cuda_compile, link;
  // host_without_nvcc: the CUDA source's host pass (the host compiler, CUDA's include directory added
  // by the build); cuda_compile then makes the device image.
  std::vector<std::string> host_pass;
  bool host_without_cudafe = false;  // nvcc's host preprocessing rewritten (host_transform.h) in place of cudafe++
  std::string host_rewrite_unused;   // asked for host_without_cudafe, but cudafe++ it is: why
  std::string host_shared_prefix;    // host_shared_files: the last shared header, as the CUDA source #includes it
  std::string host_prelude;   // host_prelude: the header the host pass -includes (host_prelude.h)
  int device_parts = 1;       // host_without_nvcc: nvcc's device passes (BuildRequest::device_parts)
  bool host_cxx_gcc = false;  // the host compiler is GCC (whose precompiled headers the build may use)
  // JITKERN_DEVICE_COMPILER=nvrtc or auto (the default): NVRTC's options for the kernels (after the host pass; CUDA's include
  // directory is added by the build) and its library; empty where nvcc compiles them.
  std::vector<std::string> nvrtc_options;
  std::string nvrtc_library, nvrtc_source;
  std::string nvrtc_std_dir;  // the standard headers' stand-ins NVRTC reads (<jitkern/detail/rtc_std.h>)
  std::string nvrtc_unused;   // asked for NVRTC, but nvcc compiles the kernels: why
  bool nvrtc_asked = false;   // JITKERN_DEVICE_COMPILER=nvrtc (not auto: NVRTC only for builds run many at once)
  std::vector<std::string> dep_exclude_prefixes;             // files under these are not dependencies
  std::vector<std::string> link_option_files;  // files linker options name (version scripts...): dependencies
  std::vector<std::string> sources;                          // the kernel files, resolved
  bool has_cpp = false, has_cuda = false;
  std::string host_cxx, nvcc, cuda_arch;  // cuda_arch: "sm_90a", or empty without CUDA sources
  // Each wrapper's line in its generated source: a compiler's diagnostic there is about that wrapper.
  struct WrapperLine {
    std::string field, name, expr;  // field: "cpp_wrappers" (host.cc) or "cuda_wrappers" (device.cu)
    int line = 0;
  };
  std::vector<WrapperLine> wrapper_lines;
};

// `request` must have passed validate(). `sources`: plan::sources() (the caller resolved them, so a
// missing file is reported before anything else); `cuda_arch`: the target ("" without CUDA sources);
// `cwd`: the directory relative paths are resolved against (the caller's). Made once per request: the
// key follows from the commands, and binding the compilers (bind) changes neither.
Plan make(const BuildRequest& request, const Config& config, const std::vector<std::string>& sources, const std::string& cuda_arch,
          const fs::WorkingDir& cwd);

// The compilers a miss identified, bound into `plan`: their paths in place of kCxx / kNvcc, what they
// allow (NVRTC, GCC's precompiled headers), their own directories (no dependencies), the toolchain id and
// the config key. `toolchain.nvcc` is ignored without CUDA sources.
void bind(Plan& plan, const Config& config, const Toolchain& toolchain);

// The generated translation unit: the kernel files, the export header, one JITKERN_EXPORT per wrapper;
// `lines` (if given) receives each wrapper's line number.
std::string wrapper_source(const std::vector<std::string>& resolved_files, const std::vector<Wrapper>& wrappers,
                           std::vector<int>* lines = nullptr);

// `text` with every root directory replaced by its token, and back.
std::string portable(const Plan& plan, const std::string& text);
// A path starting with a root directory, with that prefix replaced by its token (nothing else).
std::string portable_path(const Plan& plan, const std::string& path);
std::string local(const Plan& plan, const std::string& path);

// cicc's and ptxas's threads per CUDA compile (--split-compile); see where make() uses it.
inline constexpr int kSplitCompileThreads = 4;

// The bump of this number is what invalidates cached kernels when the runtime library's ABI (what
// kernel modules call) changes; the engine's own code is not part of any key.
inline constexpr int kRuntimeAbi = 2;  // 2: SymbolicSize records its source

}  // namespace jitkern::plan
