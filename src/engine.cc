// The JIT engine: wrapper generation, cache keys, compile driver, content-addressed on-disk cache
// with per-key locks, failure memory and loading. See DESIGN.md, "Cache: correct first, then fast".
#include <dlfcn.h>
#include <sys/stat.h>
#include <jitkern/jit.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "fs_util.h"
#include "sha256.h"

#ifndef JITKERN_VERSION
#define JITKERN_VERSION "0.0.0"
#endif

namespace jitkern {
namespace {

constexpr const char* kManifestMagic = "jitkern-manifest 1";

std::string env_or(const char* name, const std::string& fallback = {}) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

bool env_flag(const char* name) {
  const std::string v = env_or(name);
  return !v.empty() && v != "0" && v != "false" && v != "no";
}

bool quiet() { return env_flag("JITKERN_QUIET"); }

std::vector<std::string> split_lines(const std::string& text);

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.') ? c : '_';
  return out.substr(0, 80);
}

// ---------------------------------------------------------------------------------------------
// Configuration and toolchain discovery (memoised: the warm path must not probe anything twice).

std::string runtime_library_dir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&runtime_library_dir), &info) && info.dli_fname)
    return fs::dirname(info.dli_fname[0] == '/' ? std::string(info.dli_fname) : fs::realpath_or(info.dli_fname));
  return ".";
}

struct ResolvedConfig {
  std::string cache_dir, lock_dir, include_dir, csrc_dir, runtime_lib_dir;
  std::string tvm_ffi_include_dir, dlpack_include_dir, tvm_ffi_lib_dir, tvm_ffi_version;
};

ResolvedConfig resolve(const EngineConfig& c, const std::string& build_directory) {
  ResolvedConfig r;
  const std::string home = env_or("HOME", "/tmp");
  r.cache_dir = !build_directory.empty() ? build_directory
                : !c.cache_dir.empty()   ? c.cache_dir
                                         : env_or("JITKERN_CACHE_DIR", home + "/.cache/jitkern");
  r.lock_dir = !c.lock_dir.empty() ? c.lock_dir : env_or("JITKERN_LOCK_DIR", r.cache_dir + "/locks");
  r.runtime_lib_dir = runtime_library_dir();
  const std::string package = !c.package_dir.empty() ? c.package_dir : fs::dirname(r.runtime_lib_dir);
  r.include_dir = env_or("JITKERN_INCLUDE_DIR", package + "/include");
  r.csrc_dir = env_or("JITKERN_CSRC_DIR", package + "/csrc");
  r.tvm_ffi_include_dir = !c.tvm_ffi_include_dir.empty() ? c.tvm_ffi_include_dir : env_or("JITKERN_TVM_FFI_INCLUDE");
  r.dlpack_include_dir = !c.dlpack_include_dir.empty() ? c.dlpack_include_dir : r.tvm_ffi_include_dir;
  r.tvm_ffi_lib_dir = !c.tvm_ffi_lib_dir.empty() ? c.tvm_ffi_lib_dir : env_or("JITKERN_TVM_FFI_LIB");
  r.tvm_ffi_version = c.tvm_ffi_version;
  if (r.tvm_ffi_include_dir.empty() || r.tvm_ffi_lib_dir.empty())
    throw std::runtime_error(
        "jitkern: tvm-ffi's include and library directories are unknown; the Python package passes them, C++ "
        "programs set EngineConfig::tvm_ffi_include_dir/tvm_ffi_lib_dir or JITKERN_TVM_FFI_INCLUDE/JITKERN_TVM_FFI_LIB");
  return r;
}

struct Compiler {
  std::string path;      // absolute
  std::string identity;  // realpath, size, mtime and --version output
};

std::mutex g_mutex;  // guards the memo tables below

