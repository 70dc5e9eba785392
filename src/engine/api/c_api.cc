// The C entry points the Python layer calls through ctypes. A request is a sequence of fields,
// each "<key> <byte length>:<value>\n", so that any value (even one holding a newline or a NUL byte)
// reaches the C++ validation intact. This file is the only C++ code that knows the format;
// python/jitkern/_engine.py is the only Python code.
#include <dlfcn.h>
#include <jitkern/engine_abi.h>
#include <jitkern/jit.h>
#include <tvm/ffi/c_api.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "build.h"
#include "store/cache_admin.h"
#include "base/cpus.h"
#include "base/fs_util.h"
#include "base/log.h"
#include "config/config.h"
#include "plan/plan.h"
#include "config/settings.h"
#include "store/store.h"
#include "base/text.h"
#include "compile/toolchain.h"

namespace {

char* dup(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p != nullptr) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

// The fields of a request, in order.
std::vector<std::pair<std::string, std::string>> parse_fields(const std::string& all) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t pos = 0;
  while (pos < all.size()) {
    const std::size_t space = all.find(' ', pos), colon = all.find(':', space == std::string::npos ? pos : space);
    if (space == std::string::npos || colon == std::string::npos)
      throw std::invalid_argument("jitkern: malformed engine request at byte " + std::to_string(pos));
    const std::string key = all.substr(pos, space - pos);
    char* end = nullptr;
    const unsigned long long len = std::strtoull(all.c_str() + space + 1, &end, 10);
    if (end != all.c_str() + colon || colon + 1 + len + 1 > all.size() || all[colon + 1 + len] != '\n')
      throw std::invalid_argument("jitkern: malformed engine request field '" + key + "'");
    out.emplace_back(key, all.substr(colon + 1, len));
    pos = colon + 1 + len + 1;
  }
  return out;
}

// A request field's int, all of it: a value out of int's range is refused, never truncated.
int int_field(const std::string& key, const std::string& value) {
  int out = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (ec != std::errc() || end != value.data() + value.size())
    throw std::invalid_argument("jitkern: " + key + " must be an integer in [" + std::to_string(INT_MIN) + ", " + std::to_string(INT_MAX) + "], got '" + value + "'");
  return out;
}

void parse_request(const std::string& all, jitkern::BuildRequest* req, jitkern::EngineConfig* cfg) {
  std::string pending_wrapper;  // "cpp" or "cuda" after a *_wrapper_name field
  std::string pending_name;
  for (const auto& [key, value] : parse_fields(all)) {
    if (!pending_wrapper.empty() && key != pending_wrapper + "_wrapper_expr")
      throw std::invalid_argument("jitkern: engine request: " + pending_wrapper + "_wrapper_name without its expression");
    auto* last = key == "cpp_wrapper_args" ? &req->cpp_wrappers : key == "cuda_wrapper_args" ? &req->cuda_wrappers : nullptr;
    if (last != nullptr && last->empty()) throw std::invalid_argument("jitkern: engine request: " + key + " before any wrapper");
    if (key == "name") req->name_parts.push_back(value);
    else if (key == "cpp_file") req->cpp_files.push_back(value);
    else if (key == "cuda_file") req->cuda_files.push_back(value);
    else if (key == "cpp_wrapper_name" || key == "cuda_wrapper_name") pending_wrapper = key.substr(0, key.find('_')), pending_name = value;
    else if (key == "cpp_wrapper_expr") req->cpp_wrappers.emplace_back(pending_name, value), pending_wrapper.clear();
    else if (key == "cuda_wrapper_expr") req->cuda_wrappers.emplace_back(pending_name, value), pending_wrapper.clear();
    else if (last != nullptr) last->back().arg_names = value;
    else if (key == "cflag") req->extra_cflags.push_back(value);
    else if (key == "cuda_cflag") req->extra_cuda_cflags.push_back(value);
    else if (key == "ldflag") req->extra_ldflags.push_back(value);
    else if (key == "include") req->extra_include_paths.push_back(value);
    else if (key == "build_directory") req->build_directory = value;
    else if (key == "cuda_arch") req->cuda_arch = value;
    else if (key == "host_without_nvcc") req->host_without_nvcc = value == "1";
    else if (key == "host_prelude") req->host_prelude = value == "1";
    else if (key == "host_without_cudafe") req->host_without_cudafe = value == "1";
    else if (key == "host_shared_files") req->host_shared_files = int_field(key, value);
    else if (key == "device_parts") req->device_parts = int_field(key, value);
    else if (key == "cuda_device") req->cuda_device = int_field(key, value);
    else if (key == "tvm_ffi_version") cfg->tvm_ffi_version = value;
    else throw std::invalid_argument("jitkern: unknown engine request key '" + key + "'");
  }
  if (!pending_wrapper.empty()) throw std::invalid_argument("jitkern: engine request ends inside a wrapper");
}

