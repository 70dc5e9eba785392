#include "compile/toolchain.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "config/compile_env.h"
#include "base/fs_util.h"
#include "store/manifest.h"
#include "base/sha256.h"
#include "store/store.h"
#include "base/text.h"

namespace jitkern::toolchain {
namespace {
std::mutex g_mutex;  // guards the memo tables below
}  // namespace

namespace {
// The directories whose files are the compiler's own (see Compiler::own_dirs).
std::vector<std::string> own_directories(const std::string& real, bool cuda) {
  const std::string root = fs::dirname(fs::dirname(real));
  if (!cuda) return {root + "/lib/gcc/", root + "/include/c++/"};
  std::vector<std::string> dirs = {root + "/targets/", root + "/nvvm/"};
  // include/ is the toolkit's own in a toolkit's tree (/usr/local/cuda-13.0, /opt/cuda), not in a
  // shared prefix (a conda environment, /usr/local) where it also holds other packages' headers.
  const std::string base = root.substr(root.rfind('/') + 1);
  if (base.rfind("cuda", 0) == 0 || ::access((root + "/version.json").c_str(), F_OK) == 0) dirs.push_back(root + "/include/");
  return dirs;
}
}  // namespace

Compiler locate(const std::string& program, const std::string& path) {
  static std::unordered_map<std::string, Compiler> memo;
  const std::string memo_key = program + '\0' + path;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (auto it = memo.find(memo_key); it != memo.end()) return it->second;
  }
  Compiler c;
  c.path = fs::which(program, path);
  if (!c.path.empty()) {
    fs::stat_sig(c.path, &c.sig);  // follows its links: the file that runs
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  return memo.emplace(memo_key, c).first->second;
}

Compiler identify(const std::string& program, const store::Store& store, const char* role, const config::Config& config) {
  Compiler c = locate(program, config.path);
  if (c.path.empty())
    throw std::runtime_error(std::string("jitkern: ") + role + " '" + program + "' was not found; " +
                             (std::string(role) == "CUDA compiler"
                                  ? "install the CUDA toolkit and set CUDA_HOME (e.g. export CUDA_HOME=/usr/local/cuda)"
                                  : "install one (e.g. apt install g++) or set CXX to a working compiler"));
  const bool cuda = std::string(role) == "CUDA compiler";
  c.real = fs::realpath_or(c.path);
  c.own_dirs = own_directories(c.real, cuda);
  static std::unordered_map<std::string, std::string> memo;  // (store, record head) -> version
  // The record names what was run and what it said: (real path, size, mtime), then --version.
  const std::string head = c.real + "\n" + std::to_string(c.sig.size) + "\n" + std::to_string(c.sig.mtime_ns) + "\n";
  const std::string name = sha256_hex(program + '\0' + config.path).substr(0, 24) + ".txt";
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (auto it = memo.find(store.root() + '\0' + head); it != memo.end()) return c.version = it->second, c;
  }
  std::string text;
  if (store.read_toolchain_record(name, &text) && text.rfind(head, 0) == 0) {
    c.version = text.substr(head.size());
  } else {
    const std::string scratch = fs::make_temp_dir(config::temp_dir(config), "jitkern-probe-");
    const std::string log = scratch + "/version.txt";
    const int rc = fs::wait(fs::spawn({c.path, "--version"}, log, compile_env::make(config, {"TMPDIR=" + scratch}), scratch), 60);
    fs::read_file(log, &c.version);
    fs::remove_tree(scratch);
    if (rc != 0) throw std::runtime_error("jitkern: '" + c.path + " --version' failed (" + fs::describe_status(rc) + "): " + c.version);
    store.write_toolchain_record(name, head + c.version);
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  memo.emplace(store.root() + '\0' + head, c.version);
  return c;
}

std::string id(const Compiler& cxx, const Compiler* nvcc) {
  Sha256 h;
  h.field("cxx").field(cxx.version);
  if (nvcc != nullptr) h.field("nvcc").field(nvcc->version);
  return h.hex();
}

std::string search_key(const config::Config& config, bool cuda) {
  Sha256 h;
  h.field("CXX").field(config.cxx_env).field("PATH").field(config.path);
  if (cuda) h.field("CUDA_HOME").field(config.cuda_home).field("CUDA_PATH").field(config.cuda_path);
  return h.hex();
}

bool accepts(const manifest::Manifest& m, const store::Store& store, const config::Config& config, bool cuda) {
  if (!m.compiler_search.empty() && m.compiler_search == search_key(config, cuda) && m.compilers.size() == (cuda ? 2u : 1u) &&
      std::all_of(m.compilers.begin(), m.compilers.end(), [](const manifest::Dep& c) {
        fs::FileSig now;
        return fs::stat_sig(c.path, &now) && now == c.sig;
      }))
    return true;
  Compiler cxx = locate(config.cxx, config.path), nvcc;
  try {
    if (cuda) nvcc = locate(nvcc_program(config), config.path);
  } catch (const std::exception&) {
    return true;  // a CUDA_HOME without nvcc: no CUDA compiler here
  }
  if (cxx.path.empty() || (cuda && nvcc.path.empty())) return true;  // a serving machine without compilers
  std::vector<manifest::Dep> here(cuda ? 2 : 1);
  here[0].path = cxx.path, here[0].sig = cxx.sig;
  if (cuda) here[1].path = nvcc.path, here[1].sig = nvcc.sig;
  const bool same_files = here.size() == m.compilers.size() &&
                          std::equal(here.begin(), here.end(), m.compilers.begin(), [](const auto& a, const auto& b) {
                            return a.path == b.path && a.sig == b.sig;
                          });
  if (same_files) return true;
  try {
    cxx = identify(config.cxx, store, "C++ compiler", config);
    if (cuda) nvcc = identify(nvcc_program(config), store, "CUDA compiler", config);
  } catch (const std::exception&) {
    return true;  // a compiler that cannot run here builds nothing either
  }
  return id(cxx, cuda ? &nvcc : nullptr) == m.toolchain;
}

std::string nvcc_program(const config::Config& config) {
  if (!config.nvcc_home_setting.empty() && !fs::is_executable_file(config.nvcc))
    throw std::runtime_error("jitkern: " + config.nvcc_home_setting + "=" + fs::dirname(fs::dirname(config.nvcc)) +
                             " has no bin/nvcc; point it at a CUDA toolkit or unset it");
  return config.nvcc;
}

namespace {
// The toolkit that `nvcc_path` (<root>/bin/nvcc) belongs to.
std::string toolkit_root(const std::string& nvcc_path) { return fs::dirname(fs::dirname(fs::realpath_or(nvcc_path))); }
}  // namespace

std::string cuda_lib_dir(const std::string& nvcc_path) {
  const std::string root = toolkit_root(nvcc_path);
  for (const std::string& d : {root + "/lib64", root + "/targets/x86_64-linux/lib", root + "/lib"})
    if (::access((d + "/libcudart.so").c_str(), F_OK) == 0) return d;
  return root + "/lib64";
}

std::string cuda_include_dir(const std::string& nvcc_path) {
  const std::string root = toolkit_root(nvcc_path);
  // nvcc's own include directory first: under targets/, one of the toolkit's own directories (own_directories).
  for (const std::string& d : {root + "/targets/x86_64-linux/include", root + "/targets/sbsa-linux/include", root + "/include"})
    if (::access((d + "/cuda_runtime_api.h").c_str(), F_OK) == 0) return d;
  return root + "/include";
}

std::string nvrtc_library(const std::string& nvcc_path) {
  const std::string dir = cuda_lib_dir(nvcc_path);  // beside the CUDA runtime the modules link
  for (const char* name : {"/libnvrtc.so", "/libnvrtc.so.13"})
    if (::access((dir + name).c_str(), R_OK) == 0) return dir + name;
  return "";
}

bool loaded_tvm_ffi_dirs(std::string* lib_dir, std::string* include_dir) {
  // Found once (a loaded library with its headers beside it), then remembered: the warm path asks on
  // every load. Not found is asked again (tvm-ffi may be loaded after the engine).
  static std::mutex mutex;
  static std::string found_lib, found_include;
  std::lock_guard<std::mutex> lock(mutex);
  if (found_lib.empty()) {
    // The directory of the library defining `sym`, if its headers are beside it.
    const auto with_headers = [](void* sym) -> std::string {
      const std::string dir = sym != nullptr ? fs::loaded_object_dir(sym) : "";
      return !dir.empty() && ::access((fs::dirname(dir) + "/include/tvm/ffi/c_api.h").c_str(), R_OK) == 0 ? dir : "";
    };
    // The global scope (Python loads tvm-ffi RTLD_GLOBAL) first: cheaper than dlopen's comparison of
    // the name with every loaded object, which it falls back to.
    std::string dir = with_headers(::dlsym(RTLD_DEFAULT, "TVMFFIFunctionCreate"));
    if (dir.empty()) {
      void* lib = ::dlopen("libtvm_ffi.so", RTLD_NOW | RTLD_NOLOAD);
      dir = with_headers(lib != nullptr ? ::dlsym(lib, "TVMFFIFunctionCreate") : nullptr);
    }
    if (dir.empty()) return false;
    found_lib = dir, found_include = fs::dirname(dir) + "/include";
  }
  *lib_dir = found_lib, *include_dir = found_include;
  return true;
}

std::string arch_for_capability(int major, int minor) {
  return "sm_" + std::to_string(major) + std::to_string(minor) + (major >= 9 ? "a" : "");
}

const std::string& validate_arch(const std::string& arch, const std::string& origin) {
  bool ok = arch.size() >= 5 && arch.rfind("sm_", 0) == 0;
  std::size_t i = 3;
  while (ok && i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i]))) ++i;
  ok = ok && i >= 5 && (i == arch.size() || (i + 1 == arch.size() && (arch[i] == 'a' || arch[i] == 'f')));
  if (!ok)
    throw std::invalid_argument("jitkern: invalid CUDA architecture '" + arch + "' (from " + origin +
                                "): expected sm_ and the compute capability's digits, optionally followed by a (architecture-specific) or "
                                "f (family-specific): sm_80, sm_90, sm_90a, sm_100a, sm_100f");
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

std::string cuda_arch(const std::string& requested, int device, const config::Config& config) {
  if (!requested.empty()) return validate_arch(requested, kSpecArch);
  if (!config.cuda_arch.empty()) return config.cuda_arch;
  const int d = device < 0 ? 0 : device;
  return validate_arch(probe(d), "the compute capability of CUDA device " + std::to_string(d));
}

}  // namespace jitkern::toolchain