// The identity of a compiler binary, with its --version output cached on disk by (path, size,
// mtime) so that warm loads in fresh processes run no subprocess.
Compiler identify_compiler(const std::string& program, const std::string& cache_dir, const char* role) {
  static std::unordered_map<std::string, Compiler> memo;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = memo.find(program + "\n" + cache_dir);
    if (it != memo.end()) return it->second;
  }
  // A record per (program, PATH) remembers where the program resolved to and its --version, so that
  // a fresh process identifies the compiler with one read and one stat: no PATH walk, no subprocess.
  const std::string dir = cache_dir + "/toolchains";
  const std::string record = dir + "/" + sha256_hex(program + '\0' + env_or("PATH")).substr(0, 24) + ".txt";
  Compiler c;
  std::string text;
  if (fs::read_file(record, &text)) {
    const auto lines = split_lines(text);
    fs::FileSig now;
    if (lines.size() >= 4 && fs::stat_sig(lines[1], &now) && std::to_string(now.size) == lines[2] &&
        std::to_string(now.mtime_ns) == lines[3]) {
      c.path = lines[0];
      c.identity = lines[1] + "|" + lines[2] + "|" + lines[3] + "\n" + text.substr(std::min(text.size(), lines[0].size() + lines[1].size() + lines[2].size() + lines[3].size() + 4));
    }
  }
  if (c.path.empty()) {
    c.path = fs::which(program);
    if (c.path.empty())
      throw std::runtime_error(std::string("jitkern: ") + role + " '" + program + "' was not found (set " +
                               (std::string(role) == "CUDA compiler" ? "CUDA_HOME" : "CXX") + " or PATH)");
    const std::string real = fs::realpath_or(c.path);
    fs::FileSig sig;
    fs::stat_sig(real, &sig);
    fs::ensure_private_dir(dir, "toolchain cache directory");
    const std::string scratch = fs::make_temp_dir(dir, "probe-");
    const std::string log = scratch + "/version.txt";
    const int rc = fs::wait(fs::spawn({c.path, "--version"}, log));
    std::string version;
    fs::read_file(log, &version);
    fs::remove_tree(scratch);
    if (rc != 0) throw std::runtime_error("jitkern: '" + c.path + " --version' failed: " + version);
    const std::string head = real + "\n" + std::to_string(sig.size) + "\n" + std::to_string(sig.mtime_ns) + "\n";
    fs::write_file_atomic(record, c.path + "\n" + head + version);
    c.identity = real + "|" + std::to_string(sig.size) + "|" + std::to_string(sig.mtime_ns) + "\n" + version;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  return memo.emplace(program + "\n" + cache_dir, c).first->second;
}

std::string nvcc_program() {
  const std::string cuda_home = env_or("CUDA_HOME", env_or("CUDA_PATH"));
  if (!cuda_home.empty() && fs::is_executable_file(cuda_home + "/bin/nvcc")) return cuda_home + "/bin/nvcc";
  return "nvcc";
}

std::string cuda_lib_dir(const std::string& nvcc_path) {
  const std::string root = fs::dirname(fs::dirname(fs::realpath_or(nvcc_path)));
  for (const std::string& d : {root + "/lib64", root + "/targets/x86_64-linux/lib", root + "/lib"})
    if (::access((d + "/libcudart.so").c_str(), F_OK) == 0) return d;
  return root + "/lib64";
}

// Compute capability of a device through the driver API, loaded lazily so that CPU-only use
// never needs libcuda.
std::string probe_cuda_arch(int device) {
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
  int handle = 0, major = 0, minor = 0;
  if (!init || !device_get || !attr || init(0) != 0 || device_get(&handle, device < 0 ? 0 : device) != 0 ||
      attr(&major, 75, handle) != 0 || attr(&minor, 76, handle) != 0)
    throw std::runtime_error(
        "jitkern: cannot determine the CUDA architecture: no usable CUDA device; set JITKERN_CUDA_ARCH "
        "(e.g. JITKERN_CUDA_ARCH=sm_90a) to compile without a GPU");
  // Architecture-specific features (wgmma, setmaxnreg, ...) need the 'a' target on sm_90 and later.
  const std::string arch = "sm_" + std::to_string(major) + std::to_string(minor) + (major >= 9 ? "a" : "");
  std::lock_guard<std::mutex> lock(g_mutex);
  return memo.emplace(device, arch).first->second;
}

std::string validate_arch(const std::string& arch) {
  // sm_XY, sm_XYa or sm_XYf
  bool ok = arch.size() >= 5 && arch.rfind("sm_", 0) == 0;
  std::size_t i = 3;
  while (ok && i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i]))) ++i;
  ok = ok && i >= 5 && (i == arch.size() || (i + 1 == arch.size() && (arch[i] == 'a' || arch[i] == 'f')));
  if (!ok)
    throw std::runtime_error("jitkern: invalid CUDA architecture '" + arch + "': expected the form sm_90a, sm_90 or sm_80");
  return arch;
}

// ---------------------------------------------------------------------------------------------
// Sources and commands

std::string resolve_source(const std::string& file, const std::string& csrc_dir) {
  const std::string path = file.empty() || file[0] != '/' ? csrc_dir + "/" + file : file;
  if (::access(path.c_str(), R_OK) != 0)
    throw std::runtime_error("jitkern: kernel source '" + file + "' not found (looked at " + path +
                             "; relative names are resolved against the package's csrc/, give an absolute path for your own files)");
  return path;
}

