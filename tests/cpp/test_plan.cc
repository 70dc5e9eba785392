// The pure build plan: request validation, the arch rule, the cache key and how the linker's options are read.
#include <gtest/gtest.h>
#include <jitkern/jit.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "plan/command_line.h"
#include "plan/plan.h"
#include "base/text.h"
#include "compile/toolchain.h"

using namespace jitkern;

namespace {

BuildRequest cpu_request() {
  BuildRequest r;
  r.name_parts = {"scale", "3"};
  r.cpp_files = {JITKERN_SOURCE_DIR "/examples/cpp/saxpy_cpu.h"};
  r.cpp_wrappers = {{"saxpy", "saxpy<3>"}};
  return r;
}

plan::Config test_config() {
  plan::Config c;
  c.cache_dir = "/cache";
  c.lock_dir = "/cache/locks";
  c.include_dir = "/pkg/include";
  c.csrc_dir = JITKERN_SOURCE_DIR "/csrc";
  c.runtime_lib_dir = "/pkg/lib";
  c.tvm_ffi_include_dir = c.dlpack_include_dir = "/tvm/include";
  c.tvm_ffi_lib_dir = "/tvm/lib";
  return c;
}

plan::Toolchain toolchain_() {
  plan::Toolchain t;
  t.cxx = {"/usr/bin/c++", "/usr/bin/g++-12", {1, 2}, "g++ 12.2", {"/usr/lib/gcc/", "/usr/include/c++/"}};
  t.nvcc = {"/cuda/bin/nvcc", "/cuda/bin/nvcc", {3, 4}, "release 13.0", {"/cuda/targets/", "/cuda/nvvm/", "/cuda/include/"}};
  return t;
}

// The plan a build makes (once) and binds after a miss.
plan::Plan plan_of(const BuildRequest& r, const plan::Config& cfg, const plan::Toolchain& tc, const std::string& cwd) {
  plan::Plan p = plan::make(r, cfg, plan::sources(r, cfg), r.cuda_files.empty() ? "" : "sm_90a", cwd);
  plan::bind(p, cfg, tc);
  return p;
}

std::string key(const BuildRequest& r, const std::string& cwd = "/work") {
  plan::validate(r);
  return plan_of(r, test_config(), toolchain_(), cwd).request_key;
}

void expect_invalid(const BuildRequest& r, const std::string& needle) {
  try {
    plan::validate(r);
    ADD_FAILURE() << "accepted a request that should fail with: " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Plan, ArchRule) {
  EXPECT_EQ(toolchain::arch_for_capability(9, 0), "sm_90a");
  EXPECT_EQ(toolchain::arch_for_capability(10, 0), "sm_100a");
  EXPECT_EQ(toolchain::arch_for_capability(8, 9), "sm_89");
  EXPECT_EQ(toolchain::arch_for_capability(8, 0), "sm_80");
  for (const char* ok : {"sm_90a", "sm_90", "sm_80", "sm_100f", "sm_120a"}) EXPECT_NO_THROW(toolchain::validate_arch(ok, "test")) << ok;
  for (const char* bad : {"sm90", "sm_9", "sm_90b", "compute_90", "sm_90aa", ""})
    EXPECT_THROW(toolchain::validate_arch(bad, "test"), std::invalid_argument) << bad;
}

TEST(Plan, InvalidArchNamesWhereItCameFromAndTheValidForms) {
  try {
    toolchain::validate_arch("hopper", "JITKERN_CUDA_ARCH");
    ADD_FAILURE() << "accepted 'hopper'";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("invalid CUDA architecture 'hopper' (from JITKERN_CUDA_ARCH)"), std::string::npos) << what;
    for (const char* form : {"sm_80", "sm_90a", "sm_100f"}) EXPECT_NE(what.find(form), std::string::npos) << form << ": " << what;
  }
  BuildRequest r = cpu_request();
  r.cuda_files = {"add_constant.cuh"};
  r.cuda_arch = "sm_9x";
  expect_invalid(r, "invalid CUDA architecture 'sm_9x' (from the spec's cuda_arch)");
}

TEST(Plan, WrapperLinesPointAtEachWrappersExport) {
  BuildRequest r = cpu_request();
  r.cpp_wrappers = {{"axpy", "saxpy<3>"}, {"named", "saxpy<4>", "y, x"}};
  r.cuda_files = {"add_constant.cuh"};
  r.cuda_wrappers = {{"add_constant", "add_constant<5>"}};
  plan::validate(r);
  const plan::Plan p = plan_of(r, test_config(), toolchain_(), "/work");
  ASSERT_EQ(p.wrapper_lines.size(), 3u);
  for (const auto& w : p.wrapper_lines) {
    const auto lines = text::split_lines(w.field == "cpp_wrappers" ? p.cpp_source : p.cuda_source);
    ASSERT_GE(w.line, 1);
    ASSERT_LE(w.line, static_cast<int>(lines.size()));
    const std::string& at = lines[w.line - 1];
    EXPECT_EQ(at.rfind("JITKERN_EXPORT", 0), 0u) << at;
    EXPECT_NE(at.find("(" + w.name + ", "), std::string::npos) << at;
    EXPECT_NE(at.find(w.expr + ")"), std::string::npos) << at;
  }
  EXPECT_EQ(p.wrapper_lines[0].field, "cpp_wrappers");
  EXPECT_EQ(p.wrapper_lines[2].field, "cuda_wrappers");
}

TEST(Plan, ValidationNamesTheField) {
  BuildRequest r = cpu_request();
  r.name_parts.clear();
  expect_invalid(r, "needs a name");
  r = cpu_request();
  r.cpp_files.clear();
  expect_invalid(r, "at least one of cpp_files or cuda_files");
  r = cpu_request();
  r.cpp_wrappers = {{"a-b", "f"}};
  expect_invalid(r, "cpp_wrappers: export name 'a-b' is not a C identifier");
  for (const char* reserved : {"path", "exports", "__dict__", "__class__"}) {
    r.cpp_wrappers = {{reserved, "f"}};
    expect_invalid(r, "is reserved");
  }
  r.cpp_wrappers = {{"f", "f"}, {"f", "g"}};
  expect_invalid(r, "used twice");
  r.cpp_wrappers = {{"f", "  "}};
  expect_invalid(r, "is empty");
  r.cpp_wrappers = {{"f", "f\ng"}};
  expect_invalid(r, "contains a newline");
  r = cpu_request();
  r.extra_cflags = {std::string("-DX\0Y", 5)};
  expect_invalid(r, "extra_cflags entry contains a NUL byte");
  r = cpu_request();
  r.name_parts.push_back("a\nb");
  expect_invalid(r, "name entry 'a\nb' contains a newline");
  r = cpu_request();
  r.cuda_wrappers = {{"f", "f"}};
  expect_invalid(r, "cuda_wrappers were given without cuda_files");
  r = cpu_request();
  r.cpp_wrappers.clear();
  expect_invalid(r, "a module needs at least one export: give cpp_wrappers or cuda_wrappers");
  r.cuda_files = {"add_constant.cuh"};
  expect_invalid(r, "a module needs at least one export: give cpp_wrappers or cuda_wrappers");
  r = cpu_request();
  r.cuda_arch = "sm_9x";
  EXPECT_THROW(plan::validate(r), std::invalid_argument);
  r = cpu_request();
  r.host_without_nvcc = true;
  expect_invalid(r, "host_without_nvcc was given without cuda_files");
  r.cuda_files = {"add_constant.cuh"};
  r.extra_ldflags = {"-Wl,-s"};
  expect_invalid(r, "extra_ldflags: -Wl,-s removes the symbol table that a host_without_nvcc module finds its kernels in");
  for (const std::vector<std::string>& strip : std::vector<std::vector<std::string>>{
           {"-s"}, {"-Wl,-O1,-s"}, {"-Wl,--strip-all,--as-needed"}, {"-Xlinker", "-x"}, {"-Wl,--discard-all"}}) {
    r.extra_ldflags = strip;
    expect_invalid(r, "removes the symbol table that a host_without_nvcc module finds its kernels in");
  }
  r.extra_ldflags = {"-Wl,-O1,--as-needed", "-Xlinker", "--gc-sections", "-Wl,--strip-debug"};
  EXPECT_NO_THROW(plan::validate(r));
}

TEST(Plan, DevicePartsAreCountedAndKeyedOnlyForAHostPass) {
  BuildRequest r;
  r.name_parts = {"parts"};
  r.cuda_files = {"add_constant.cuh"};
  r.cuda_wrappers = {{"f", "f"}};
  r.device_parts = 2;
  expect_invalid(r, "device_parts was given without host_without_nvcc");
  r.host_without_nvcc = true;
  for (const int bad_count : {0, -1, 9}) {
    r.device_parts = bad_count;
    expect_invalid(r, "device_parts must be between 1 and 8, got " + std::to_string(bad_count));
  }
  r.device_parts = 1;
  const std::string one = key(r);
  const plan::Plan p1 = plan_of(r, test_config(), toolchain_(), "/work");
  EXPECT_EQ(p1.device_parts, 1);
  r.device_parts = 3;
  const plan::Plan p3 = plan_of(r, test_config(), toolchain_(), "/work");
  EXPECT_EQ(p3.device_parts, 3);
  EXPECT_NE(key(r), one) << "the library's images follow from the count";
  r.device_parts = 8;
  EXPECT_NE(key(r), key([&] { BuildRequest q = r; q.device_parts = 3; return q; }()));
  EXPECT_EQ(p3.cuda_compile, p1.cuda_compile) << "each pass adds its own -D flags when it runs, not the plan's command";
}

TEST(Plan, MissingSourceIsReportedWithWhereItLooked) {
  BuildRequest r = cpu_request();
  r.cpp_files = {"no_such_kernel.h"};
  try {
    plan_of(r, test_config(), toolchain_(), "/work");
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("kernel source 'no_such_kernel.h' not found (looked at " JITKERN_SOURCE_DIR "/csrc/no_such_kernel.h"),
              std::string::npos)
        << e.what();
  }
}

