#include "compile/nvrtc.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "base/fs_util.h"

namespace jitkern::nvrtc {

bool kernel_stubs(const std::string& path, std::vector<std::string>* out, std::string* why) {
  std::string bytes;
  if (!fs::read_file(path, &bytes)) return *why = "cannot read " + path, false;
  const auto* ehdr = reinterpret_cast<const Elf64_Ehdr*>(bytes.data());
  if (bytes.size() < sizeof(Elf64_Ehdr) || std::memcmp(ehdr->e_ident, ELFMAG, SELFMAG) != 0 || ehdr->e_ident[EI_CLASS] != ELFCLASS64 ||
      ehdr->e_shoff + std::size_t{ehdr->e_shnum} * sizeof(Elf64_Shdr) > bytes.size())
    return *why = path + " is not a 64-bit ELF object", false;
  const auto* sections = reinterpret_cast<const Elf64_Shdr*>(bytes.data() + ehdr->e_shoff);
  for (unsigned s = 0; s < ehdr->e_shnum; ++s) {
    const Elf64_Shdr& symtab = sections[s];
    if (symtab.sh_type != SHT_SYMTAB || symtab.sh_link >= ehdr->e_shnum || symtab.sh_offset + symtab.sh_size > bytes.size()) continue;
    const Elf64_Shdr& strtab = sections[symtab.sh_link];
    if (strtab.sh_offset + strtab.sh_size > bytes.size()) continue;
    const auto* syms = reinterpret_cast<const Elf64_Sym*>(bytes.data() + symtab.sh_offset);
    for (std::size_t i = 0; i < symtab.sh_size / sizeof(Elf64_Sym); ++i) {
      const Elf64_Sym& sym = syms[i];
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || ELF64_ST_VISIBILITY(sym.st_other) != STV_INTERNAL || sym.st_shndx == SHN_UNDEF ||
          sym.st_name >= strtab.sh_size)
        continue;
      const char* name = bytes.data() + strtab.sh_offset + sym.st_name;
      out->emplace_back(name, strnlen(name, strtab.sh_size - sym.st_name));
    }
  }
  return true;
}

std::string name_expression(const std::string& symbol) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status), &std::free);
  if (status != 0 || demangled == nullptr) return "";
  std::string text = demangled.get();
  if (text.rfind("void ", 0) == 0) text.erase(0, 5);  // a template's return type (kernels return void)
  int depth = 0;  // the parameter list: the first '(' outside the template arguments
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '<') ++depth;
    else if (text[i] == '>') --depth;
    else if (text[i] == '(' && depth == 0) return i == 0 ? "" : "&" + text.substr(0, i);
  }
  return "";
}

namespace {

// libnvrtc's entry points, resolved once per library path.
struct Api {
  using Program = void*;
  const char* (*error_string)(int) = nullptr;
  int (*create)(Program*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*destroy)(Program*) = nullptr;
  int (*add_name)(Program, const char*) = nullptr;
  int (*compile)(Program, int, const char* const*) = nullptr;
  int (*log_size)(Program, std::size_t*) = nullptr;
  int (*log)(Program, char*) = nullptr;
  int (*cubin_size)(Program, std::size_t*) = nullptr;
  int (*cubin)(Program, char*) = nullptr;
  int (*lowered)(Program, const char*, const char**) = nullptr;
  std::string error;
};

const Api& api(const std::string& library) {
  static std::mutex mutex;
  static std::vector<std::pair<std::string, std::unique_ptr<Api>>> loaded;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [path, a] : loaded)
    if (path == library) return *a;
  auto a = std::make_unique<Api>();
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    a->error = "cannot load " + library + ": " + (e != nullptr ? e : "unknown error");
  } else {
    const auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
      if (fn == nullptr && a->error.empty()) a->error = library + " has no " + name;
    };
    sym(a->error_string, "nvrtcGetErrorString");
    sym(a->create, "nvrtcCreateProgram");
    sym(a->destroy, "nvrtcDestroyProgram");
    sym(a->add_name, "nvrtcAddNameExpression");
    sym(a->compile, "nvrtcCompileProgram");
    sym(a->log_size, "nvrtcGetProgramLogSize");
    sym(a->log, "nvrtcGetProgramLog");
    sym(a->cubin_size, "nvrtcGetCUBINSize");
    sym(a->cubin, "nvrtcGetCUBIN");
    sym(a->lowered, "nvrtcGetLoweredName");
  }
  loaded.emplace_back(library, std::move(a));
  return *loaded.back().second;
}

}  // namespace

Result compile(const std::string& library, const std::string& source, const std::string& name, const std::vector<std::string>& options,
               const std::vector<std::string>& symbols) {
  Result r;
  const Api& a = api(library);
  if (!a.error.empty()) return r.log = a.error, r;
  std::vector<std::string> expressions;
  for (const auto& s : symbols) {
    expressions.push_back(name_expression(s));
    if (expressions.back().empty()) return r.log = "kernel " + s + " does not demangle into a name NVRTC can instantiate", r;
  }
  Api::Program program = nullptr;
  const auto failed = [&](const char* what, int status) { return r.log = std::string(what) + ": " + a.error_string(status), r; };
  if (const int s = a.create(&program, source.c_str(), name.c_str(), 0, nullptr, nullptr); s != 0) return failed("nvrtcCreateProgram", s);
  struct Destroy {
    const Api& a;
    Api::Program* p;
    ~Destroy() { a.destroy(p); }
  } destroy{a, &program};
  for (const auto& e : expressions)
    if (const int s = a.add_name(program, e.c_str()); s != 0) return failed("nvrtcAddNameExpression", s);
  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  const int status = a.compile(program, static_cast<int>(argv.size()), argv.data());
  std::size_t size = 0;
  if (a.log_size(program, &size) == 0 && size > 1) {
    std::string log(size, '\0');
    if (a.log(program, log.data()) == 0) r.log = log.substr(0, log.find('\0'));
  }
  if (status != 0) return r.log = "NVRTC: " + std::string(a.error_string(status)) + "\n" + r.log, r;
  for (std::size_t i = 0; i < symbols.size(); ++i) {
    const char* lowered = nullptr;
    if (a.lowered(program, expressions[i].c_str(), &lowered) != 0 || lowered == nullptr || symbols[i] != lowered)
      return r.log = "NVRTC named " + expressions[i] + " " + (lowered != nullptr ? lowered : "nothing") + ", the host code " + symbols[i] +
                     ": do the two passes see different declarations?",
             r;
  }
  if (const int s = a.cubin_size(program, &size); s != 0) return failed("nvrtcGetCUBINSize", s);
  r.cubin.assign(size, '\0');
  if (const int s = a.cubin(program, r.cubin.data()); s != 0) return failed("nvrtcGetCUBIN", s);
  r.ok = true;
  return r;
}

}  // namespace jitkern::nvrtc