std::string make_wrapper_source(const std::vector<std::string>& files,
                                const std::vector<std::pair<std::string, std::string>>& wrappers, const std::string& csrc_dir) {
  std::string src = "// generated by jitkern\n";
  for (const auto& f : files) src += "#include \"" + resolve_source(f, csrc_dir) + "\"\n";
  src += "#include <jitkern/export.h>\n";
  for (const auto& [name, expr] : wrappers) {
    if (!is_identifier(name))
      throw std::runtime_error("jitkern: export name '" + name + "' is not a C identifier");
    if (expr.empty() || expr.find('\n') != std::string::npos)
      throw std::runtime_error("jitkern: the C++ expression exported as '" + name + "' must be a non-empty single line");
    src += "JITKERN_EXPORT(" + name + ", " + expr + ")\n";
  }
  return src;
}

struct Plan {
  std::string name, entry_dir, lock_dir, lock_path, request_key;
  std::string cpp_source, cuda_source;
  std::vector<std::string> cpp_compile, cuda_compile, link;  // without inputs/outputs
  std::vector<std::string> dep_exclude_prefixes;
  bool has_cpp = false, has_cuda = false;
  std::string host_cxx, nvcc;
};

Plan make_plan(const BuildRequest& req, const ResolvedConfig& cfg) {
  if (req.name_parts.empty() || req.name_parts[0].empty())
    throw std::runtime_error("jitkern: load_jit needs a module name as its first positional argument");
  if (req.cpp_files.empty() && req.cuda_files.empty())
    throw std::runtime_error("jitkern: load_jit needs at least one of cpp_files or cuda_files");
  if (req.cpp_files.empty() && !req.cpp_wrappers.empty())
    throw std::runtime_error("jitkern: cpp_wrappers were given without cpp_files");
  if (req.cuda_files.empty() && !req.cuda_wrappers.empty())
    throw std::runtime_error("jitkern: cuda_wrappers were given without cuda_files");
  Plan p;
  for (const auto& part : req.name_parts) p.name += (p.name.empty() ? "" : "_") + part;
  p.has_cpp = !req.cpp_files.empty();
  p.has_cuda = !req.cuda_files.empty();
  if (p.has_cpp) p.cpp_source = make_wrapper_source(req.cpp_files, req.cpp_wrappers, cfg.csrc_dir);
  if (p.has_cuda) p.cuda_source = make_wrapper_source(req.cuda_files, req.cuda_wrappers, cfg.csrc_dir);

  fs::ensure_private_dir(cfg.cache_dir, "cache directory");
  const Compiler cxx = identify_compiler(env_or("CXX", "c++"), cfg.cache_dir, "C++ compiler");
  p.host_cxx = cxx.path;
  std::vector<std::string> includes = {"-I" + cfg.include_dir, "-I" + cfg.tvm_ffi_include_dir};
  if (cfg.dlpack_include_dir != cfg.tvm_ffi_include_dir) includes.push_back("-I" + cfg.dlpack_include_dir);
  for (const auto& d : req.extra_include_paths) includes.push_back("-I" + d);

  Sha256 key;
  key.field("jitkern-engine-2").field(JITKERN_VERSION).field(p.name).field(cxx.identity);
  key.field(cfg.tvm_ffi_version).field(cfg.tvm_ffi_lib_dir).field(cfg.runtime_lib_dir);
  fs::FileSig runtime_sig;
  fs::stat_sig(cfg.runtime_lib_dir + "/libjitkern_runtime.so", &runtime_sig);
  key.field(std::to_string(runtime_sig.size) + "|" + std::to_string(runtime_sig.mtime_ns));

  std::string arch;
  if (p.has_cpp) {
    p.cpp_compile = {cxx.path, "-std=c++20", "-O3", "-fPIC", "-fvisibility=hidden"};
    p.cpp_compile.insert(p.cpp_compile.end(), includes.begin(), includes.end());
    p.cpp_compile.insert(p.cpp_compile.end(), req.extra_cflags.begin(), req.extra_cflags.end());
    key.field("cpp").field(p.cpp_source);
    for (const auto& a : p.cpp_compile) key.field(a);
  }
  if (p.has_cuda) {
    const Compiler nvcc = identify_compiler(nvcc_program(), cfg.cache_dir, "CUDA compiler");
    p.nvcc = nvcc.path;
    arch = !req.cuda_arch.empty() ? req.cuda_arch : env_or("JITKERN_CUDA_ARCH");
    if (arch.empty()) arch = probe_cuda_arch(req.cuda_device);
    validate_arch(arch);
    const std::string compute = "compute_" + arch.substr(3);
    p.cuda_compile = {nvcc.path, "-std=c++20", "-O3", "--expt-relaxed-constexpr", "-gencode=arch=" + compute + ",code=" + arch,
                      "-Xcompiler", "-fPIC,-fvisibility=hidden"};
    if (!env_or("CXX").empty()) p.cuda_compile.insert(p.cuda_compile.end(), {"-ccbin", cxx.path});
    p.cuda_compile.insert(p.cuda_compile.end(), includes.begin(), includes.end());
    p.cuda_compile.insert(p.cuda_compile.end(), req.extra_cuda_cflags.begin(), req.extra_cuda_cflags.end());
    key.field("cuda").field(p.cuda_source).field(nvcc.identity);
    for (const auto& a : p.cuda_compile) key.field(a);
  }
  p.dep_exclude_prefixes.push_back("/usr/include/");
  p.dep_exclude_prefixes.push_back("/usr/lib/gcc/");
  // The host compiler links (also for CUDA: objects compiled without -rdc need no device link).
  // -z noseparate-code: two loadable segments instead of four, so loading a module maps less (measured
  // on the dev VM: dlopen 56 -> 39 us). The cost is that read-only data shares the executable mapping,
  // as it did by default before binutils 2.31; RELRO stays on.
  p.link = {"-shared", "-Wl,-z,noseparate-code", "-L" + cfg.runtime_lib_dir, "-ljitkern_runtime", "-L" + cfg.tvm_ffi_lib_dir, "-ltvm_ffi"};
  std::vector<std::string> rpaths = {cfg.runtime_lib_dir, cfg.tvm_ffi_lib_dir};
  for (const auto& r : rpaths) p.link.push_back("-Wl,-rpath," + r);
  // The CUDA runtime's location and the toolkit's headers follow from the nvcc identity already in
  // the key; they are resolved only when building (finish_plan_for_build), off the warm path.
  p.link.insert(p.link.end(), req.extra_ldflags.begin(), req.extra_ldflags.end());
  key.field("link");
  for (const auto& a : p.link) key.field(a);

  p.request_key = key.hex();
  const std::string stem = sanitize(p.name) + "-" + p.request_key.substr(0, 20);
  p.entry_dir = cfg.cache_dir + "/" + stem;
  p.lock_dir = cfg.lock_dir;
  p.lock_path = cfg.lock_dir + "/" + stem + ".lock";
  return p;
}