TEST(Plan, KeyFollowsEverythingThatChangesTheLibrary) {
  const BuildRequest base = cpu_request();
  EXPECT_EQ(key(base), key(base)) << "deterministic";
  BuildRequest r = base;
  r.extra_cflags = {"-DX=1"};
  EXPECT_NE(key(r), key(base));
  r = base;
  r.cpp_wrappers = {{"saxpy", "saxpy<4>"}};
  EXPECT_NE(key(r), key(base));
  plan::Toolchain other = toolchain_();
  other.cxx.version = "g++ 13.1";
  const plan::Plan p = plan_of(base, test_config(), toolchain_(), "/work"), q = plan_of(base, test_config(), other, "/work");
  EXPECT_EQ(q.request_key, p.request_key) << "the compiler is not in the entry's name";
  EXPECT_NE(q.toolchain_id, p.toolchain_id) << "but its version is in the content key (manifest::full_key_of)";
  EXPECT_FALSE(p.toolchain_id.empty());
  const plan::Plan lookup = plan::make(base, test_config(), plan::sources(base, test_config()), "", "/work");
  EXPECT_EQ(lookup.request_key, p.request_key) << "a lookup needs no compiler";
  EXPECT_EQ(lookup.cpp_compile.front(), plan::kCxx) << "the commands name the compiler's role until bound";
  EXPECT_TRUE(lookup.toolchain_id.empty());
}

