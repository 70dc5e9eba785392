#include "toolchain.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "fs_util.h"
#include "settings.h"
#include "sha256.h"
#include "text.h"

namespace jitkern::toolchain {
namespace {
std::mutex g_mutex;  // guards the memo tables below
}  // namespace

Compiler identify(const std::string& program, const std::string& cache_dir, const char* role) {
  static std::unordered_map<std::string, Compiler> memo;
  const std::string memo_key = program + "\n" + cache_dir + "\n" + settings::get("PATH");
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = memo.find(memo_key);
    if (it != memo.end()) return it->second;
  }
  // A record per (program, PATH): where the program resolved to, its size and mtime, and its
  // --version output. The record names the program that gets run, so its directory and the record
  // itself must be as private as the cache.
  const std::string dir = cache_dir + "/toolchains";
  const std::string record = dir + "/" + sha256_hex(program + '\0' + settings::get("PATH")).substr(0, 24) + ".txt";
  fs::ensure_private_dir(dir, "toolchain cache directory");
  Compiler c;
  std::string text;
  if (fs::read_file(record, &text)) {
    fs::check_private_file(record, "toolchain record");
    const auto lines = text::split_lines(text);
    fs::FileSig now;
    // stat() follows the program's symbolic links: a link retargeted to another compiler changes the signature.
    if (lines.size() >= 4 && fs::stat_sig(lines[0], &now) && std::to_string(now.size) == lines[2] &&
        std::to_string(now.mtime_ns) == lines[3]) {
      c.path = lines[0];
      c.real = lines[1];
      const std::size_t head = lines[0].size() + lines[1].size() + lines[2].size() + lines[3].size() + 4;
      c.version = text.substr(std::min(text.size(), head));
      c.identity = lines[1] + "|" + lines[2] + "|" + lines[3] + "\n" + c.version;
    }
  }
  if (c.path.empty()) {
    c.path = fs::which(program);
    if (c.path.empty())
      throw std::runtime_error(std::string("jitkern: ") + role + " '" + program + "' was not found; " +
                               (std::string(role) == "CUDA compiler"
                                    ? "install the CUDA toolkit and set CUDA_HOME (e.g. export CUDA_HOME=/usr/local/cuda)"
                                    : "install one (e.g. apt install g++) or set CXX to a working compiler"));
    const std::string real = c.real = fs::realpath_or(c.path);
    fs::FileSig sig;
    fs::stat_sig(real, &sig);
    const std::string scratch = fs::make_temp_dir(dir, "probe-");
    const std::string log = scratch + "/version.txt";
    const int rc = fs::wait(fs::spawn({c.path, "--version"}, log), 60);
    std::string version;
    fs::read_file(log, &version);
    fs::remove_tree(scratch);
    if (rc != 0) throw std::runtime_error("jitkern: '" + c.path + " --version' failed (" + fs::describe_status(rc) + "): " + version);
    const std::string head = real + "\n" + std::to_string(sig.size) + "\n" + std::to_string(sig.mtime_ns) + "\n";
    fs::write_file_atomic(record, c.path + "\n" + head + version);
    c.version = version;
    c.identity = real + "|" + std::to_string(sig.size) + "|" + std::to_string(sig.mtime_ns) + "\n" + version;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  return memo.emplace(memo_key, c).first->second;
}

std::string cxx_program() {
  const std::string cxx = settings::get("CXX");
  return cxx.empty() ? "c++" : cxx;
}

std::string nvcc_program() {
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    const std::string home = settings::get(var);
    if (home.empty()) continue;
    if (!fs::is_executable_file(home + "/bin/nvcc"))
      throw std::runtime_error(std::string("jitkern: ") + var + "=" + home + " has no bin/nvcc; point it at a CUDA toolkit or unset it");
    return home + "/bin/nvcc";
  }
  return "nvcc";
}

