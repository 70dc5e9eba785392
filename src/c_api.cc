// A plain C entry point to the engine for the Python layer (ctypes): the request is a list of
// "key<TAB>value" lines, so no serialization library is needed on either side.
#include <jitkern/jit.h>
#include <tvm/ffi/c_api.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

char* dup(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p != nullptr) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

void parse_request(const char* text, jitkern::BuildRequest* req, jitkern::EngineConfig* cfg) {
  const std::string all = text;
  std::size_t start = 0;
  while (start < all.size()) {
    std::size_t stop = all.find('\n', start);
    if (stop == std::string::npos) stop = all.size();
    const std::string line = all.substr(start, stop - start);
    start = stop + 1;
    if (line.empty()) continue;
    const auto tab = line.find('\t');
    if (tab == std::string::npos) throw std::runtime_error("jitkern: malformed engine request line: " + line);
    const std::string key = line.substr(0, tab), value = line.substr(tab + 1);
    auto pair = [&]() {
      const auto t2 = value.find('\t');
      if (t2 == std::string::npos) throw std::runtime_error("jitkern: malformed wrapper in engine request: " + value);
      return std::make_pair(value.substr(0, t2), value.substr(t2 + 1));
    };
    if (key == "name") req->name_parts.push_back(value);
    else if (key == "cpp_file") req->cpp_files.push_back(value);
    else if (key == "cuda_file") req->cuda_files.push_back(value);
    else if (key == "cpp_wrapper") req->cpp_wrappers.push_back(pair());
    else if (key == "cuda_wrapper") req->cuda_wrappers.push_back(pair());
    else if (key == "cflag") req->extra_cflags.push_back(value);
    else if (key == "cuda_cflag") req->extra_cuda_cflags.push_back(value);
    else if (key == "ldflag") req->extra_ldflags.push_back(value);
    else if (key == "include") req->extra_include_paths.push_back(value);
    else if (key == "build_directory") req->build_directory = value;
    else if (key == "cuda_arch") req->cuda_arch = value;
    else if (key == "cuda_device") req->cuda_device = std::atoi(value.c_str());
    else if (key == "cache_dir") cfg->cache_dir = value;
    else if (key == "lock_dir") cfg->lock_dir = value;
    else if (key == "package_dir") cfg->package_dir = value;
    else if (key == "tvm_ffi_include") cfg->tvm_ffi_include_dir = value;
    else if (key == "dlpack_include") cfg->dlpack_include_dir = value;
    else if (key == "tvm_ffi_lib") cfg->tvm_ffi_lib_dir = value;
    else if (key == "tvm_ffi_version") cfg->tvm_ffi_version = value;
    else throw std::runtime_error("jitkern: unknown engine request key '" + key + "'");
  }
}

// Registers each export `name` of a loaded module as the tvm-ffi global function `<prefix><name>`,
// for tvm_ffi.get_global_func. This replaces tvm_ffi.load_module on the warm path (measured on the
// H100: about 0.25 ms for load_module, about 0.09 ms for jitkern::load's dlopen plus this). tvm-ffi's
// C API is looked up through the module, which links it, so the runtime library keeps no link-time
// tvm-ffi dependency.
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

}  // namespace

extern "C" {

// Returns 0 and sets *out_path on success; 1 (build failed) or 2 (other error) and sets *out_error
// otherwise. Strings are malloc'ed; release them with jitkern_free. With a non-null `register_prefix`
// the library is also loaded and its exports registered as tvm-ffi globals (register_exports).
__attribute__((visibility("default"))) int jitkern_build(const char* request, const char* register_prefix, char** out_path,
                                                         char** out_error) {
  *out_path = nullptr;
  *out_error = nullptr;
  try {
    jitkern::BuildRequest req;
    jitkern::EngineConfig cfg;
    parse_request(request, &req, &cfg);
    if (register_prefix == nullptr) {
      *out_path = dup(jitkern::build(req, cfg));
      return 0;
    }
    const auto module = jitkern::load(req, cfg);
    std::vector<std::string> exports;
    for (const auto& w : req.cpp_wrappers) exports.push_back(w.first);
    for (const auto& w : req.cuda_wrappers) exports.push_back(w.first);
    register_exports(*module, exports, register_prefix);
    *out_path = dup(module->path());
    return 0;
  } catch (const jitkern::BuildError& e) {
    *out_error = dup(e.what());
    return 1;
  } catch (const std::exception& e) {
    *out_error = dup(e.what());
    return 2;
  }
}

__attribute__((visibility("default"))) void jitkern_free(char* p) { std::free(p); }

__attribute__((visibility("default"))) const char* jitkern_version() { return JITKERN_VERSION; }
}