TEST(Plan, KeyIsTheSameInAnotherTree) {
  const BuildRequest base = cpu_request();
  plan::Config moved = test_config();
  for (std::string* dir : {&moved.include_dir, &moved.csrc_dir, &moved.runtime_lib_dir, &moved.tvm_ffi_include_dir,
                           &moved.dlpack_include_dir, &moved.tvm_ffi_lib_dir})
    *dir = "/elsewhere" + *dir;
  plan::Toolchain tc = toolchain_();
  tc.cxx.path = "/opt/other/bin/g++";
  const plan::Plan here = plan_of(base, test_config(), toolchain_(), "/work"), there = plan_of(base, moved, tc, "/work");
  EXPECT_EQ(there.request_key, here.request_key) << "package, tvm-ffi and compiler paths are not in the key";
  const std::string header = test_config().include_dir + "/jitkern/tensor.h";
  EXPECT_EQ(plan::portable(here, header), "@jitkern-include/jitkern/tensor.h");
  EXPECT_EQ(plan::local(there, plan::portable(here, header)), moved.include_dir + "/jitkern/tensor.h");
  EXPECT_EQ(plan::portable(here, test_config().include_dir + "2/x.h"), test_config().include_dir + "2/x.h") << "whole directory names only";
  EXPECT_EQ(plan::local(here, "/abs/user.h"), "/abs/user.h");
}