// ---------------------------------------------------------------------------------------------
// Manifests: what a published library was built from.

struct Dep {
  std::string path, sha;
  fs::FileSig sig;
};

struct Manifest {
  std::string full_key, lib_name, lib_sha;
  fs::FileSig lib_sig;
  std::vector<Dep> deps;
};

std::string serialize(const Manifest& m) {
  auto sig = [](const fs::FileSig& g) { return std::to_string(g.size) + " " + std::to_string(g.mtime_ns) + " "; };
  std::string out = std::string(kManifestMagic) + "\nkey " + m.full_key + "\nlib " + sig(m.lib_sig) + m.lib_sha + " " + m.lib_name + "\n";
  for (const auto& d : m.deps) out += "dep " + sig(d.sig) + d.sha + " " + d.path + "\n";
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// "<size> <mtime_ns> <sha> <rest of line>"
bool parse_sig_line(const std::string& s, fs::FileSig* sig, std::string* sha, std::string* rest) {
  const char* p = s.c_str();
  char* end = nullptr;
  sig->size = std::strtoll(p, &end, 10);
  if (end == p || *end != ' ') return false;
  p = end + 1;
  sig->mtime_ns = std::strtoll(p, &end, 10);
  if (end == p || *end != ' ') return false;
  p = end + 1;
  const char* space = std::strchr(p, ' ');
  if (space == nullptr || space == p || space[1] == '\0') return false;
  *sha = std::string(p, space);
  *rest = std::string(space + 1);
  return true;
}

bool parse(const std::string& text, Manifest* m) {
  const auto lines = split_lines(text);
  if (lines.empty() || lines[0] != kManifestMagic) return false;
  bool has_key = false, has_lib = false;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.rfind("key ", 0) == 0) {
      m->full_key = line.substr(4);
      has_key = !m->full_key.empty();
    } else if (line.rfind("lib ", 0) == 0 || line.rfind("dep ", 0) == 0) {
      fs::FileSig sig;
      std::string sha, rest;
      if (!parse_sig_line(line.substr(4), &sig, &sha, &rest)) return false;
      if (line[0] == 'l') {
        m->lib_sig = sig, m->lib_sha = sha, m->lib_name = rest, has_lib = true;
      } else {
        m->deps.push_back({rest, sha, sig});
      }
    }
  }
  return has_key && has_lib;
}

// True when every dependency still has the recorded content: stat first, rehash on change.
bool deps_unchanged(const std::vector<Dep>& deps) {
  for (const auto& d : deps) {
    fs::FileSig now;
    if (!fs::stat_sig(d.path, &now)) return false;
    if (now == d.sig) continue;
    std::string sha;
    if (!sha256_file(d.path, &sha) || sha != d.sha) return false;
  }
  return true;
}

