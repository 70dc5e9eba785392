#include "settings.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace jitkern::settings {

const Setting kAll[] = {
    {"JITKERN_CACHE_DIR", "~/.cache/jitkern", "where compiled modules are cached (private to the user: mode 0700)"},
    {"JITKERN_PREBUILT_DIRS", "none", "colon-separated read-only caches (from `jitkern prebuild`) searched before JITKERN_CACHE_DIR; verified, never written"},
    {"JITKERN_LOCK_DIR", "$JITKERN_CACHE_DIR/locks", "where per-module build locks live (keep it on a local file system)"},
    {"JITKERN_CUDA_ARCH", "the device's, e.g. sm_90a", "the CUDA target (sm_XY, sm_XYa, sm_XYf); set it to compile without a GPU"},
    {"JITKERN_RETRY_FAILED", "0", "1: retry a build whose failure was remembered although its inputs are unchanged"},
    {"JITKERN_COMPILE_TIMEOUT", "900", "seconds after which a compile's processes are killed and the call fails (not remembered)"},
    {"JITKERN_ON_MISS", "compile", "what a load does when its module is not cached: compile; warn (log one line naming it, then compile); error (raise CacheMissError)"},
    {"JITKERN_QUIET", "0", "1: no 'compiling ...' lines on stderr (the `jitkern` logger's default handler)"},
    {"JITKERN_VERBOSE", "0", "1: also log every compiler command (the `jitkern` logger at DEBUG)"},
    {"JITKERN_NVCC_PIPELINE", "1", "0: run nvcc as one command instead of its host and device phases in parallel"},
    {"JITKERN_INCLUDE_DIR", "the package's include/", "the kernel headers (point it at a checkout's include/ to edit them without reinstalling)"},
    {"JITKERN_CSRC_DIR", "the package's csrc/", "jitkern's kernel sources (point it at a checkout's csrc/ to edit them without reinstalling)"},
    {"JITKERN_TVM_FFI_INCLUDE", "include/ beside the loaded libtvm_ffi.so's lib/", "tvm-ffi's headers (for a tvm-ffi laid out otherwise, or C++ programs that do not load it)"},
    {"JITKERN_TVM_FFI_LIB", "the loaded libtvm_ffi.so's directory", "the directory of libtvm_ffi.so (likewise)"},
    {"CUDA_HOME", "CUDA_PATH, else nvcc on PATH", "the CUDA toolkit whose bin/nvcc compiles CUDA sources"},
    {"CUDA_PATH", "unset", "used when CUDA_HOME is unset"},
    {"CXX", "c++ on PATH", "the host C++ compiler (also nvcc's -ccbin when set)"},
    {"PATH", "the process's", "where compilers named without a directory are found"},
    {"HOME", "the user's", "the default cache's parent"},
};
const std::size_t kCount = sizeof(kAll) / sizeof(kAll[0]);

std::string get(const char* name) {
  bool known = false;
  for (const Setting& s : kAll) known = known || std::strcmp(s.name, name) == 0;
  if (!known) throw std::logic_error(std::string("jitkern: internal error: undeclared setting ") + name);
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

bool flag(const char* name) {
  const std::string v = get(name);
  return !v.empty() && v != "0" && v != "false" && v != "no";
}

std::string fingerprint() {
  std::string out;
  for (const Setting& s : kAll) {
    const char* v = std::getenv(s.name);
    out += std::string(s.name) + "=" + (v ? v : "") + "\n";
  }
  return out;
}

std::string markdown() {
  std::string out = "| variable | when unset | what it does |\n|---|---|---|\n";
  for (const Setting& s : kAll) out += std::string("| `") + s.name + "` | " + s.fallback + " | " + s.meaning + " |\n";
  return out;
}

}  // namespace jitkern::settings