TEST(Plan, KeyIgnoresWhatDoesNotChangeTheLibrary) {
  const BuildRequest base = cpu_request();
  EXPECT_EQ(key(base, "/work"), key(base, "/somewhere/else")) << "the caller's directory, with no relative paths";
  plan::Config other = test_config();
  other.lock_dir = "/locks";
  EXPECT_EQ(plan_of(base, other, toolchain_(), "/work").request_key, key(base));
  plan::Toolchain tc = toolchain_();
  tc.nvcc = {};
  EXPECT_EQ(plan_of(base, test_config(), tc, "/work").request_key, key(base)) << "nvcc does not matter to a C++-only module";
}

TEST(Plan, RelativeIncludePathsResolveAgainstTheCallersDirectory) {
  BuildRequest r = cpu_request();
  r.extra_include_paths = {"inc"};
  r.extra_cflags = {"-Iinc2", "-isystem", "sys", "-I/abs"};
  const plan::Plan p = plan_of(r, test_config(), toolchain_(), "/work/project");
  auto has = [&](const std::string& arg) { return std::find(p.cpp_compile.begin(), p.cpp_compile.end(), arg) != p.cpp_compile.end(); };
  EXPECT_TRUE(has("-I/work/project/inc"));
  EXPECT_TRUE(has("-I/work/project/inc2"));
  EXPECT_TRUE(has("/work/project/sys"));
  EXPECT_TRUE(has("-I/abs"));
  EXPECT_NE(key(r, "/work/project"), key(r, "/work/other")) << "the same relative path elsewhere is other headers";
}

TEST(Plan, CudaCommand) {
  BuildRequest r;
  r.name_parts = {"add_constant", "5"};
  r.cuda_files = {"add_constant.cuh"};
  r.cuda_wrappers = {{"add_constant", "add_constant<5>"}};
  const plan::Plan p = plan_of(r, test_config(), toolchain_(), "/work");
  EXPECT_EQ(p.name, "add_constant_5");
  EXPECT_NE(std::find(p.cuda_compile.begin(), p.cuda_compile.end(), "-gencode=arch=compute_90a,code=sm_90a"), p.cuda_compile.end());
  EXPECT_NE(p.cuda_source.find("JITKERN_EXPORT(add_constant, add_constant<5>)"), std::string::npos);
  EXPECT_EQ(p.dep_exclude_prefixes.front(), "/cuda/targets/") << "the toolkit's own directories, never its whole prefix";
  EXPECT_EQ(std::count(p.dep_exclude_prefixes.begin(), p.dep_exclude_prefixes.end(), "/cuda/"), 0);
  EXPECT_EQ(plan::export_names(r), std::vector<std::string>{"add_constant"});
  EXPECT_TRUE(p.host_pass.empty()) << "nvcc compiles the host code unless the request says otherwise";

  r.host_without_nvcc = true;
  const plan::Plan split = plan_of(r, test_config(), toolchain_(), "/work");
  EXPECT_NE(split.request_key, p.request_key) << "another library";
  EXPECT_EQ(split.cuda_compile, p.cuda_compile) << "the same device code";
  ASSERT_FALSE(split.host_pass.empty());
  EXPECT_EQ(split.host_pass.front(), toolchain_().cxx.path);
  for (const char* flag : {"-x", "c++", "-fvisibility=hidden"})
    EXPECT_NE(std::find(split.host_pass.begin(), split.host_pass.end(), flag), split.host_pass.end()) << flag;

  // The host pass compiles as nvcc's host compile would: extra_cuda_cflags' preprocessor flags in every
  // spelling nvcc takes (comma lists split as nvcc splits them) and -Xcompiler's values; not extra_cflags
  // (cpp_files' flags, which nvcc never gives a CUDA source either).
  r.extra_cuda_cflags = {"-DBLOCK=512", "-U", "NDEBUG", "-Xptxas", "-v", "-include", "/work/pre.h", "-includeX",
                         "--define-macro=VAL=1", "--define-macro", "W=2", "-DA=a,b", "-Xcompiler", "-fopenmp,-fwrapv",
                         "--compiler-options=-ffast-math", "--include-path=inc", "--system-include", "/sys", "-I/a,/b",
                         "--pre-include=/p.h", "--define-macros-not"};
  r.extra_cflags = {"-DCPP_FILES_ONLY"};
  const plan::Plan flags = plan_of(r, test_config(), toolchain_(), "/work");
  const std::vector<std::string> tail(flags.host_pass.end() - 18, flags.host_pass.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"-DBLOCK=512", "-UNDEBUG", "-include", "/work/pre.h", "-DVAL=1", "-DW=2", "-DA=a", "-Db", "-fopenmp",
                                            "-fwrapv", "-ffast-math", "-I/work/inc", "-isystem", "/sys", "-I/a", "-I/b", "-include", "/p.h"}));
  EXPECT_EQ(std::count(flags.host_pass.begin(), flags.host_pass.end(), "-DCPP_FILES_ONLY"), 0);
}