// Registers each export `name` of a loaded module as the tvm-ffi global function `<prefix><name>`,
// for tvm_ffi.get_global_func (cheaper than tvm_ffi.load_module on the warm path). tvm-ffi's C API is
// looked up through the module, which links it, so the engine keeps no link-time tvm-ffi dependency.
void register_exports(const jitkern::Module& module, const std::vector<std::string>& exports, const std::string& prefix) {
  using CreateFn = int (*)(void*, TVMFFISafeCallType, void (*)(void*), TVMFFIObjectHandle*);
  using SetGlobalFn = int (*)(const TVMFFIByteArray*, TVMFFIObjectHandle, int);
  using DecRefFn = int (*)(TVMFFIObjectHandle);
  auto create = reinterpret_cast<CreateFn>(module.symbol("TVMFFIFunctionCreate"));
  auto set_global = reinterpret_cast<SetGlobalFn>(module.symbol("TVMFFIFunctionSetGlobal"));
  auto dec_ref = reinterpret_cast<DecRefFn>(module.symbol("TVMFFIObjectDecRef"));
  if (create == nullptr || set_global == nullptr || dec_ref == nullptr)
    throw std::runtime_error("jitkern: " + module.path() + " does not link tvm-ffi's C API");
  for (const auto& name : exports) {
    const std::string global = prefix + name;
    const TVMFFIByteArray global_name{global.data(), global.size()};
    TVMFFIObjectHandle fn = nullptr;
    if (create(nullptr, module.function(name), nullptr, &fn) != 0 || set_global(&global_name, fn, 1) != 0) {
      if (fn != nullptr) dec_ref(fn);
      throw std::runtime_error("jitkern: tvm-ffi refused to register " + global);
    }
    dec_ref(fn);  // the global table holds it
  }
}

// The one in-process memo of loaded modules: keyed on the request and everything else that changes
// its result (every setting the engine reads, the working directory relative paths resolve against).
// A hit returns "<path>\n<prefix>\n<export>\n...": the same prefix, so Python reuses its Module object.
std::string load_and_register(const std::string& text, const jitkern::BuildRequest& req, const jitkern::EngineConfig& cfg) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::string> by_request;  // memo key -> result
  static std::unordered_map<std::string, std::string> by_path;     // library path -> registration prefix
  static std::atomic<int> counter{0};
  const std::string memo_key = text + '\0' + jitkern::settings::fingerprint() + '\0' + jitkern::fs::current_dir_or_why() + '\0' +
                               jitkern::store::Store::package_layers_text();
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = by_request.find(memo_key);
    if (it != by_request.end()) return it->second;
  }
  const auto module = jitkern::load(req, cfg);
  const std::vector<std::string> exports = jitkern::plan::export_names(req);  // load() validated the request
  std::lock_guard<std::mutex> lock(mutex);
  auto& prefix = by_path[module->path()];
  if (prefix.empty()) {
    // Unique per library: a rebuilt library never shadows a loaded one.
    const std::string fresh = "jitkern:" + std::to_string(counter++) + ":";
    register_exports(*module, exports, fresh);
    prefix = fresh;
  }
  std::string result = module->path() + "\n" + prefix + "\n";
  for (const auto& e : exports) result += e + "\n";
  return by_request.emplace(memo_key, result).first->second;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else out += static_cast<char>(c);
  }
  return out + "\"";
}

