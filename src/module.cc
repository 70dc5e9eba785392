// Loading a built module and looking up its exports.
#include <dlfcn.h>

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
  std::unique_ptr<fs::FileLock> hold;  // released once the library is mapped
  const std::string path = build_holding(request, config, &hold);
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<Module>> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = loaded[path];
  if (!slot) slot = std::make_shared<Module>(path);
  return slot;
}

}  // namespace jitkern