TEST(Plan, HostWithoutCudafeIsKeyedAndNotForExtendedLambdas) {
  BuildRequest r;
  r.name_parts = {"add_constant", "5"};
  r.cuda_files = {"add_constant.cuh"};
  r.cuda_wrappers = {{"add_constant", "add_constant<5>"}};
  const plan::Plan nvcc_host = plan_of(r, test_config(), toolchain_(), "/work");
  r.host_without_cudafe = true;
  const plan::Plan rewritten = plan_of(r, test_config(), toolchain_(), "/work");
  EXPECT_TRUE(rewritten.host_without_cudafe && !nvcc_host.host_without_cudafe);
  EXPECT_NE(rewritten.request_key, nvcc_host.request_key) << "another library (and the rewrite's version is in its key)";
  EXPECT_EQ(rewritten.cuda_compile, nvcc_host.cuda_compile) << "nvcc's phases, the same device code";
  r.extra_cuda_cflags = {"--expt-extended-lambda"};
  const plan::Plan lambdas = plan_of(r, test_config(), toolchain_(), "/work");
  EXPECT_FALSE(lambdas.host_without_cudafe);
  EXPECT_NE(lambdas.host_rewrite_unused.find("extended lambdas"), std::string::npos);
  r.extra_cuda_cflags.clear();
  r.host_without_nvcc = true;
  expect_invalid(r, "host_without_nvcc and host_without_cudafe were both given");
  r.host_without_nvcc = false;
  r.extra_ldflags = {"-Wl,--strip-all"};
  expect_invalid(r, "removes the symbol table that a host_without_cudafe module finds its kernels in");
}

TEST(Plan, BindingTheCompilersChangesOnlyTheirNames) {
  BuildRequest r;
  r.name_parts = {"add_constant", "5"};
  r.cuda_files = {"add_constant.cuh"};
  r.cuda_wrappers = {{"add_constant", "add_constant<5>"}};
  r.host_without_nvcc = true;
  const plan::Config cfg = test_config();
  const plan::Plan unbound = plan::make(r, cfg, plan::sources(r, cfg), "sm_90a", "/work");
  const plan::Plan bound = plan_of(r, cfg, toolchain_(), "/work");
  EXPECT_EQ(bound.request_key, unbound.request_key);
  for (const auto member : {&plan::Plan::cuda_compile, &plan::Plan::host_pass, &plan::Plan::link}) {
    const auto &before = unbound.*member, &after = bound.*member;
    ASSERT_EQ(before.size(), after.size());
    for (std::size_t i = 0; i < before.size(); ++i) {
      if (before[i] == plan::kCxx) EXPECT_EQ(after[i], toolchain_().cxx.path);
      else if (before[i] == plan::kNvcc) EXPECT_EQ(after[i], toolchain_().nvcc.path);
      else EXPECT_EQ(after[i], before[i]);
    }
  }
  const auto ccbin = std::find(bound.cuda_compile.begin(), bound.cuda_compile.end(), "-ccbin");
  ASSERT_NE(ccbin, bound.cuda_compile.end()) << "nvcc always gets the identified host compiler";
  EXPECT_EQ(*(ccbin + 1), toolchain_().cxx.path);
  EXPECT_TRUE(unbound.config_key.empty());
  EXPECT_FALSE(bound.config_key.empty());
  plan::Toolchain other = toolchain_();
  other.cxx.path = "/opt/gcc/bin/g++";
  EXPECT_NE(plan_of(r, cfg, other, "/work").config_key, bound.config_key) << "a failure is remembered against the commands that ran";
}

// ------------------------------------------------------------------ the linker's options (command_line)

