#include "config/config.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
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

const std::string& engine_lib_dir() {
  static const std::string dir = [] {
    std::string d = fs::loaded_object_dir(reinterpret_cast<const void*>(&engine_lib_dir));
    if (d.empty()) {  // linked into the main program
      Dl_info info{};
      if (::dladdr(reinterpret_cast<void*>(&engine_lib_dir), &info) && info.dli_fname && *info.dli_fname)
        d = fs::dirname(info.dli_fname[0] == '/' ? std::string(info.dli_fname) : fs::realpath_or(info.dli_fname));
    }
    return d.empty() ? std::string(".") : d;
  }();
  return dir;
}

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

Report report(const std::string& engine_lib_dir) {
  const auto attempt = [](auto&& f) -> std::pair<std::string, std::string> {  // (value, problem)
    try {
      return {f(), ""};
    } catch (const std::exception& e) {
      return {"", std::string(e.what()).substr(std::string(e.what()).rfind("jitkern: ", 0) == 0 ? 9 : 0)};
    }
  };
  Config cached;
  const auto where = attempt([&] { return (cached = resolve_cache({}, "")), std::string(); });
  const std::pair<std::string, std::string> cache = {cached.cache_dir, where.second}, locks = {cached.lock_dir, where.second};
  // The resolution stops at its first bad setting: its problem is that setting's only (one bad
  // JITKERN_CUDA_ARCH is one problem, not one per path setting).
  const auto problem_of = [](const std::string& name, const std::string& problem) {
    return problem.find(name) != std::string::npos ? problem : std::string();
  };
  Config resolved;
  const auto paths = attempt([&] { return (resolved = resolve({}, "", engine_lib_dir)), std::string(); });
  Report out;
  for (std::size_t i = 0; i < settings::kCount; ++i) {
    const settings::Setting& s = settings::kAll[i];
    const std::string name = s.name, raw = settings::get(s.name);
    std::pair<std::string, std::string> effective;
    if (name == "JITKERN_CACHE_DIR") effective = cache;
    else if (name == "JITKERN_LOCK_DIR") effective = locks;
    else if (name == "JITKERN_INCLUDE_DIR") effective = {resolved.include_dir, problem_of(name, paths.second)};
    else if (name == "JITKERN_CSRC_DIR") effective = {resolved.csrc_dir, problem_of(name, paths.second)};
    else if (name == "JITKERN_TVM_FFI_INCLUDE") effective = {resolved.tvm_ffi_include_dir, problem_of(name, paths.second)};
    else if (name == "JITKERN_TVM_FFI_LIB") effective = {resolved.tvm_ffi_lib_dir, problem_of(name, paths.second)};
    else if (name == "CXX") effective = attempt([&] { return toolchain::locate(cached.cxx, cached.path).path; });
    else if (name == "CUDA_HOME" || name == "CUDA_PATH")
      effective = attempt([&] { return raw.empty() ? std::string() : settings::path(s.name); });
    else if (s.kind == settings::Kind::kPathList)
      effective = attempt([&] {
        std::string joined;
        for (const auto& d : settings::path_list(s.name)) joined += (joined.empty() ? "" : ":") + d;
        return joined;
      });
    else if (s.kind == settings::Kind::kFlag) effective = attempt([&] { return std::string(settings::flag(s.name) ? "on" : "off"); });
    else if (s.kind == settings::Kind::kSeconds)
      effective = attempt([&] {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", settings::seconds(s.name, std::strtod(s.fallback, nullptr)));
        return std::string(buf);
      });
    else if (s.kind == settings::Kind::kChoice) effective = attempt([&] { return settings::choice(s.name); });
    else if (s.kind == settings::Kind::kArch) effective = attempt([&] { return raw.empty() ? raw : toolchain::validate_arch(raw, s.name); });
    else effective = {raw, ""};
    // A path setting's own problem wins over the resolution's (which names the first bad one anyway).
    if (!raw.empty() && s.kind == settings::Kind::kPath) {
      const auto own = attempt([&] { return settings::path(s.name); });
      if (!own.second.empty()) effective = own;
    }
    out.settings.push_back({&s, std::getenv(s.name) != nullptr, raw, effective.first, effective.second});
  }
  out.unknown = settings::unknown();
  out.prebuilt_dirs = cached.prebuilt_dirs;
  return out;
}

}  // namespace jitkern::config
