// Kernels compiled by NVRTC (JITKERN_DEVICE_COMPILER=nvrtc, the default), for host_without_nvcc modules:
// the host pass runs first, its kernel stubs (the host pass marks them with internal visibility, see
// <jitkern/utils.cuh>) name the kernels to instantiate, and NVRTC compiles the module's source with its
// host code preprocessed away (__CUDACC_RTC__) into a cubin. Each kernel's lowered name must be the
// stub's symbol, or the launches would not find it.
#pragma once

#include <string>
#include <vector>

namespace jitkern::nvrtc {

// The defined functions with internal visibility in the ELF relocatable object at `path` (the host
// pass's kernel stubs), by symbol; false with `*why` if the file cannot be read as one.
bool kernel_stubs(const std::string& path, std::vector<std::string>* out, std::string* why);

// The name expression NVRTC instantiates for a kernel's mangled symbol ("&ns::kernel<args>"), or "" if
// the symbol does not demangle into one.
std::string name_expression(const std::string& symbol);

struct Result {
  bool ok = false;
  std::string log;    // NVRTC's messages, or why NVRTC could not run
  std::string cubin;  // the machine code, when ok
};

// Compiles `source` (named `name` in messages) with `options` into a cubin, instantiating the kernels
// `symbols` name; fails unless each one's lowered name is its symbol. `library` is libnvrtc's path.
Result compile(const std::string& library, const std::string& source, const std::string& name, const std::vector<std::string>& options,
               const std::vector<std::string>& symbols);

}  // namespace jitkern::nvrtc
