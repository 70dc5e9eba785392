// Loading a built module and looking up its exports.
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include <jitkern/jit.h>

#include "build.h"

namespace jitkern {

Module::Module(const std::string& path) : m_path(path) {
  m_handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (m_handle == nullptr) throw std::runtime_error("jitkern: cannot load " + path + ": " + ::dlerror());
}

Module::Module(const std::string& path, int fd) : m_path(path), m_fd(fd) {
  // The file the cache checked, whatever its path names now; /proc/self/fd is how glibc maps an fd.
  // The fd stays open while the module lives: glibc matches a later dlopen by this name, so the
  // number must not be reused for another file.
  const std::string via_fd = "/proc/self/fd/" + std::to_string(fd);
  static const bool have_proc = ::access("/proc/self/fd", F_OK) == 0;  // a container may lack /proc
  m_handle = ::dlopen(have_proc ? via_fd.c_str() : path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (m_handle == nullptr) {
    ::close(m_fd);
    throw std::runtime_error("jitkern: cannot load " + path + ": " + ::dlerror());
  }
  link_map* lm = nullptr;
  if (have_proc && ::dlinfo(m_handle, RTLD_DI_LINKMAP, &lm) == 0 && lm != nullptr && std::strcmp(lm->l_name, via_fd.c_str()) == 0)
    lm->l_name = ::strdup(path.c_str());  // debuggers and profilers read the library's name here
}

Module::~Module() {
  // Kernel modules stay mapped (CUDA may still run their kernels asynchronously), so their fd stays open.
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
