#include "plan/plan.h"

#include <sys/stat.h>
#include <unistd.h>

#include <jitkern/detail/device_image.h>

#include <algorithm>
#include <stdexcept>

#include "plan/command_line.h"
#include "compile/host_transform.h"
#include "config/compile_env.h"
#include "base/fs_util.h"
#include "base/sha256.h"
#include "base/text.h"

#ifndef JITKERN_VERSION
#define JITKERN_VERSION "0.0.0"
#endif

namespace jitkern::plan {
namespace {

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("jitkern: " + what); }

void check_text(const char* field, const std::string& value, bool allow_empty = false) {
  if (!allow_empty && value.empty()) bad(std::string(field) + " entries must not be empty");
  if (value.find('\0') != std::string::npos) bad(std::string(field) + " entry contains a NUL byte: '" + value.c_str() + "...'");
  if (value.find('\n') != std::string::npos) bad(std::string(field) + " entry '" + value + "' contains a newline");
}

void check_all(const char* field, const std::vector<std::string>& values) {
  for (const auto& v : values) check_text(field, v);
}

std::string resolve_source(const std::string& file, const std::string& csrc_dir) {
  const std::string path = file[0] != '/' ? csrc_dir + "/" + file : file;
  if (::access(path.c_str(), R_OK) != 0)
    throw std::invalid_argument("jitkern: kernel source '" + file + "' not found (looked at " + path +
                                "; relative names are resolved against the package's csrc/, give an absolute path for your own files)");
  if (text::include_line(path).empty())
    throw std::invalid_argument("jitkern: kernel source '" + file + "' (" + path + ") cannot be #included: its path holds " +
                                (path.find('\n') != std::string::npos ? "a newline" : "both '\"' and '>'") + "; move or link it elsewhere");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw std::invalid_argument("jitkern: kernel source '" + file + "' (" + path + ") is " +
                                (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file") + "; give the kernel file itself");
  return path;
}


// "a,b,c" as {"a", "b", "c"}: nvcc's list values and the linker's -Wl, arguments.
std::vector<std::string> comma_list(const std::string& value) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t at = value.find(',');; at = value.find(',', start)) {
    parts.push_back(value.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return parts;
    start = at + 1;
  }
}

// What nvcc would give its host compiler from `flags` (extra_cuda_cflags), for the host pass of a
// host_without_nvcc module, so that both passes see the same source and the host code compiles as it
// would under nvcc: the preprocessor's flags (-D, -U, include paths, -include, in short or nvcc's long
// forms, attached, after '=' or separate; a value's comma list split as nvcc splits it) and the values
// of -Xcompiler / --compiler-options (comma lists).
std::vector<std::string> host_pass_flags(const std::vector<std::string>& flags, std::vector<std::string>* others = nullptr) {
  struct Form {
    const char* spelling;
    const char* host;  // the host compiler's flag for each value
    bool split;        // nvcc reads the value as a comma list
  };
  static const Form kForms[] = {
      {"--define-macro", "-D", true},   {"--undefine-macro", "-U", true}, {"--include-path", "-I", true},
      {"--system-include", "-isystem", true}, {"--pre-include", "-include", true}, {"--compiler-options", "", true},
      {"-Xcompiler", "", true},         {"-isystem", "-isystem", true},   {"-idirafter", "-idirafter", false},
      {"-iquote", "-iquote", false},    {"-include", "-include", true},   {"-D", "-D", true},
      {"-U", "-U", true},               {"-I", "-I", true},
  };
  std::vector<std::string> out;
  for (std::size_t i = 0; i < flags.size(); ++i) {
    const std::string& f = flags[i];
    bool matched = false;
    for (const Form& form : kForms) {
      const std::string spelling = form.spelling;
      if (f.rfind(spelling, 0) != 0) continue;
      const bool long_form = spelling.size() > 2;
      std::string value;
      if (f.size() == spelling.size()) {
        if (i + 1 >= flags.size()) break;
        value = flags[++i];
      } else if (f[spelling.size()] == '=') {
        value = f.substr(spelling.size() + 1);
      } else if (!long_form || spelling == "-isystem" || spelling == "-iquote" || spelling == "-idirafter") {
        value = f.substr(spelling.size());  // -DX, -I/dir, -isystem/dir
      } else {
        continue;  // -includefoo, --define-macros: another flag
      }
      for (const auto& part : form.split ? comma_list(value) : std::vector<std::string>{value}) {
        if (part.empty()) continue;
        if (*form.host == '\0') {
          out.push_back(part);  // a host compiler flag
        } else if (std::string(form.host).size() > 2) {
          out.insert(out.end(), {form.host, part});
        } else {
          out.push_back(form.host + part);
        }
      }
      matched = true;
      break;
    }
    if (!matched && others != nullptr) others->push_back(f);
  }
  return out;
}

// NVRTC's options for the device code of a host_without_nvcc module from `flags` (extra_cuda_cflags):
// the preprocessor's flags, also those among -Xcompiler's values (nvcc's host compiler preprocesses the
// device code too), --use_fast_math and -lineinfo; false where a flag has no NVRTC equivalent here,
// -Xcompiler's other flags included (-fopenmp defines _OPENMP for nvcc's device code): nvcc then
// compiles the kernels.
bool nvrtc_flags(const std::vector<std::string>& flags, std::vector<std::string>* out) {
  std::vector<std::string> rest, others;
  for (const auto& f : flags) {
    if (f == "--use_fast_math" || f == "-use_fast_math") out->push_back("--use_fast_math");
    else if (f == "-lineinfo" || f == "--generate-line-info") out->push_back("-lineinfo");
    else if (f != "--expt-relaxed-constexpr" && f != "-expt-relaxed-constexpr") rest.push_back(f);  // -default-device covers it
  }
  const auto pre = host_pass_flags(rest, &others);
  for (std::size_t i = 0; i < pre.size(); ++i) {
    const std::string& f = pre[i];
    const bool separate = f == "-include" || f == "-isystem" || f == "-iquote" || f == "-idirafter";
    if (separate && i + 1 < pre.size()) out->push_back((f == "-include" ? "--pre-include=" : "-I") + pre[++i]);
    else if (f.size() > 2 && (f.rfind("-D", 0) == 0 || f.rfind("-U", 0) == 0 || f.rfind("-I", 0) == 0)) out->push_back(f);
    else return false;  // a host compiler flag from -Xcompiler
  }
  return others.empty();
}

}  // namespace

void validate(const BuildRequest& req) {
  if (req.name_parts.empty()) bad("a module needs a name (load_jit's first positional argument)");
  check_all("name", req.name_parts);
  check_all("cpp_files", req.cpp_files);
  check_all("cuda_files", req.cuda_files);
  check_all("extra_cflags", req.extra_cflags);
  check_all("extra_cuda_cflags", req.extra_cuda_cflags);
  check_all("extra_ldflags", req.extra_ldflags);
  check_all("extra_include_paths", req.extra_include_paths);
  check_text("build_directory", req.build_directory, true);
  check_text("cuda_arch", req.cuda_arch, true);
  if (req.cpp_files.empty() && req.cuda_files.empty()) bad("a module needs at least one of cpp_files or cuda_files");
  if (req.cpp_files.empty() && !req.cpp_wrappers.empty()) bad("cpp_wrappers were given without cpp_files");
  if (req.cuda_files.empty() && !req.cuda_wrappers.empty()) bad("cuda_wrappers were given without cuda_files");
  if (req.cuda_files.empty() && req.host_without_nvcc) bad("host_without_nvcc was given without cuda_files");
  if (req.host_prelude && !req.host_without_nvcc) bad("host_prelude was given without host_without_nvcc (it is the host pass's prelude)");
  if (req.cuda_files.empty() && req.host_without_cudafe) bad("host_without_cudafe was given without cuda_files");
  if (req.host_shared_files < 0 || req.host_shared_files > static_cast<int>(req.cuda_files.size()))
    bad("host_shared_files must be between 0 and the number of cuda_files (" + std::to_string(req.cuda_files.size()) + "), got " +
        std::to_string(req.host_shared_files));
  if (req.host_shared_files > 0 && !req.host_without_cudafe)
    bad("host_shared_files was given without host_without_cudafe (it names the rewritten host side's shared headers)");
  if (req.device_parts < 1 || req.device_parts > JITKERN_MAX_DEVICE_PARTS)
    bad("device_parts must be between 1 and " + std::to_string(JITKERN_MAX_DEVICE_PARTS) + ", got " + std::to_string(req.device_parts));
  if (req.device_parts > 1 && !req.host_without_nvcc)
    bad("device_parts was given without host_without_nvcc (its device passes' images are what a host pass's launches look kernels up in)");
  if (req.host_without_nvcc && req.host_without_cudafe)
    bad("host_without_nvcc and host_without_cudafe were both given (the first has no nvcc host side to rewrite)");
  if (req.host_without_nvcc || req.host_without_cudafe) {
    // The linker's arguments among extra_ldflags (-Wl, comma lists, -Xlinker's or --for-linker's, the driver's -s).
    const auto& ld = req.extra_ldflags;
    for (std::size_t i = 0; i < ld.size(); ++i) {
      std::vector<std::string> args;
      const command_line::LinkerFlag kind = command_line::linker_flag(ld[i]);
      if (kind == command_line::LinkerFlag::kComma) {
        args = comma_list(ld[i].substr(4));
      } else if (kind == command_line::LinkerFlag::kNext && i + 1 < ld.size()) {
        args.push_back(ld[++i]);
      } else if (kind == command_line::LinkerFlag::kAttached) {
        args.push_back(ld[i].substr(ld[i].find('=') + 1));
      } else if (ld[i] == "-s") {
        args.push_back("-s");
      }
      for (const auto& a : args)
        if (a == "-s" || a == "--strip-all" || a == "-x" || a == "--discard-all")
          bad("extra_ldflags: " + ld[i] + " removes the symbol table that a " + (req.host_without_nvcc ? "host_without_nvcc" : "host_without_cudafe") +
              " module finds its kernels in");
    }
  }
  // A module without exports would compile and then have nothing for the loader to find.
  if (req.cpp_wrappers.empty() && req.cuda_wrappers.empty())
    bad("a module needs at least one export: give cpp_wrappers or cuda_wrappers, a list of (export_name, cpp_expression) "
        "pairs, e.g. cpp_wrappers=[(\"scale\", \"scale<4>\")]");
  if (!req.cuda_arch.empty()) toolchain::validate_arch(req.cuda_arch, toolchain::kSpecArch);
  std::vector<std::string> seen;
  for (const auto* wrappers : {&req.cpp_wrappers, &req.cuda_wrappers}) {
    const char* field = wrappers == &req.cpp_wrappers ? "cpp_wrappers" : "cuda_wrappers";
    for (const auto& w : *wrappers) {
      const std::string &name = w.name, &expr = w.expr;
      check_text(field, name, true);
      check_text(field, expr, true);
      check_text(field, w.arg_names, true);
      if (!w.arg_names.empty()) {
        std::string arg;
        for (char c : w.arg_names + ",") {
          if (c == ',') {
            if (!text::is_identifier(arg))
              bad(std::string(field) + ": argument names of '" + name + "' must be C identifiers separated by commas, got '" + w.arg_names + "'");
            arg.clear();
          } else if (c != ' ') {
            arg += c;
          }
        }
      }
      if (!text::is_identifier(name)) bad(std::string(field) + ": export name '" + name + "' is not a C identifier");
      // A loaded module's exports are attributes of its Python object, which has `path` and `exports`.
      if (name.rfind("__", 0) == 0 || name == "path" || name == "exports")
        bad(std::string(field) + ": export name '" + name + "' is reserved (names starting with __, path, exports)");
      if (expr.find_first_not_of(" \t") == std::string::npos)
        bad(std::string(field) + ": the C++ expression exported as '" + name + "' is empty");
      for (const auto& s : seen)
        if (s == name) bad(std::string(field) + ": export name '" + name + "' is used twice");
      seen.push_back(name);
    }
  }
}

std::vector<std::string> export_names(const BuildRequest& req) {
  std::vector<std::string> out;
  for (const auto& w : req.cpp_wrappers) out.push_back(w.name);
  for (const auto& w : req.cuda_wrappers) out.push_back(w.name);
  return out;
}

// The kernel files, included: what NVRTC compiles of a module (the export layer is host code).
static std::string kernel_includes(const std::vector<std::string>& files) {
  std::string src = "// generated by jitkern\n";
  for (const auto& f : files) src += text::include_line(f);
  return src;
}

std::string wrapper_source(const std::vector<std::string>& files, const std::vector<Wrapper>& wrappers, std::vector<int>* lines) {
  std::string src = kernel_includes(files);
  src += "#include <jitkern/export.h>\n";
  for (const auto& w : wrappers) {
    if (lines != nullptr) lines->push_back(static_cast<int>(std::count(src.begin(), src.end(), '\n')) + 1);
    if (w.arg_names.empty()) src += "JITKERN_EXPORT(" + w.name + ", " + w.expr + ")\n";
    else src += "JITKERN_EXPORT_NAMED(" + w.name + ", \"" + w.arg_names + "\", " + w.expr + ")\n";
  }
  return src;
}

std::vector<std::string> sources(const BuildRequest& req, const Config& cfg) {
  std::vector<std::string> out;
  for (const auto* files : {&req.cpp_files, &req.cuda_files})
    for (const auto& f : *files) out.push_back(resolve_source(f, cfg.csrc_dir));
  return out;
}

Plan make(const BuildRequest& req, const Config& cfg, const std::vector<std::string>& resolved_sources, const std::string& cuda_arch,
          const fs::WorkingDir& cwd) {
  Plan p;
  for (const auto& part : req.name_parts) p.name += (p.name.empty() ? "" : "_") + part;
  p.spec = req.name_parts.empty() ? "" : req.name_parts.front();
  p.has_cpp = !req.cpp_files.empty();
  p.has_cuda = !req.cuda_files.empty();
  p.sources = resolved_sources;
  const std::vector<std::string> cpp_files(p.sources.begin(), p.sources.begin() + req.cpp_files.size());
  const std::vector<std::string> cuda_files(p.sources.begin() + req.cpp_files.size(), p.sources.end());
  for (const bool cuda : {false, true}) {
    if (!(cuda ? p.has_cuda : p.has_cpp)) continue;
    const auto& wrappers = cuda ? req.cuda_wrappers : req.cpp_wrappers;
    std::vector<int> lines;
    (cuda ? p.cuda_source : p.cpp_source) = wrapper_source(cuda ? cuda_files : cpp_files, wrappers, &lines);
    for (std::size_t i = 0; i < wrappers.size(); ++i)
      p.wrapper_lines.push_back({cuda ? "cuda_wrappers" : "cpp_wrappers", wrappers[i].name, wrappers[i].expr, lines[i]});
  }

  // The request's include paths first: a package's own headers win over same-named ones of jitkern's
  // (e.g. an installed reference package's <sgl_kernel/...> over jitkern's compatibility copies).
  std::vector<std::string> includes;
  for (const auto& d : req.extra_include_paths) includes.push_back("-I" + cwd.absolute(d, "extra_include_paths"));
  includes.insert(includes.end(), {"-I" + cfg.include_dir, "-I" + cfg.tvm_ffi_include_dir});
  if (cfg.dlpack_include_dir != cfg.tvm_ffi_include_dir) includes.push_back("-I" + cfg.dlpack_include_dir);

  for (const auto& [token, dir] : std::vector<std::pair<std::string, std::string>>{
           {"@jitkern-include", cfg.include_dir}, {"@jitkern-csrc", cfg.csrc_dir}, {"@jitkern-lib", cfg.runtime_lib_dir},
           {"@tvm-ffi-include", cfg.tvm_ffi_include_dir}, {"@dlpack-include", cfg.dlpack_include_dir}, {"@tvm-ffi-lib", cfg.tvm_ffi_lib_dir}})
    if (dir.size() > 1 && std::none_of(p.roots.begin(), p.roots.end(), [&](const auto& r) { return r.second == dir; }))
      p.roots.emplace_back(token, dir);
  std::sort(p.roots.begin(), p.roots.end(), [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });

  // Everything that changes the library: the commands as they will run, with root directories as tokens
  // and the compilers as kCxx / kNvcc (their versions are in the content key, see toolchain_id).
  Sha256 key;
  key.field("jitkern-engine-5").field(JITKERN_VERSION).field(p.name);
  key.field(cfg.tvm_ffi_version).field("runtime-abi").field(std::to_string(kRuntimeAbi));
  auto key_args = [&](const std::vector<std::string>& argv) {
    for (const auto& a : argv) key.field(portable(p, a));
  };

  if (p.has_cpp) {
    p.cpp_compile = {kCxx, "-std=c++20", "-O2", "-fPIC", "-fvisibility=hidden"};
    p.cpp_compile.insert(p.cpp_compile.end(), includes.begin(), includes.end());
    const auto flags = command_line::resolve(req.extra_cflags, "extra_cflags", command_line::Tool::kHost, cwd);
    p.cpp_compile.insert(p.cpp_compile.end(), flags.begin(), flags.end());
    key.field("cpp").field(portable(p, p.cpp_source));
    key_args(p.cpp_compile);
  }
  if (p.has_cuda) {
    const auto cuda_flags = command_line::resolve(req.extra_cuda_cflags, "extra_cuda_cflags", command_line::Tool::kNvcc, cwd);
    const std::string& arch = p.cuda_arch = cuda_arch;
    const std::string compute = "compute_" + arch.substr(3);
    // Host code at -O2: as fast per call as -O3, compiled in less time (docs/benchmarks/framework.md). cicc and
    // ptxas split their work over a fixed number of threads: the machine code depends on the count, so it
    // is the same on every machine (and part of the key), never the number of CPUs.
    p.cuda_compile = {kNvcc, "-std=c++20", "-O2", "--expt-relaxed-constexpr", "--split-compile=" + std::to_string(kSplitCompileThreads),
                      "-gencode=arch=" + compute + ",code=" + arch,
                      "-Xcompiler", "-fPIC,-fvisibility=hidden"};
    // Always the identified host compiler: else nvcc takes the first gcc on PATH, whose version is in no key.
    p.cuda_compile.insert(p.cuda_compile.end(), {"-ccbin", kCxx});
    p.cuda_compile.insert(p.cuda_compile.end(), includes.begin(), includes.end());
    p.cuda_compile.insert(p.cuda_compile.end(), cuda_flags.begin(), cuda_flags.end());
    key.field("cuda").field(portable(p, p.cuda_source));
    key_args(p.cuda_compile);
    // Extended lambdas: cudafe++ wraps a __device__ lambda's closure type, which names the kernels it
    // instantiates; the rewrite cannot.
    const bool extended_lambda = std::any_of(cuda_flags.begin(), cuda_flags.end(), [](const std::string& f) {
      return f == "--extended-lambda" || f == "-extended-lambda" || f == "--expt-extended-lambda" || f == "-expt-extended-lambda";
    });
    if (req.host_without_cudafe && extended_lambda) p.host_rewrite_unused = "extended lambdas (--extended-lambda) need cudafe++";
    if ((p.host_without_cudafe = req.host_without_cudafe && !extended_lambda))
      key.field("host-without-cudafe").field(std::to_string(host_transform::kVersion));
    if (p.host_without_cudafe && req.host_shared_files > 0)  // not in the key: it changes no output
      p.host_shared_prefix = cuda_files[req.host_shared_files - 1];
    if (req.host_without_nvcc) {
      p.host_pass = {kCxx, "-std=c++20", "-O2", "-fPIC", "-fvisibility=hidden", "-x", "c++"};
      p.host_pass.insert(p.host_pass.end(), includes.begin(), includes.end());
      if (req.host_prelude) {  // the first -include: GCC takes a precompiled header only there
        p.host_prelude = cfg.include_dir + "/jitkern/host_prelude.h";
        p.host_pass.insert(p.host_pass.end(), {"-include", p.host_prelude});
      }
      const auto host_flags = host_pass_flags(cuda_flags);
      p.host_pass.insert(p.host_pass.end(), host_flags.begin(), host_flags.end());
      key.field("host-without-nvcc");
      key_args(p.host_pass);
      // Which kernels each device pass may build follows from the count (builds run at once take one pass).
      if ((p.device_parts = req.device_parts) > 1) key.field("device-parts").field(std::to_string(p.device_parts));
      // JITKERN_DEVICE_COMPILER=nvrtc: in the key as asked (the lookup's plan knows no compilers); whether
      // NVRTC can compile this module is the build's question (plan: its flags; build: its library).
      if (cfg.device_compiler != config::DeviceCompiler::kNvcc) {
        const bool nvrtc = cfg.device_compiler == config::DeviceCompiler::kNvrtc;
        key.field(nvrtc ? "nvrtc" : "nvrtc-or-nvcc");  // NVRTC's machine code can differ from nvcc's
        p.nvrtc_asked = nvrtc;
        std::vector<std::string> device_flags;
        if (nvrtc_flags(cuda_flags, &device_flags)) {
          // The same split of the optimizer's work as nvcc's (kSplitCompileThreads); -default-device: what
          // NVRTC sees of the source is device code (its host code is under #ifndef __CUDACC_RTC__).
          p.nvrtc_std_dir = cfg.include_dir + "/jitkern/detail/rtc";
          p.nvrtc_options = {"-std=c++20", "-arch=" + arch, "-default-device", "-split-compile=" + std::to_string(kSplitCompileThreads),
                             "-I" + p.nvrtc_std_dir};
          p.nvrtc_options.insert(p.nvrtc_options.end(), includes.begin(), includes.end());
          p.nvrtc_options.insert(p.nvrtc_options.end(), device_flags.begin(), device_flags.end());
          p.nvrtc_source = kernel_includes(cuda_files);
          key_args(p.nvrtc_options);
        } else {
          p.nvrtc_unused = "a flag of extra_cuda_cflags has no NVRTC equivalent here";
        }
        if (!p.nvrtc_unused.empty()) p.nvrtc_options.clear();
      }
    }
  }
  // The system's headers and libraries (libc, -dev packages): the platform's, not tracked; the package's and
  // tvm-ffi's libraries: covered by the jitkern and tvm-ffi versions and kRuntimeAbi in the key.
  for (const char* dir : {"/usr/include/", "/usr/lib/", "/usr/lib64/", "/usr/lib32/", "/lib/", "/lib64/", "/lib32/"})
    p.dep_exclude_prefixes.push_back(dir);
  for (const auto& dir : {cfg.runtime_lib_dir, cfg.tvm_ffi_lib_dir})
    if (!dir.empty()) p.dep_exclude_prefixes.push_back(dir + "/");
  // The host compiler links (also for CUDA: objects compiled without -rdc need no device link).
  // -z noseparate-code: two loadable segments instead of four, so loading a module maps less.
  // (gold has no such option: a module linked by it keeps gold's layout.)
  const auto ldflags = command_line::resolve(req.extra_ldflags, "extra_ldflags", command_line::Tool::kLink, cwd);
  const bool gold = std::find(ldflags.begin(), ldflags.end(), "-fuse-ld=gold") != ldflags.end();
  p.link = {"-shared", "-L" + cfg.runtime_lib_dir, "-ljitkern_runtime", "-L" + cfg.tvm_ffi_lib_dir, "-ltvm_ffi"};
  if (!gold) p.link.insert(p.link.begin() + 1, "-Wl,-z,noseparate-code");
  // No RUNPATH: a relocated cache must not look in the build machine's directories (the loader supplies
  // these libraries, module.cc).
  p.link.insert(p.link.end(), ldflags.begin(), ldflags.end());
  p.link_option_files = command_line::linker_option_files(ldflags);
  key.field("link");
  key_args(p.link);
  // The CUDA runtime's location follows from the nvcc identity already in the key; the build adds it.

  p.request_key = key.hex();
  return p;
}

void bind(Plan& p, const Config& cfg, const Toolchain& tc) {
  p.host_cxx = tc.cxx.path;
  if (p.has_cuda) p.nvcc = tc.nvcc.path;
  for (auto* argv : {&p.cpp_compile, &p.cuda_compile, &p.host_pass})
    for (auto& a : *argv)
      if (a == kCxx) a = p.host_cxx;
      else if (a == kNvcc) a = p.nvcc;
  p.toolchain_id = toolchain::id(tc.cxx, p.has_cuda ? &tc.nvcc : nullptr);
  // GCC's --version names its copyright holder; clang's and others' do not.
  p.host_cxx_gcc = tc.cxx.version.find("Free Software Foundation") != std::string::npos;
  if (!p.nvrtc_options.empty()) {
    // NVRTC's stubs are marked by GCC's internal visibility (clang treats it as hidden).
    if (p.nvrtc_unused.empty() && tc.cxx.version.find("clang") != std::string::npos) p.nvrtc_unused = "the host compiler is clang";
    if (p.nvrtc_unused.empty() && (p.nvrtc_library = toolchain::nvrtc_library(tc.nvcc.path)).empty())
      p.nvrtc_unused = "the CUDA toolkit has no libnvrtc";
    if (!p.nvrtc_unused.empty()) p.nvrtc_options.clear();
  }
  // The compilers' own files are covered by their versions.
  std::vector<std::string> own = p.has_cuda ? tc.nvcc.own_dirs : std::vector<std::string>{};
  own.insert(own.end(), tc.cxx.own_dirs.begin(), tc.cxx.own_dirs.end());
  p.dep_exclude_prefixes.insert(p.dep_exclude_prefixes.begin(), own.begin(), own.end());
  Sha256 config;
  config.field(p.toolchain_id).field(compile_env::key(cfg));
  for (const auto* argv : {&p.cpp_compile, &p.cuda_compile, &p.host_pass, &p.nvrtc_options, &p.link}) {
    config.field("argv");
    for (const auto& a : *argv) config.field(a);
  }
  p.config_key = config.hex();
}

std::string portable(const Plan& p, const std::string& text) {
  std::string out = text;
  for (const auto& [token, dir] : p.roots) {
    std::size_t at = out.find(dir);
    while (at != std::string::npos) {
      // only whole directory names: /opt/x/include, not /opt/x/include2
      const char next = at + dir.size() < out.size() ? out[at + dir.size()] : '\0';
      const bool whole = next == '\0' || next == '/' || next == '"' || next == ' ' || next == ',' || next == '\n';
      if (whole) out.replace(at, dir.size(), token);
      at = out.find(dir, at + (whole ? token.size() : 1));
    }
  }
  return out;
}

std::string portable_path(const Plan& p, const std::string& path) {
  for (const auto& [token, dir] : p.roots)  // longest first
    if (path.compare(0, dir.size(), dir) == 0 && (path.size() == dir.size() || path[dir.size()] == '/'))
      return token + path.substr(dir.size());
  return path;
}

std::string local(const Plan& p, const std::string& path) {
  if (path.empty() || path[0] != '@') return path;
  for (const auto& [token, dir] : p.roots)
    if (path.compare(0, token.size(), token) == 0 && (path.size() == token.size() || path[token.size()] == '/'))
      return dir + path.substr(token.size());
  return path;  // a token this machine does not have: the file "does not exist" here
}

}  // namespace jitkern::plan