std::string summary_json(const jitkern::store::Summary& e, const std::string& stem) {
  return "{\"stem\": " + json_string(stem) + ", \"status\": " + json_string(e.status) + ", \"module\": " + json_string(e.module) + ", \"spec\": " + json_string(e.spec) +
         ", \"arch\": " + json_string(e.arch) + ", \"key\": " + json_string(e.key) + ", \"bytes\": " + std::to_string(e.bytes) +
         ", \"built_unix\": " + std::to_string(e.built_unix) + ", \"build_ms\": " + std::to_string(e.build_ms) +
         ", \"last_use_unix\": " + std::to_string(e.last_use_unix);
}

std::string stats_json(const jitkern::store::Store& store) {
  const auto s = jitkern::cache::stats(store);
  const auto used = [](int64_t n) { return n < 0 ? std::string("null") : std::to_string(n); };
  return "{\"cache_dir\": " + json_string(store.root()) + ", \"label\": " + json_string(store.label()) +
         ", \"prebuilt\": " + (store.read_only() ? "true" : "false") +
         ", \"entries\": " + std::to_string(s.entries) + ", \"bytes\": " + std::to_string(s.bytes) + ", \"compiles\": " +
         std::to_string(s.compiles) + ", \"build_ms\": " + std::to_string(s.build_ms) + ", \"failures\": " + std::to_string(s.failures) +
         ", \"incomplete\": " + std::to_string(s.incomplete) + ", \"used_day\": " + used(s.used_day) + ", \"used_week\": " +
         used(s.used_week) + "}";
}

// `jitkern cache ...`: fields op (ls, show, stats, verify, prune, clear, rm), cache_dir (empty: the
// usual default; given, it must exist), lock_dir, max_bytes, older_than_s (prune; -1: no limit),
// dry_run (prune, clear, rm), match (show, rm; repeated). Returns a JSON object {"cache_dir",
// "lock_dir", ...}: "entries": [...] for ls and show (show adds the manifest's facts), "caches":
// [...] for stats (the cache, then each JITKERN_PREBUILT_DIRS layer), "outcomes": [...] otherwise.
std::string cache_command(const std::string& text) {
  std::string op, build_dir;
  std::vector<std::string> match;
  jitkern::EngineConfig cfg;
  long long max_bytes = -1;
  double older_than_s = -1;
  bool dry_run = false;
  for (const auto& [key, value] : parse_fields(text)) {
    if (key == "op") op = value;
    else if (key == "cache_dir") build_dir = value;
    else if (key == "lock_dir") cfg.lock_dir = value;
    else if (key == "max_bytes") max_bytes = std::stoll(value);
    else if (key == "older_than_s") older_than_s = std::stod(value);
    else if (key == "dry_run") dry_run = value == "1";
    else if (key == "match") match.push_back(value);
    else throw std::invalid_argument("jitkern: unknown cache request key '" + key + "'");
  }
  const auto dirs = jitkern::config::resolve_cache(cfg, build_dir);
  const auto store = jitkern::store::Store::writable(dirs);
  if (!build_dir.empty() && !store.exists()) throw std::invalid_argument("jitkern: cache directory " + build_dir + " does not exist");
  std::string out = "{\"cache_dir\": " + json_string(dirs.cache_dir) + ", \"lock_dir\": " + json_string(dirs.lock_dir);
  if (op == "ls") {
    out += ", \"entries\": [";
    bool first = true;
    for (const auto& e : jitkern::cache::list(store)) {
      out += std::string(first ? "" : ", ") + summary_json(e, e.stem) + "}";
      first = false;
    }
    return out + "]}";
  }
  if (op == "show") {
    out += ", \"entries\": [";
    bool first = true;
    for (const auto& e : jitkern::cache::find(store, match)) {
      const auto d = store.entry(e.stem).details();
      std::string compilers;
      for (const auto& c : d.compilers) compilers += std::string(compilers.empty() ? "" : ", ") + json_string(c);
      out += std::string(first ? "" : ", ") + summary_json(d, e.stem) + ", \"content_key\": " + json_string(d.content_key) +
             ", \"toolchain\": " + json_string(d.toolchain) + ", \"library\": " + json_string(d.library) +
             ", \"library_bytes\": " + std::to_string(d.library_bytes) + ", \"compilers\": [" + compilers +
             "], \"dependencies\": " + std::to_string(d.dependencies) + ", \"failure\": " + json_string(d.failure) + "}";
      first = false;
    }
    return out + "]}";
  }
  if (op == "stats") {
    out += ", \"caches\": [" + stats_json(store);
    if (build_dir.empty())
      for (const auto& layer : jitkern::store::Store::prebuilt_layers(dirs.prebuilt_dirs)) out += ", " + stats_json(layer);
    return out + "]}";
  }
  std::vector<jitkern::cache::Outcome> outcomes;
  if (op == "verify") outcomes = jitkern::cache::verify(store);
  else if (op == "prune") outcomes = jitkern::cache::prune(store, max_bytes, older_than_s, dry_run);
  else if (op == "clear") outcomes = jitkern::cache::clear(store, dry_run);
  else if (op == "rm") outcomes = jitkern::cache::remove(store, match, dry_run);
  else throw std::invalid_argument("jitkern: unknown cache operation '" + op + "'");
  out += ", \"outcomes\": [";
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const auto& o = outcomes[i];
    out += std::string(i ? ", " : "") + "{\"stem\": " + json_string(o.stem) + ", \"action\": " + json_string(o.action) +
           ", \"detail\": " + json_string(o.detail) + ", \"bytes\": " + std::to_string(o.bytes) + "}";
  }
  return out + "]}";
}

