#include "config/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <stdexcept>

#include "base/fs_util.h"
#include "base/log.h"
#include "config/settings.h"
#include "base/text.h"
#include "compile/toolchain.h"

namespace jitkern::config {
namespace {

// The compilers and their search settings.
void resolve_compilers(Config* r) {
  r->cxx_env = settings::get("CXX");
  // A relative path names a file from here; compilers run in their scratch directory.
  r->cxx = r->cxx_env.empty() ? "c++" : r->cxx_env.find('/') != std::string::npos ? settings::absolute_path(r->cxx_env, "CXX") : r->cxx_env;
  r->path = settings::get("PATH");
  r->ld_library_path = settings::get("LD_LIBRARY_PATH");
  r->cuda_home = settings::get("CUDA_HOME");
  r->cuda_path = settings::get("CUDA_PATH");
  r->nvcc = "nvcc";
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    const std::string home = settings::path(var);
    if (home.empty()) continue;
    r->nvcc = home + "/bin/nvcc";
    r->nvcc_home_setting = var;
    break;
  }
}

}  // namespace

std::string temp_dir(const Config& c) {
  struct stat st;
  const bool usable = !c.tmpdir.empty() && ::stat(c.tmpdir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && ::access(c.tmpdir.c_str(), W_OK | X_OK) == 0;
  return usable ? c.tmpdir : "/tmp";
}

Config resolve_cache(const EngineConfig& c, const std::string& build_directory) {
  Config r;
  std::string home = settings::get("HOME");
  if (!home.empty() && home[0] != '/' && c.cache_dir.empty() && build_directory.empty() && settings::get("JITKERN_CACHE_DIR").empty())
    throw std::invalid_argument("jitkern: HOME='" + home + "' is a relative path, so the default cache's place would depend on the "
                                "working directory; set HOME to an absolute path or set JITKERN_CACHE_DIR");
  if (home.empty()) home = "/tmp/jitkern-" + std::to_string(::geteuid());  // a shared /tmp/.cache would mix users' caches
  const std::string env_cache = settings::path("JITKERN_CACHE_DIR");
  r.cache_dir = !build_directory.empty() ? settings::absolute_path(build_directory, "build_directory")
                : !c.cache_dir.empty()   ? c.cache_dir
                : !env_cache.empty()     ? env_cache
                                         : home + "/.cache/jitkern";
  const std::string env_lock = settings::path("JITKERN_LOCK_DIR");
  r.lock_dir = !c.lock_dir.empty() ? c.lock_dir : !env_lock.empty() ? env_lock : r.cache_dir + "/locks";
  r.prebuilt_dirs = settings::path_list("JITKERN_PREBUILT_DIRS");
  r.tmpdir = settings::path("TMPDIR");
  resolve_compilers(&r);
  // An invalid value is the request's ValueError (resolve); logging goes on without it.
  log::configure(settings::flag_or_false("JITKERN_QUIET"), settings::flag_or_false("JITKERN_VERBOSE"));
  return r;
}

Config resolve(const EngineConfig& c, const std::string& build_directory, const std::string& engine_lib_dir) {
  settings::check();
  Config r = resolve_cache(c, build_directory);
  r.runtime_lib_dir = engine_lib_dir;
  const std::string package = !c.package_dir.empty() ? c.package_dir : fs::dirname(engine_lib_dir);
  const std::string include = settings::path("JITKERN_INCLUDE_DIR"), csrc = settings::path("JITKERN_CSRC_DIR");
  r.include_dir = !include.empty() ? include : package + "/include";
  r.csrc_dir = !csrc.empty() ? csrc : package + "/csrc";
  for (const auto& [name, dir] : {std::pair{"JITKERN_INCLUDE_DIR", include}, std::pair{"JITKERN_CSRC_DIR", csrc}}) {
    struct stat st;
    if (!dir.empty() && (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)))
      throw std::invalid_argument(std::string("jitkern: ") + name + "='" + dir + "': not a directory (unset it to use the package's own)");
  }
  // tvm-ffi: the configuration, else the environment, else the libtvm_ffi.so loaded in this process.
  r.tvm_ffi_include_dir = !c.tvm_ffi_include_dir.empty() ? c.tvm_ffi_include_dir : settings::path("JITKERN_TVM_FFI_INCLUDE");
  r.tvm_ffi_lib_dir = !c.tvm_ffi_lib_dir.empty() ? c.tvm_ffi_lib_dir : settings::path("JITKERN_TVM_FFI_LIB");
  std::string loaded_lib, loaded_include;
  if ((r.tvm_ffi_include_dir.empty() || r.tvm_ffi_lib_dir.empty()) && toolchain::loaded_tvm_ffi_dirs(&loaded_lib, &loaded_include)) {
    if (r.tvm_ffi_include_dir.empty()) r.tvm_ffi_include_dir = loaded_include;
    if (r.tvm_ffi_lib_dir.empty()) r.tvm_ffi_lib_dir = loaded_lib;
  }
  r.dlpack_include_dir = !c.dlpack_include_dir.empty() ? c.dlpack_include_dir : r.tvm_ffi_include_dir;
  r.tvm_ffi_version = c.tvm_ffi_version;
  if (r.tvm_ffi_include_dir.empty() || r.tvm_ffi_lib_dir.empty())
    throw std::runtime_error(
        "jitkern: tvm-ffi's include and library directories are unknown (no libtvm_ffi.so with headers in ../include is "
        "loaded); set JITKERN_TVM_FFI_INCLUDE and JITKERN_TVM_FFI_LIB, or EngineConfig::tvm_ffi_include_dir/tvm_ffi_lib_dir");
  const std::string arch = settings::get("JITKERN_CUDA_ARCH");
  r.cuda_arch = arch.empty() ? arch : toolchain::validate_arch(arch, "JITKERN_CUDA_ARCH");
  const std::string on_miss = settings::choice("JITKERN_ON_MISS");
  r.on_miss = on_miss == "error" ? OnMiss::kError : on_miss == "warn" ? OnMiss::kWarn : OnMiss::kCompile;
  const std::string device = settings::choice("JITKERN_DEVICE_COMPILER");
  r.device_compiler = device == "nvrtc" ? DeviceCompiler::kNvrtc : device == "nvcc" ? DeviceCompiler::kNvcc : DeviceCompiler::kAuto;
  r.retry_failed = settings::flag("JITKERN_RETRY_FAILED");
  r.nvcc_pipeline = settings::flag("JITKERN_NVCC_PIPELINE");
  r.compile_timeout_s = settings::seconds("JITKERN_COMPILE_TIMEOUT", 900);
  const std::string force = settings::get("JITKERN_FORCE_REBUILD");
  if (r.on_miss != OnMiss::kError && !force.empty() && force != "0")
    for (const auto& name : force == "1" ? std::vector<std::string>{"all"} : text::split(force, ','))
      if (!name.empty()) r.force_rebuild.push_back(name);
  return r;
}

}  // namespace jitkern::config