namespace {

std::vector<std::string> link_flags(const std::vector<std::string>& flags, const std::string& cwd = "/work") {
  return command_line::resolve(flags, "extra_ldflags", command_line::Tool::kLink, cwd);
}

std::string refusal(const std::vector<std::string>& flags, const std::string& cwd = "/work") {
  try {
    command_line::linker_option_files(link_flags(flags, cwd));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST(LinkerOptions, AnOptionTakesItsValueFromTheNextLinkerFlag) {
  // libtool's spelling: the driver hands ld each -Wl group's and -Xlinker's arguments in order, as one stream
  const std::vector<std::string> split = {"-Wl,-rpath", "-Wl,/opt/x", "-Wl,-soname", "-Wl,libx.so", "-Wl,-z", "-Wl,now",
                                          "-Xlinker", "-rpath", "-Wl,/opt/y", "-Wl,--as-needed,-rpath", "-Xlinker", "/opt/z"};
  EXPECT_EQ(link_flags(split), split);  // each flag keeps its own spelling
  const auto scripts = link_flags({"-Wl,--version-script", "-Wl,exports.map", "-Xlinker", "-T", "-Wl,values.ld"});
  EXPECT_EQ(scripts, (std::vector<std::string>{"-Wl,--version-script", "-Wl,/work/exports.map", "-Xlinker", "-T", "-Wl,/work/values.ld"}));
  EXPECT_EQ(command_line::linker_option_files(scripts), (std::vector<std::string>{"/work/exports.map", "/work/values.ld"}));
  // a value is no linker argument when something else comes between
  EXPECT_NE(refusal({"-Wl,-rpath", "-O2", "-Wl,/opt/x"}).find("'-Wl,-rpath' ends with the linker's -rpath, which needs its value after it"),
            std::string::npos);
}

TEST(LinkerOptions, ValuedOptionsTakeTheirValue) {
  for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
           {"-Wl,-init,value_init"}, {"-Wl,-fini,value_fini"}, {"-Wl,--require-defined,main"}, {"-Wl,--export-dynamic-symbol,value"},
           {"-Wl,-plugin-opt,O2"}, {"-Wl,--auxiliary,libfoo.so"}, {"-Wl,-f,libfoo.so"}, {"-Wl,--filter,libfoo.so"}, {"-Wl,-F,libfoo.so"},
           {"-Wl,--undefined-glob,foo*"}, {"-Wl,--sort-common,--icf-iterations,2"}, {"-Wl,--out-implib,x.lib"},
           {"-Wl,--exclude-modules-for-implib,a.o"}, {"-Wl,--target2,rel"}, {"-Xlinker", "-mllvm", "-Xlinker", "-x86-asm-syntax=intel"}}) {
    EXPECT_EQ(link_flags(flags), flags);
    EXPECT_EQ(refusal(flags), "(accepted)");
  }
  // an output file ld writes: as given (a relative one lands in the step's own directory), and no dependency
  const auto depfile = link_flags({"-Wl,--dependency-file,out.d"});
  EXPECT_EQ(depfile, std::vector<std::string>{"-Wl,--dependency-file,out.d"});
  EXPECT_TRUE(command_line::linker_option_files(depfile).empty());
  // the refusal of an argument no option takes names the option in front of it
  EXPECT_NE(refusal({"-Wl,--frobnicate,value"}).find("gives the linker 'value' after --frobnicate"), std::string::npos)
      << refusal({"-Wl,--frobnicate,value"});
}

TEST(LinkerOptions, FilesThatOptionsNameAreTrackedOrRefusedHoweverSpelled) {
  for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
           {"-Wl,--plugin=/abs/x.so"}, {"-Wl,-plugin,/abs/x.so"}, {"-Xlinker", "--plugin", "-Xlinker", "x.so"}}) {
    EXPECT_NE(refusal(flags).find("loads code"), std::string::npos) << refusal(flags);
  }
  EXPECT_NE(refusal({"-Wl,--sysroot=/x"}).find("'-Wl,--sysroot=/x' gives the linker --sysroot"), std::string::npos) << refusal({"-Wl,--sysroot=/x"});
  EXPECT_NE(refusal({"-Wl,--output=x.so"}).find("names the output"), std::string::npos) << refusal({"-Wl,--output=x.so"});
  const auto tracked = link_flags({"-Wl,--section-ordering-file=order.txt", "-Wl,--symbol-ordering-file,syms.txt", "-Wl,-c,a.mri",
                                   "-Wl,--mri-script=b.mri", "-Wl,-cc.mri", "-Wl,-cref,--cref,-call_shared"});
  EXPECT_EQ(command_line::linker_option_files(tracked),
            (std::vector<std::string>{"/work/order.txt", "/work/syms.txt", "/work/a.mri", "/work/b.mri", "/work/c.mri"}));
}