// `jitkern config`: every setting's value as set, the value that applies and where it comes from,
// what is wrong with it (config::report), the JITKERN_* variables that are no setting, the prebuilt layers.
std::string config_json() {
  std::string out = "{\"settings\": [";
  const auto report = jitkern::config::report(jitkern::config::engine_lib_dir());
  for (std::size_t i = 0; i < report.settings.size(); ++i) {
    const auto& r = report.settings[i];
    out += std::string(i ? ", " : "") + "{\"name\": " + json_string(r.setting->name) + ", \"value\": " + (r.set ? json_string(r.value) : "null") +
           ", \"effective\": " + json_string(r.effective) + ", \"source\": " + json_string(r.set ? "environment" : "default") +
           ", \"problem\": " + json_string(r.problem) + ", \"fallback\": " + json_string(r.setting->fallback) +
           ", \"meaning\": " + json_string(r.setting->meaning) + "}";
  }
  std::string cache_dir;
  for (const auto& r : report.settings)
    if (std::string(r.setting->name) == "JITKERN_CACHE_DIR") cache_dir = r.effective;
  // What `doctor` reports of the cache directory beyond its setting's value.
  out += "], \"cache_dir_problem\": " + json_string(cache_dir.empty() ? "" : jitkern::fs::noexec_problem(cache_dir)) + ", \"unknown\": [";
  for (std::size_t i = 0; i < report.unknown.size(); ++i) out += std::string(i ? ", " : "") + json_string(report.unknown[i]);
  out += "], \"prebuilt\": [";
  const auto layers = jitkern::store::Store::prebuilt_layers(report.prebuilt_dirs);  // an invalid setting shows above
  for (std::size_t i = 0; i < layers.size(); ++i)
    out += std::string(i ? ", " : "") + "{\"dir\": " + json_string(layers[i].root()) + ", \"label\": " + json_string(layers[i].label()) +
           ", \"problem\": " + json_string(layers[i].layer_distrust()) + "}";
  return out + "]}";
}

}  // namespace

