// Loading a built module and looking up its exports.
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <jitkern/jit.h>

#include "build.h"
#include "config/config.h"
#include "base/fs_util.h"
#include "compile/toolchain.h"

namespace jitkern {
namespace {

// Modules carry no RUNPATH (a relocated cache must not look for libraries in the build machine's
// directories): what one needs and the process has not loaded yet is loaded here from where this
// machine has it (the engine's lib/, tvm-ffi's, the CUDA toolkit's), then the load is tried again.
std::mutex g_sources_mutex;
std::vector<std::string> g_library_dirs;                          // note_library_sources()
std::vector<std::pair<std::string, std::string>> g_nvcc_programs;  // (nvcc, PATH): the CUDA runtime is beside it

bool preload_missing_library(const std::string& dlerror_text) {
  const std::size_t end = dlerror_text.find(": cannot open shared object file");
  if (end == std::string::npos) return false;
  const std::size_t begin = dlerror_text.rfind(": ", end - 1);
  const std::string name = dlerror_text.substr(begin == std::string::npos ? 0 : begin + 2, end - (begin == std::string::npos ? 0 : begin + 2));
  if (name.empty() || name.find('/') != std::string::npos) return false;
  std::vector<std::string> dirs = {config::engine_lib_dir()};
  std::vector<std::pair<std::string, std::string>> nvccs;
  {
    std::lock_guard<std::mutex> lock(g_sources_mutex);
    dirs.insert(dirs.end(), g_library_dirs.begin(), g_library_dirs.end());
    nvccs = g_nvcc_programs;
  }
  for (const auto& [program, path] : nvccs)
    if (const toolchain::Compiler nvcc = toolchain::locate(program, path); !nvcc.path.empty()) dirs.push_back(toolchain::cuda_lib_dir(nvcc.path));
  std::string tvm_lib, tvm_include;
  if (toolchain::loaded_tvm_ffi_dirs(&tvm_lib, &tvm_include)) dirs.push_back(tvm_lib);
  for (const auto& dir : dirs)
    if (::access((dir + "/" + name).c_str(), R_OK) == 0 && ::dlopen((dir + "/" + name).c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr) return true;
  return false;
}

void* open_library(const std::string& name, const std::string& path) {
  void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  for (int attempt = 0; handle == nullptr && attempt < 4; ++attempt) {
    const std::string why = ::dlerror();
    if (!preload_missing_library(why)) {
      const std::string noexec = fs::noexec_problem(path);
      throw std::runtime_error("jitkern: cannot load " + path + ": " + why +
                               (why.find("cannot open shared object file") != std::string::npos
                                    ? " (install it where the dynamic linker finds it, or load the library that provides it first, e.g. import torch)"
                                : !noexec.empty() ? " (" + noexec + ")"
                                                  : ""));
    }
    handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (handle == nullptr) throw std::runtime_error("jitkern: cannot load " + path + ": " + ::dlerror());
  return handle;
}

}  // namespace

void note_library_sources(const config::Config& cfg) {
  const auto add = [](auto& list, const auto& value) {
    if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
  };
  std::lock_guard<std::mutex> lock(g_sources_mutex);
  for (const auto& d : {cfg.runtime_lib_dir, cfg.tvm_ffi_lib_dir})
    if (!d.empty()) add(g_library_dirs, d);
  add(g_nvcc_programs, std::pair{cfg.nvcc, cfg.path});
}

Module::Module(const std::string& path) : m_path(path) { m_handle = open_library(path, path); }

Module::Module(const std::string& path, int fd) : m_path(path) {
  // The file the cache checked, whatever its path names now: mapped through /proc/self/fd/N. glibc
  // keeps that name for the library and matches a later dlopen of it to that library, so a number
  // reused after the descriptor was closed (ours are, once mapped: a process holds none per module)
  // would return the earlier module: such a handle is dropped and the path, checked to still be the
  // same file, is loaded instead.
  fs::Fd owned(fd);
  static const bool have_proc = ::access("/proc/self/fd", F_OK) == 0;  // a container may lack /proc
  static std::mutex mutex;
  static std::unordered_set<void*> loaded;  // every module this constructor mapped
  std::lock_guard<std::mutex> lock(mutex);
  const std::string via_fd = "/proc/self/fd/" + std::to_string(fd);
  m_handle = open_library(have_proc ? via_fd : path, path);
  if (have_proc && loaded.count(m_handle) != 0) {
    ::dlclose(m_handle);
    struct stat checked {}, now {};
    if (::fstat(fd, &checked) != 0 || ::stat(path.c_str(), &now) != 0 || checked.st_dev != now.st_dev || checked.st_ino != now.st_ino)
      throw std::runtime_error("jitkern: cannot load " + path + ": it was replaced while it was being loaded");
    m_handle = open_library(path, path);
  }
  loaded.insert(m_handle);
  link_map* lm = nullptr;
  if (have_proc && ::dlinfo(m_handle, RTLD_DI_LINKMAP, &lm) == 0 && lm != nullptr && std::strcmp(lm->l_name, via_fd.c_str()) == 0)
    lm->l_name = ::strdup(path.c_str());  // debuggers and profilers read the library's name here
}

Module::~Module() {
  // Kernel modules stay mapped: CUDA may still run their kernels asynchronously.
}

TVMFFISafeCallType Module::function(const std::string& name) const {
  void* sym = ::dlsym(m_handle, ("__tvm_ffi_" + name).c_str());
  if (sym == nullptr) throw std::runtime_error("jitkern: module " + m_path + " exports no function '" + name + "'");
  return reinterpret_cast<TVMFFISafeCallType>(sym);
}

void* Module::symbol(const std::string& name) const { return ::dlsym(m_handle, name.c_str()); }

std::shared_ptr<Module> load(const BuildRequest& request, const EngineConfig& config) {
  bool compiled = false;
  store::Found found = find_or_build(request, config, &compiled);  // its lock is released once mapped
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<Module>> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = loaded[found.path];
  if (!slot) {
    slot = std::make_shared<Module>(found.path, found.fd.get());
    found.fd.release();  // the Module keeps it
  }
  return slot;
}

}  // namespace jitkern