TEST(LinkerOptions, ARelativeRDirectoryIsMadeAbsolute) {
  char templ[] = "/tmp/jk_rdir_XXXXXX";
  const std::string dir = mkdtemp(templ);
  ASSERT_EQ(::mkdir((dir + "/rdir").c_str(), 0755), 0);
  const auto flags = link_flags({"-Wl,-R,rdir", "-Wl,-Rrdir"}, dir);
  EXPECT_EQ(flags, (std::vector<std::string>{"-Wl,-R," + dir + "/rdir", "-Wl,-R" + dir + "/rdir"}));
  EXPECT_EQ(refusal({"-Wl,-R,rdir"}, dir), "(accepted)");
  EXPECT_NE(refusal({"-Wl,-R,nodir"}, dir).find("which is no directory"), std::string::npos);
  ::rmdir((dir + "/rdir").c_str());
  ::rmdir(dir.c_str());
}

TEST(LinkerOptions, AbbreviationsOfLongNamesAreTheOptionsLdTakesThemFor) {
  // GNU ld's getopt_long_only takes any abbreviation that is no other long name's, with one dash or two
  for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
           {"-Wl,--version-scr=v.map"}, {"-Wl,-version-scr=v.map"}, {"-Wl,--version-scr,v.map"}, {"-Wl,--scri=v.map"},
           {"-Wl,--dynamic-lis=v.map"}, {"-Wl,--default-scri=v.map"}, {"-Wl,--just-sym=v.map"}}) {
    EXPECT_EQ(command_line::linker_option_files(link_flags(flags)), std::vector<std::string>{"/work/v.map"}) << flags[0];
  }
  // several long names begin so: ld refuses it too
  EXPECT_NE(refusal({"-Wl,--vers=v.map"}).find("abbreviates several of its options"), std::string::npos) << refusal({"-Wl,--vers=v.map"});
  // a short name's attached value is one only where no long name begins so: -Tb is ld's -Tbss, -Tscript.ld a script
  EXPECT_EQ(command_line::linker_option_files(link_flags({"-Wl,-Tscript.ld,-Tb,0x1000,-Ttext=0x2000,-Ldir,-lfoo,-library"})),
            std::vector<std::string>{"/work/script.ld"});
  // ld's whole names that begin longer ones here are whole names (no value), and one letter abbreviates nothing
  for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
           {"-Wl,--export-dynamic,--trace,-s,-E"}, {"-Wl,--omagic,-cref,-dy"}}) {
    EXPECT_EQ(refusal(flags), "(accepted)") << flags[0];
  }
}

TEST(LinkerOptions, OneDashSpellingsLinkersReadApartAreRefused) {
  // GNU ld reads these one-dash names as a one-letter option and its value (ld 2.40: -call-graph-ordering-file=F is
  // -c all-graph-ordering-file=F, an untracked MRI script; -omagic writes the output to "magic"); lld reads the long name
  for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
           {"-Wl,-call-graph-ordering-file=cg.txt"}, {"-Wl,-call-graph-ord=cg.txt"}, {"-Xlinker", "-call-graph-ordering-file", "-Xlinker", "cg.txt"},
           {"-Wl,-omagic"}, {"-Wl,-oformat=binary"}, {"-Wl,-output-def=x.def"}, {"-Wl,-export-dynamic-symbol=f"}, {"-Wl,-exclude-modules-for-implib=a.o"}}) {
    EXPECT_NE(refusal(flags).find("spell it with two dashes"), std::string::npos) << flags[0] << ": " << refusal(flags);
  }
  EXPECT_NE(refusal({"-Wl,-call-graph-ordering-file=cg.txt"})
                .find("gives the linker -call-graph-ordering-file, which GNU ld reads as -c with 'all-graph-ordering-file=cg.txt'"),
            std::string::npos)
      << refusal({"-Wl,-call-graph-ordering-file=cg.txt"});
  // two dashes: the long names, tracked where they name a file
  EXPECT_EQ(command_line::linker_option_files(link_flags({"-Wl,--call-graph-ordering-file=cg.txt,--mri-script=a.mri,--omagic"})),
            (std::vector<std::string>{"/work/cg.txt", "/work/a.mri"}));
}