std::string full_key_of(const std::string& request_key, const std::vector<Dep>& deps) {
  Sha256 h;
  h.field(request_key);
  for (const auto& d : deps) h.field(d.path).field(d.sha);
  return h.hex();
}

// The library a manifest names, if it is intact (size/mtime first; rehash on change).
bool library_intact(const std::string& entry_dir, const Manifest& m) {
  const std::string lib = entry_dir + "/" + m.lib_name;
  fs::FileSig now;
  if (!fs::stat_sig(lib, &now)) return false;
  if (!(now == m.lib_sig)) {
    std::string sha;
    if (!sha256_file(lib, &sha) || sha != m.lib_sha) return false;
  }
  return true;
}

// The warm path: a valid manifest whose dependencies and library are unchanged.
bool lookup_published(const Plan& p, std::string* lib_path) {
  std::string text;
  Manifest m;
  if (!fs::read_file(p.entry_dir + "/manifest", &text) || !parse(text, &m)) return false;
  fs::ensure_private_dir(p.entry_dir, "cache entry directory");
  if (!deps_unchanged(m.deps) || !library_intact(p.entry_dir, m)) return false;
  *lib_path = p.entry_dir + "/" + m.lib_name;
  fs::check_private_file(*lib_path, "cached library");
  return true;
}

// ---------------------------------------------------------------------------------------------
// Building