std::string cuda_lib_dir(const std::string& nvcc_path) {
  const std::string root = fs::dirname(fs::dirname(fs::realpath_or(nvcc_path)));
  for (const std::string& d : {root + "/lib64", root + "/targets/x86_64-linux/lib", root + "/lib"})
    if (::access((d + "/libcudart.so").c_str(), F_OK) == 0) return d;
  return root + "/lib64";
}

bool loaded_tvm_ffi_dirs(std::string* lib_dir, std::string* include_dir) {
  static const std::pair<std::string, std::string> dirs = [] {
    void* lib = ::dlopen("libtvm_ffi.so", RTLD_NOW | RTLD_NOLOAD);
    void* sym = lib ? ::dlsym(lib, "TVMFFIFunctionCreate") : nullptr;
    Dl_info info{};
    if (sym == nullptr || !::dladdr(sym, &info) || info.dli_fname == nullptr) return std::pair<std::string, std::string>{};
    const std::string dir = fs::dirname(info.dli_fname[0] == '/' ? std::string(info.dli_fname) : fs::realpath_or(info.dli_fname));
    return std::pair<std::string, std::string>{dir, fs::dirname(dir) + "/include"};
  }();
  if (dirs.first.empty() || ::access((dirs.second + "/tvm/ffi/c_api.h").c_str(), R_OK) != 0) return false;
  *lib_dir = dirs.first, *include_dir = dirs.second;
  return true;
}

std::string arch_for_capability(int major, int minor) {
  return "sm_" + std::to_string(major) + std::to_string(minor) + (major >= 9 ? "a" : "");
}

const std::string& validate_arch(const std::string& arch) {
  bool ok = arch.size() >= 5 && arch.rfind("sm_", 0) == 0;
  std::size_t i = 3;
  while (ok && i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i]))) ++i;
  ok = ok && i >= 5 && (i == arch.size() || (i + 1 == arch.size() && (arch[i] == 'a' || arch[i] == 'f')));
  if (!ok) throw std::invalid_argument("jitkern: invalid CUDA architecture '" + arch + "': expected the form sm_90a, sm_90 or sm_80");
  return arch;
}

namespace {
// Compute capability through the driver API, loaded lazily so that CPU-only use never needs libcuda.
std::string probe(int device) {
  static std::map<int, std::string> memo;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = memo.find(device);
    if (it != memo.end()) return it->second;
  }
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr)
    throw std::runtime_error(
        "jitkern: cannot determine the CUDA architecture: no CUDA driver (libcuda.so.1) is available; set "
        "JITKERN_CUDA_ARCH (e.g. JITKERN_CUDA_ARCH=sm_90a) to compile without a GPU");
  using InitFn = int (*)(unsigned);
  using DeviceGetFn = int (*)(int*, int);
  using AttrFn = int (*)(int*, int, int);
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "cuInit"));
  auto device_get = reinterpret_cast<DeviceGetFn>(::dlsym(lib, "cuDeviceGet"));
  auto attr = reinterpret_cast<AttrFn>(::dlsym(lib, "cuDeviceGetAttribute"));
  constexpr int kMajor = 75, kMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_{MAJOR,MINOR}
  int handle = 0, major = 0, minor = 0;
  if (!init || !device_get || !attr || init(0) != 0 || device_get(&handle, device) != 0 || attr(&major, kMajor, handle) != 0 ||
      attr(&minor, kMinor, handle) != 0)
    throw std::runtime_error("jitkern: cannot determine the CUDA architecture: no usable CUDA device " + std::to_string(device) +
                             "; set JITKERN_CUDA_ARCH (e.g. JITKERN_CUDA_ARCH=sm_90a) to compile without a GPU");
  std::lock_guard<std::mutex> lock(g_mutex);
  return memo.emplace(device, arch_for_capability(major, minor)).first->second;
}
}  // namespace

std::string cuda_arch(const std::string& requested, int device) {
  if (!requested.empty()) return validate_arch(requested);
  const std::string env = settings::get("JITKERN_CUDA_ARCH");
  if (!env.empty()) return validate_arch(env);
  return probe(device < 0 ? 0 : device);
}

}  // namespace jitkern::toolchain
