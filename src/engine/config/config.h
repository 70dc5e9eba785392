// The configuration stage: every setting's effective value, resolved once per request (absolute paths,
// enums, numbers), with the compilers' environment. Only this stage reads settings (settings.h); the
// stages after it (plan, toolchain, store, build) read this struct.
#pragma once

#include <jitkern/jit.h>

#include "config/settings.h"

#include <string>
#include <vector>

namespace jitkern::config {

enum class OnMiss { kCompile, kWarn, kError };
enum class DeviceCompiler { kAuto, kNvrtc, kNvcc };

struct Config {
  // Where things are.
  std::string cache_dir, lock_dir, include_dir, csrc_dir, runtime_lib_dir;
  std::string tvm_ffi_include_dir, dlpack_include_dir, tvm_ffi_lib_dir, tvm_ffi_version;
  std::vector<std::string> prebuilt_dirs;  // JITKERN_PREBUILT_DIRS, in order
  std::string tmpdir;  // TMPDIR made absolute ("" unset): see temp_dir()
  // The compilers: the programs as a build runs them (a CXX naming a path is made absolute) and what
  // they are searched with.
  std::string cxx = "c++";
  std::string nvcc = "nvcc";
  std::string nvcc_home_setting;  // "CUDA_HOME" or "CUDA_PATH" where one named nvcc's toolkit (checked when nvcc is needed)
  std::string cxx_env, path, ld_library_path, cuda_home, cuda_path;  // the raw values (search keys, compilers' environment)
  std::string cuda_arch;  // JITKERN_CUDA_ARCH, validated ("" when unset)
  // Behaviour.
  OnMiss on_miss = OnMiss::kCompile;
  DeviceCompiler device_compiler = DeviceCompiler::kAuto;
  bool retry_failed = false, nvcc_pipeline = true;
  double compile_timeout_s = 900;
  // JITKERN_FORCE_REBUILD: the module names to compile again although cached ("all": every module); none
  // with JITKERN_ON_MISS=error, which never compiles.
  std::vector<std::string> force_rebuild;
};

// The directory of the engine's library (the package's lib/ when installed): where the package's
// include/, csrc/ and the runtime library are found.
const std::string& engine_lib_dir();

// The compiler probe's and the precompiled preludes' parent: TMPDIR where it is a writable directory,
// else /tmp (a missing TMPDIR is no part of a build). Looked at only by the cold path.
std::string temp_dir(const Config& config);

// Only the cache and lock directories and what cache administration reads (no tvm-ffi): the build
// directory, else the EngineConfig's, else JITKERN_CACHE_DIR / JITKERN_LOCK_DIR, else
// ~/.cache/jitkern[/locks]. std::invalid_argument names a setting that is invalid.
Config resolve_cache(const EngineConfig& config, const std::string& build_directory);
// Everything; `engine_lib_dir`: where the engine's (and the runtime's) library lives (the package is
// its parent). Validates every setting (a bad one is a ValueError on every load, not only on a miss).
Config resolve(const EngineConfig& config, const std::string& build_directory, const std::string& engine_lib_dir);

// What `jitkern config` and `jitkern doctor` show: each setting as set and as it applies (the value this
// stage resolves it to), with what is wrong with it; each setting judged on its own, so one bad value
// does not hide the others.
struct SettingReport {
  const settings::Setting* setting;
  bool set = false;  // in the environment (possibly empty)
  std::string value, effective, problem;
};
struct Report {
  std::vector<SettingReport> settings;
  std::vector<std::string> unknown;        // JITKERN_* variables that are no setting (settings::unknown)
  std::vector<std::string> prebuilt_dirs;  // JITKERN_PREBUILT_DIRS as resolved (empty when invalid)
};
Report report(const std::string& engine_lib_dir);

}  // namespace jitkern::config