// Make-style dependency output: "target: dep dep \\\n dep"; spaces inside names are escaped.
std::vector<std::string> parse_depfile(const std::string& raw) {
  std::string text;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\\' && i + 1 < raw.size() && raw[i + 1] == '\n') {
      text += ' ', ++i;
    } else if (raw[i] != '\r') {
      text += raw[i];
    }
  }
  std::vector<std::string> out;
  std::size_t line_start = 0;
  while (line_start < text.size()) {
    std::size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    const std::string line = text.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    std::size_t colon = std::string::npos;
    for (std::size_t i = 0; i < line.size(); ++i)
      if (line[i] == ':' && (i + 1 == line.size() || line[i + 1] == ' ' || line[i + 1] == '\t')) {
        colon = i;
        break;
      }
    if (colon == std::string::npos) continue;
    std::string cur;
    for (std::size_t i = colon + 1; i <= line.size(); ++i) {
      const char c = i < line.size() ? line[i] : ' ';
      if (c == '\\' && i + 1 < line.size() && line[i + 1] == ' ') {
        cur += ' ', ++i;
      } else if (c == ' ' || c == '\t') {
        if (!cur.empty()) out.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
  }
  return out;
}

std::vector<Dep> collect_deps(const Plan& p, const std::vector<std::string>& depfiles, const std::string& scratch) {
  std::map<std::string, Dep> unique;
  for (const auto& df : depfiles) {
    std::string text;
    if (!fs::read_file(df, &text)) continue;
    for (const auto& raw : parse_depfile(text)) {
      const std::string path = fs::realpath_or(raw[0] == '/' ? raw : scratch + "/" + raw);
      if (path.rfind(scratch + "/", 0) == 0) continue;  // the generated source: its text is in the key
      bool excluded = false;
      for (const auto& prefix : p.dep_exclude_prefixes) excluded = excluded || path.rfind(prefix, 0) == 0;
      if (excluded || unique.count(path)) continue;
      Dep d;
      d.path = path;
      if (!fs::stat_sig(path, &d.sig) || !sha256_file(path, &d.sha)) continue;
      unique.emplace(path, d);
    }
  }
  std::vector<Dep> deps;
  for (auto& [path, d] : unique) deps.push_back(d);
  return deps;
}

// Dependencies for a failure record beyond what the compiler's dependency output listed (it may
// write none when it fails early): the named source files themselves.
std::vector<Dep> fallback_deps(const BuildRequest& req, const ResolvedConfig& cfg) {
  std::vector<Dep> deps;
  auto add = [&](const std::string& path) {
    Dep d;
    d.path = path;
    if (fs::stat_sig(path, &d.sig) && sha256_file(path, &d.sha)) deps.push_back(d);
  };
  for (const auto& f : req.cpp_files) add(resolve_source(f, cfg.csrc_dir));
  for (const auto& f : req.cuda_files) add(resolve_source(f, cfg.csrc_dir));
  return deps;
}

struct Failure {
  std::string message;
  std::vector<Dep> deps;
};

std::string serialize_failure(const Failure& f) {
  Manifest m;
  m.full_key = "failed";
  m.lib_name = "-";
  m.lib_sha = "-";
  m.deps = f.deps;
  return serialize(m) + "error\n" + f.message;
}

bool parse_failure(const std::string& text, Failure* f) {
  const auto pos = text.find("\nerror\n");
  if (pos == std::string::npos) return false;
  Manifest m;
  if (!parse(text.substr(0, pos + 1), &m)) return false;
  f->deps = m.deps;
  f->message = text.substr(pos + 7);
  return true;
}

std::string read_log(const std::string& path) {
  std::string text;
  fs::read_file(path, &text);
  constexpr std::size_t kMax = 20000;
  if (text.size() > kMax) text = text.substr(0, kMax) + "\n[... compiler output truncated ...]\n";
  return text;
}

void finish_plan_for_build(Plan* p) {
  if (!p->has_cuda) return;
  const std::string libs = cuda_lib_dir(p->nvcc);
  p->link.insert(p->link.end(), {"-L" + libs, "-lcudart", "-Wl,-rpath," + libs});
  // The toolkit's own headers are covered by the compiler identity.
  p->dep_exclude_prefixes.push_back(fs::dirname(fs::dirname(fs::realpath_or(p->nvcc))) + "/");
}

// ---------------------------------------------------------------------------------------------
// The CUDA compile. nvcc runs its phases one after another: host preprocessing and cudafe++, then
// device preprocessing, cicc, ptxas and fatbinary, then the host compile of the generated code. The
// device chain only needs from cudafe++ the module id, so jitkern writes that id itself and runs the
// two chains in parallel (the commands come from `nvcc --dryrun`, so flags and paths are nvcc's
// own). Anything unexpected in the dry run falls back to a plain nvcc invocation.

struct NvccPipeline {
  std::vector<std::string> env;                                // NAME=value
  std::vector<std::string> host_chain, device_chain, finish;  // shell command lines
  std::string module_id_path;
};

bool plan_nvcc_pipeline(const std::string& dryrun, const std::string& depfile, NvccPipeline* out) {
  for (const auto& line : split_lines(dryrun)) {
    if (line.rfind("#$ ", 0) != 0) continue;
    std::string cmd = line.substr(3);
    const std::string first = cmd.substr(0, cmd.find(' '));
    const auto eq = first.find('=');
    if (eq != std::string::npos && eq > 0 && is_identifier(first.substr(0, eq))) {
      const std::string name = first.substr(0, eq);
      // List-valued variables are nvcc-internal and already expanded into the commands.
      if (name != "INCLUDES" && name != "SYSTEM_INCLUDES" && name != "LIBRARIES") out->env.push_back(cmd);
      continue;
    }
    if (cmd.find("cudafe++") != std::string::npos && first.find("cudafe++") != std::string::npos) {
      const std::string gen = " --gen_module_id_file";
      const auto g = cmd.find(gen);
      if (g == std::string::npos) return false;
      cmd.erase(g, gen.size());
      const std::string key = "--module_id_file_name \"";
      const auto m = cmd.find(key);
      if (m == std::string::npos) return false;
      const auto end = cmd.find('"', m + key.size());
      out->module_id_path = cmd.substr(m + key.size(), end - m - key.size());
      out->host_chain.push_back(cmd);
    } else if (cmd.find(" -E ") != std::string::npos && cmd.find(".cpp4.ii\"") != std::string::npos) {
      out->host_chain.insert(out->host_chain.begin(), cmd + " -MD -MF \"" + depfile + "\"");
    } else if (cmd.find(" -E ") != std::string::npos && cmd.find(".cpp1.ii\"") != std::string::npos) {
      out->device_chain.insert(out->device_chain.begin(), cmd);
    } else if (first.find("cicc") != std::string::npos || first == "ptxas" || first == "fatbinary") {
      out->device_chain.push_back(cmd);
    } else if (cmd.find(" -c ") != std::string::npos && cmd.find(".cudafe1.cpp") != std::string::npos) {
      out->finish.push_back(cmd);
    } else if (first == "rm") {
      out->finish.push_back(cmd);
    } else {
      return false;  // a phase we do not know how to order
    }
  }
  return out->host_chain.size() == 2 && out->device_chain.size() == 4 && !out->finish.empty() &&
         !out->module_id_path.empty();
}

int run_shell_chain(const std::vector<std::string>& cmds, const std::vector<std::string>& env, const std::string& log) {
  for (const auto& c : cmds) {
    const int rc = fs::wait(fs::spawn({"/bin/sh", "-c", c}, log, env));
    if (rc != 0) return rc;
  }
  return 0;
}

int compile_cuda_object(const Plan& p, const std::string& scratch, const std::string& src, const std::string& obj,
                        const std::string& log, std::vector<std::vector<std::string>>* commands,
                        std::vector<std::string>* depfiles) {
  const std::string depfile = scratch + "/device.d";
  depfiles->push_back(depfile);
  if (env_or("JITKERN_NVCC_PIPELINE") != "0") {
    const std::string nvdir = scratch + "/nvcc";
    ::mkdir(nvdir.c_str(), 0700);
    auto dry = p.cuda_compile;
    dry.insert(dry.end(), {"--dryrun", "--keep", "--keep-dir", nvdir, "-c", src, "-o", obj});
    const std::string dry_log = scratch + "/dryrun.txt";
    NvccPipeline pipe;
    std::string text;
    if (fs::wait(fs::spawn(dry, dry_log)) == 0 && fs::read_file(dry_log, &text) && plan_nvcc_pipeline(text, depfile, &pipe)) {
      // Same shape as nvcc's own ids: _<hash>_<length>_<name>_<hash>.
      fs::write_file_atomic(pipe.module_id_path, "_" + p.request_key.substr(0, 8) + "_9_device_cu_" + p.request_key.substr(8, 8));
      for (const auto& c : pipe.host_chain) commands->push_back({"sh", "-c", c});
      for (const auto& c : pipe.device_chain) commands->push_back({"sh", "-c", c});
      for (const auto& c : pipe.finish) commands->push_back({"sh", "-c", c});
      int device_rc = 0;
      std::thread device([&] { device_rc = run_shell_chain(pipe.device_chain, pipe.env, log); });
      const int host_rc = run_shell_chain(pipe.host_chain, pipe.env, log);
      device.join();
      if (host_rc != 0) return host_rc;
      if (device_rc != 0) return device_rc;
      return run_shell_chain(pipe.finish, pipe.env, log);
    }
  }
  auto cmd = p.cuda_compile;
  cmd.insert(cmd.end(), {"-MMD", "-MF", depfile, "-c", src, "-o", obj});
  commands->push_back(cmd);
  return fs::wait(fs::spawn(cmd, log));
}

std::string build_locked(const Plan& p, const BuildRequest& req, const ResolvedConfig& cfg) {
  // Another process may have published while we waited for the lock.
  std::string lib_path;
  if (lookup_published(p, &lib_path)) return lib_path;

  const std::string failure_path = p.entry_dir + "/failed";
  std::string failure_text;
  Failure failure;
  if (!env_flag("JITKERN_RETRY_FAILED") && fs::read_file(failure_path, &failure_text) && parse_failure(failure_text, &failure) &&
      deps_unchanged(failure.deps)) {
    throw BuildError(failure.message +
                     "\n(jitkern remembered this failure: the inputs have not changed since. Edit the sources or set "
                     "JITKERN_RETRY_FAILED=1 to try again.)");
  }

  // Content addressing across edits: a header edited and then reverted maps back to the library
  // already built for that content.
  std::string text;
  Manifest old;
  if (fs::read_file(p.entry_dir + "/manifest", &text) && parse(text, &old)) {
    std::vector<Dep> now = old.deps;
    bool readable = true;
    for (auto& d : now) readable = readable && fs::stat_sig(d.path, &d.sig) && sha256_file(d.path, &d.sha);
    if (readable) {
      Manifest m;
      m.full_key = full_key_of(p.request_key, now);
      m.lib_name = m.full_key.substr(0, 24) + ".so";
      const std::string candidate = p.entry_dir + "/" + m.lib_name;
      if (fs::stat_sig(candidate, &m.lib_sig) && sha256_file(candidate, &m.lib_sha)) {
        std::string existing_sha;
        // A library is only ever published under the key of its content; trust its recorded hash.
        const std::string record_path = candidate + ".sha256";
        if (fs::read_file(record_path, &existing_sha) && existing_sha == m.lib_sha) {
          m.deps = now;
          fs::write_file_atomic(p.entry_dir + "/manifest", serialize(m));
          return candidate;
        }
      }
    }
  }

  const std::string scratch = fs::make_temp_dir(p.entry_dir, "build-");
  struct Cleanup {
    std::string dir;
    ~Cleanup() { fs::remove_tree(dir); }
  } cleanup{scratch};
  const std::string out = scratch + "/module.so";
  const std::string log = scratch + "/build.log";
  std::vector<std::vector<std::string>> commands;
  std::vector<std::string> depfiles;
  const auto t0 = std::chrono::steady_clock::now();
  if (!quiet()) std::fprintf(stderr, "jitkern: compiling %s ...\n", p.name.c_str());

  auto run_all = [&](const std::vector<std::vector<std::string>>& batch) -> int {
    std::vector<fs::Process> procs;
    for (const auto& cmd : batch) procs.push_back(fs::spawn(cmd, log));
    int rc = 0;
    for (auto& pr : procs) {
      const int r = fs::wait(pr);
      if (r != 0 && rc == 0) rc = r;
    }
    return rc;
  };

  int rc = 0;
  const std::string cuda_src = scratch + "/device.cu", cuda_obj = scratch + "/device.o";
  if (p.has_cuda) fs::write_file_atomic(cuda_src, p.cuda_source);
  if (p.has_cpp && !p.has_cuda) {
    // Host code alone: compile and link in one command.
    fs::write_file_atomic(scratch + "/host.cc", p.cpp_source);
    auto cmd = p.cpp_compile;
    cmd.insert(cmd.end(), {"-MMD", "-MF", scratch + "/host.d", scratch + "/host.cc", "-o", out});
    cmd.insert(cmd.end(), p.link.begin(), p.link.end());
    depfiles = {scratch + "/host.d"};
    commands = {cmd};
    rc = run_all({cmd});
  } else {
    // Host glue (if any) compiles while the CUDA pipeline runs; then the host compiler links.
    std::vector<fs::Process> host_proc;
    std::vector<std::string> objects;
    if (p.has_cpp) {
      fs::write_file_atomic(scratch + "/host.cc", p.cpp_source);
      auto cpp = p.cpp_compile;
      cpp.insert(cpp.end(), {"-MMD", "-MF", scratch + "/host.d", "-c", scratch + "/host.cc", "-o", scratch + "/host.o"});
      commands.push_back(cpp);
      depfiles.push_back(scratch + "/host.d");
      objects.push_back(scratch + "/host.o");
      host_proc.push_back(fs::spawn(cpp, log));
    }
    rc = compile_cuda_object(p, scratch, cuda_src, cuda_obj, log, &commands, &depfiles);
    for (auto& pr : host_proc) {
      const int r = fs::wait(pr);
      if (r != 0 && rc == 0) rc = r;
    }
    objects.push_back(cuda_obj);
    if (rc == 0) {
      std::vector<std::string> link = {p.host_cxx};
      link.insert(link.end(), objects.begin(), objects.end());
      link.insert(link.end(), {"-o", out});
      link.insert(link.end(), p.link.begin(), p.link.end());
      commands.push_back(link);
      rc = run_all({link});
    }
  }

  if (rc != 0) {
    std::string msg = "jitkern: failed to build module '" + p.name + "' (exit status " + std::to_string(rc) + ")\n";
    for (const auto& c : commands) msg += "command: " + fs::join_command(c) + "\n";
    msg += "generated source:\n" + (p.has_cpp ? p.cpp_source : std::string()) + (p.has_cuda ? p.cuda_source : std::string());
    msg += "compiler output:\n" + read_log(log);
    Failure f;
    f.message = msg;
    f.deps = collect_deps(p, depfiles, scratch);
    const auto fallback = fallback_deps(req, cfg);
    for (const auto& d : fallback)
      if (std::none_of(f.deps.begin(), f.deps.end(), [&](const Dep& e) { return e.path == d.path; })) f.deps.push_back(d);
    fs::write_file_atomic(failure_path, serialize_failure(f));
    throw BuildError(msg);
  }

  Manifest m;
  m.deps = collect_deps(p, depfiles, scratch);
  m.full_key = full_key_of(p.request_key, m.deps);
  m.lib_name = m.full_key.substr(0, 24) + ".so";
  const std::string final_path = p.entry_dir + "/" + m.lib_name;
  if (!sha256_file(out, &m.lib_sha)) throw std::runtime_error("jitkern: cannot read the built library " + out);
  fs::fsync_path(out);
  if (::rename(out.c_str(), final_path.c_str()) != 0)
    throw std::runtime_error("jitkern: cannot publish " + final_path);
  fs::stat_sig(final_path, &m.lib_sig);
  fs::write_file_atomic(final_path + ".sha256", m.lib_sha);
  fs::write_file_atomic(p.entry_dir + "/manifest", serialize(m));
  ::unlink(failure_path.c_str());
  if (!quiet()) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "jitkern: compiled %s in %.2f s\n", p.name.c_str(), secs);
  }
  return final_path;
}

}  // namespace

std::string build(const BuildRequest& request, const EngineConfig& config) {
  const ResolvedConfig cfg = resolve(config, request.build_directory);
  Plan p = make_plan(request, cfg);
  std::string lib_path;
  // Warm path: no lock, no subprocess; readers never see a partial file (publish is by rename).
  if (lookup_published(p, &lib_path)) return lib_path;
  fs::ensure_private_dir(p.entry_dir, "cache entry directory");
  fs::ensure_private_dir(p.lock_dir, "lock directory");
  fs::FileLock lock(p.lock_path, quiet() ? "" : "jitkern: waiting for another process that is compiling " + p.name + " ...");
  finish_plan_for_build(&p);
  return build_locked(p, request, cfg);
}

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
  const std::string path = build(request, config);
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<Module>> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = loaded[path];
  if (!slot) slot = std::make_shared<Module>(path);
  return slot;
}

}  // namespace jitkern