extern "C" {

// Exported as declared in <jitkern/engine_abi.h>, which says what each returns.
#define JITKERN_ABI __attribute__((visibility("default")))

// The modes and status codes are engine_abi.h's; each export of a module is registered as the tvm-ffi
// global "<prefix><export>".
JITKERN_ABI int jitkern_build(const char* request, size_t length, int mode, char** out_result, char** out_error) {
  *out_result = nullptr;
  *out_error = nullptr;
  try {
    const std::string text(request, length);
    jitkern::BuildRequest req;
    jitkern::EngineConfig cfg;
    parse_request(text, &req, &cfg);
    cfg.parallel_build = (mode & JITKERN_MODE_PARALLEL) != 0;
    mode &= ~JITKERN_MODE_PARALLEL;
    if (mode == JITKERN_MODE_BUILD_REPORTING) {
      bool compiled = false;
      const std::string path = jitkern::find_or_build(req, cfg, &compiled).path;
      *out_result = dup(path + (compiled ? "\ncompiled" : "\ncached"));
    } else {
      *out_result = dup(mode == JITKERN_MODE_LOAD ? load_and_register(text, req, cfg) : jitkern::build(req, cfg));
    }
    return JITKERN_OK;
  } catch (const jitkern::CacheMissError& e) {
    *out_error = dup(e.what());
    return JITKERN_CACHE_MISS;
  } catch (const jitkern::BuildError& e) {
    *out_error = dup(e.what());
    return JITKERN_BUILD_ERROR;
  } catch (const std::invalid_argument& e) {
    *out_error = dup(e.what());
    return JITKERN_VALUE_ERROR;
  } catch (const std::exception& e) {
    *out_error = dup(e.what());
    return JITKERN_RUNTIME_ERROR;
  }
}

// Cache administration (see cache_command); same return convention as jitkern_build.
JITKERN_ABI int jitkern_cache(const char* request, size_t length, char** out_result, char** out_error) {
  *out_result = nullptr;
  *out_error = nullptr;
  try {
    *out_result = dup(cache_command(std::string(request, length)));
    return JITKERN_OK;
  } catch (const std::invalid_argument& e) {
    *out_error = dup(e.what());
    return JITKERN_VALUE_ERROR;
  } catch (const std::exception& e) {
    *out_error = dup(e.what());
    return JITKERN_RUNTIME_ERROR;
  }
}

// Checks a build request as a build would before compiling (plan::validate: names, files, wrappers,
// cuda_arch) and builds nothing: 0, or 2 with *out_error naming the field. For `jitkern prebuild`.
JITKERN_ABI int jitkern_check_request(const char* request, size_t length, char** out_error) {
  *out_error = nullptr;
  try {
    jitkern::BuildRequest req;
    jitkern::EngineConfig cfg;
    parse_request(std::string(request, length), &req, &cfg);
    jitkern::plan::validate(req);
    return JITKERN_OK;
  } catch (const std::exception& e) {
    *out_error = dup(e.what());
    return JITKERN_VALUE_ERROR;
  }
}

// toolchain::validate_arch: 0, or 2 with *out_error saying which forms are valid.
JITKERN_ABI int jitkern_check_arch(const char* arch, const char* origin, char** out_error) {
  *out_error = nullptr;
  try {
    jitkern::toolchain::validate_arch(arch, origin);
    return JITKERN_OK;
  } catch (const std::exception& e) {
    *out_error = dup(e.what());
    return JITKERN_VALUE_ERROR;
  }
}

// settings::flag(name): 1 or 0; -1 for a name that is not a flag or a value that is invalid.
JITKERN_ABI int jitkern_setting_flag(const char* name) {
  try {
    return jitkern::settings::flag(name) ? 1 : 0;
  } catch (const std::exception&) {
    return -1;
  }
}

// The CPUs this process may keep busy (cpus::usable: affinity, lowered to a cgroup CPU quota).
JITKERN_ABI int jitkern_usable_cpus() { return jitkern::cpus::usable(); }

// The compiler a build would use (cuda == 0: the C++ compiler, else nvcc): result "<path>\n<--version
// output>", or the engine's one-line error (with its fix) and 3. Same convention as jitkern_build.
JITKERN_ABI int jitkern_find_compiler(int cuda, char** out_result, char** out_error) {
  *out_result = nullptr;
  *out_error = nullptr;
  try {
    const auto cfg = jitkern::config::resolve_cache({}, "");
    const auto store = jitkern::store::Store::writable(cfg);
    store.ensure_writable(false);
    const auto c = cuda ? jitkern::toolchain::identify(jitkern::toolchain::nvcc_program(cfg), store, "CUDA compiler", cfg)
                        : jitkern::toolchain::identify(cfg.cxx, store, "C++ compiler", cfg);
    *out_result = dup(c.path + "\n" + c.version);
    return JITKERN_OK;
  } catch (const std::exception& e) {
    *out_error = dup(e.what());
    return JITKERN_RUNTIME_ERROR;
  }
}

// The CUDA target jitkern compiles for on a device of this compute capability (e.g. "sm_90a").
JITKERN_ABI char* jitkern_arch_for_capability(int major, int minor) {
  return dup(jitkern::toolchain::arch_for_capability(major, minor));
}

// config_json(); never fails (what cannot be resolved is reported in the object).
JITKERN_ABI char* jitkern_config() { return dup(config_json()); }

// The table of environment variables (jitkern::settings), as Markdown.
JITKERN_ABI char* jitkern_settings_markdown() { return dup(jitkern::settings::markdown()); }

JITKERN_ABI void jitkern_free(char* p) { std::free(p); }

// Routes the engine's messages to `sink(level, message)` (levels as Python logging's); NULL: stderr.
JITKERN_ABI void jitkern_set_log_sink(jitkern_log_sink sink) { jitkern::log::set_sink(sink); }

JITKERN_ABI const char* jitkern_version() { return JITKERN_VERSION; }

// The prebuilt layers installed as packages (python/jitkern/wheels.py finds them): one "label\tdir"
// line each, searched after JITKERN_PREBUILT_DIRS. Replaces what a previous call set.
JITKERN_ABI void jitkern_set_package_layers(const char* text) {
  std::vector<std::pair<std::string, std::string>> layers;
  for (const auto& line : jitkern::text::split_lines(text ? text : "")) {
    const std::size_t tab = line.find('\t');
    if (tab != std::string::npos && tab + 1 < line.size()) layers.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  jitkern::store::Store::set_package_layers(std::move(layers));
}

// The tvm-ffi C ABI this engine and jitkern's runtime library were compiled against (its c_api.h) must be
// the loaded libtvm_ffi's: 0 when it is (or no libtvm_ffi is loaded yet: C++ programs load it later),
// else 2 with *out_error naming both versions. The C ABI is versioned by major.minor.
JITKERN_ABI int jitkern_check_tvm_ffi(char** out_error) {
  *out_error = nullptr;
  using GetVersionFn = void (*)(TVMFFIVersion*);
  auto get_version = reinterpret_cast<GetVersionFn>(::dlsym(RTLD_DEFAULT, "TVMFFIGetVersion"));
  if (get_version == nullptr) return 0;
  TVMFFIVersion v{};
  get_version(&v);
  if (v.major == TVM_FFI_VERSION_MAJOR && v.minor == TVM_FFI_VERSION_MINOR) return 0;
  const auto text = [](unsigned a, unsigned b, unsigned c) { return std::to_string(a) + "." + std::to_string(b) + "." + std::to_string(c); };
  *out_error = dup("jitkern: the loaded tvm-ffi library speaks C ABI " + text(v.major, v.minor, v.patch) + ", but jitkern " + JITKERN_VERSION +
                   " was built against C ABI " + text(TVM_FFI_VERSION_MAJOR, TVM_FFI_VERSION_MINOR, TVM_FFI_VERSION_PATCH) +
                   " (major.minor must match); install an apache-tvm-ffi " + std::to_string(TVM_FFI_VERSION_MAJOR) + "." + std::to_string(TVM_FFI_VERSION_MINOR) +
                   ".x release within jitkern's requirement (`pip show jitkern` lists it), or rebuild jitkern against this one");
  return 2;
}
}