TEST(LinkerOptions, ForLinkerIsXlinker) {
  // GCC's driver takes --for-linker X and --for-linker=X for -Xlinker X
  EXPECT_EQ(link_flags({"--for-linker=--version-script=v.map", "--for-linker", "--dynamic-list=d.lst"}),
            (std::vector<std::string>{"-Xlinker", "--version-script=/work/v.map", "-Xlinker", "--dynamic-list=/work/d.lst"}));
  EXPECT_EQ(command_line::linker_option_files(link_flags({"--for-linker", "-T", "--for-linker=s.ld"})), std::vector<std::string>{"/work/s.ld"});
}

TEST(LinkerOptions, RefusalsHoldForAbbreviationsAndForLinker) {
  for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
           {"-Wl,--sysr=/"}, {"-Wl,--error-handling=/bin/true"}, {"--for-linker=--plugin=/x.so"}, {"--for-linker=-o/path"},
           {"--for-linker", "--sysroot=/"}, {"-Wl,-plug=/x.so"}}) {
    EXPECT_NE(refusal(flags), "(accepted)") << flags[0];
  }
  EXPECT_NE(refusal({"-Wl,--sysr=/"}).find("gives the linker --sysr, which changes where"), std::string::npos) << refusal({"-Wl,--sysr=/"});
}

TEST(LinkerOptions, CompressDebugSectionsTakesAValue) {
  for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
           {"-Wl,--compress-debug-sections,zlib"}, {"-Xlinker", "--compress-debug-sections", "-Xlinker", "zlib"},
           {"-Wl,--compress-debug-sections=zstd"}}) {
    EXPECT_EQ(link_flags(flags), flags);
    EXPECT_EQ(refusal(flags), "(accepted)") << flags[0];
  }
}

TEST(LinkerOptions, ARelativePathFromACwdWithACommaStaysOneArgument) {
  EXPECT_EQ(link_flags({"-Wl,--version-script=vs.map,--as-needed", "-Wl,-Lsub"}, "/w,x"),
            (std::vector<std::string>{"-Xlinker", "--version-script=/w,x/vs.map", "-Xlinker", "--as-needed", "-Xlinker", "-L/w,x/sub"}));
  EXPECT_EQ(command_line::linker_option_files(link_flags({"-Wl,--version-script=vs.map"}, "/w,x")), std::vector<std::string>{"/w,x/vs.map"});
  EXPECT_EQ(link_flags({"-Wl,-Lsub"}, "/w"), std::vector<std::string>{"-Wl,-L/w/sub"});  // no comma: as it was
}

TEST(LinkerOptions, ALinkerScriptThatIncludesAnotherIsRefused) {
  char templ[] = "/tmp/jk_ldinc_XXXXXX";
  const std::string dir = mkdtemp(templ);
  const auto write = [&](const char* name, const char* text) {
    FILE* f = std::fopen((dir + "/" + name).c_str(), "w");
    std::fputs(text, f);
    std::fclose(f);
  };
  write("inc.ld", "INCLUDE other.ld\n");
  write("inc2.ld", "SECTIONS { /* x */ }\n  INCLUDE\"other.ld\"\n");
  write("plain.ld", "/* INCLUDE in a comment */ SECTIONS { .text : { *(.text) } } PROVIDE(MY_INCLUDE_X = 1);\n");
  for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
           {"-Wl,-T,inc.ld"}, {"-Wl,-Tinc.ld"}, {"-Wl,--script=inc2.ld"}, {"-T", "inc.ld"}, {"-Tinc.ld"}, {"-Wl,--dT=inc.ld"}}) {
    EXPECT_NE(refusal(flags, dir).find("which INCLUDEs another file"), std::string::npos) << flags[0] << ": " << refusal(flags, dir);
  }
  EXPECT_EQ(refusal({"-Wl,-T,plain.ld"}, dir), "(accepted)");
  for (const char* name : {"inc.ld", "inc2.ld", "plain.ld"}) ::unlink((dir + "/" + name).c_str());
  ::rmdir(dir.c_str());
}
