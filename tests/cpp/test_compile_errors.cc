// The compiler-output parser (src/engine/compile/compile_errors.h) against recorded gcc, clang and nvcc (EDG) logs:
// which error a failed compile's message leads with.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "compile/compile_errors.h"
#include "compile/steps.h"

using namespace jitkern;

namespace {

const std::string kScratch = "/cache/m-0123/build-1@host-abc";

plan::Plan plan_with_wrapper() {
  plan::Plan p;
  p.sources = {"/work/kernels/scale.cuh"};
  p.wrapper_lines = {{"cuda_wrappers", "scale", "scale<4, float>", 3}};
  p.dep_exclude_prefixes = {"/usr/include/", "/usr/local/cuda/targets/"};
  return p;
}

TEST(CompileErrors, GccErrorInTheRequestsOwnSourceWins) {
  const std::string log =
      "In file included from " + kScratch + "/host.cc:2:\n"
      "/usr/include/c++/12/bits/stl_vector.h:10:3: error: something in the library\n"
      "/work/kernels/scale.cuh:12:5: error: 'blockIdx' was not declared in this scope\n"
      "   12 |     blockIdx.x;\n";
  EXPECT_EQ(compile_errors::first_error(log, plan_with_wrapper(), kScratch),
            "/work/kernels/scale.cuh:12:5: error: 'blockIdx' was not declared in this scope");
}

TEST(CompileErrors, NvccFrontEndErrorInTheSource) {
  const std::string log = "/work/kernels/scale.cuh(7): error: identifier \"kBlok\" is undefined\n      int x = kBlok;\n\n"
                          "1 error detected in the compilation of \"device.cu\".\n";
  EXPECT_EQ(compile_errors::first_error(log, plan_with_wrapper(), kScratch),
            "/work/kernels/scale.cuh(7): error: identifier \"kBlok\" is undefined");
}

TEST(CompileErrors, GccErrorInsideExportMacroIsNamedByItsWrapper) {
  const std::string log =
      "/pkg/include/jitkern/export.h:40:5: error: no matching function for call to 'scale<4, float>'\n"
      "device.cu:3:1: note: in expansion of macro 'JITKERN_EXPORT'\n";
  EXPECT_EQ(compile_errors::first_error(log, plan_with_wrapper(), kScratch),
            "cuda_wrappers 'scale' (scale<4, float>): error: no matching function for call to 'scale<4, float>'");
}

TEST(CompileErrors, ClangFatalErrorOutsideTheGeneratedSources) {
  const std::string log = kScratch + "/host.cc:1:10: fatal error: 'missing.h' file not found\n"
                          "/opt/project/include/util.h:4:10: fatal error: 'other.h' file not found\n";
  EXPECT_EQ(compile_errors::first_error(log, plan_with_wrapper(), kScratch),
            "/opt/project/include/util.h:4:10: fatal error: 'other.h' file not found");
}

TEST(CompileErrors, NvccRefusingItsCommandLeads) {
  const std::string log = "warning: something\nnvcc fatal   : Unsupported gpu architecture 'compute_999'\n";
  EXPECT_EQ(compile_errors::first_error(log, plan_with_wrapper(), kScratch), "nvcc fatal   : Unsupported gpu architecture 'compute_999'");
}

TEST(CompileErrors, NoErrorLineGivesNothing) {
  EXPECT_EQ(compile_errors::first_error("collect2: ld returned 1 exit status\n", plan_with_wrapper(), kScratch), "");
  EXPECT_TRUE(compile_errors::blames_the_disk("/usr/bin/ld: final link failed: No space left on device\n"));
  EXPECT_FALSE(compile_errors::blames_the_disk("error: expected ';'\n"));
}

}  // namespace

namespace {

TEST(CompileErrors, CudaCodeInCppFilesIsNamedWhereTheHostCompilerLacksCudaHeaders) {
  const std::string dir = ::testing::TempDir();
  const std::string file = dir + "/relu_cpu_named.cuh";
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("#include <jitkern/utils.cuh>\n__global__ void relu_kernel(float* y) { y[threadIdx.x] = 0; }\n", f);
  std::fclose(f);
  plan::Plan p;
  p.sources = {file};
  p.has_cpp = true;
  p.cpp_source = "#include \"" + file + "\"\n";
  const std::string log = "/pkg/include/jitkern/utils.cuh:17:10: fatal error: cuda_runtime_api.h: No such file or directory\n";
  EXPECT_EQ(compile_errors::leading_cause(log, p, compile_errors::first_error(log, p, kScratch)),
            "relu_cpu_named.cuh holds CUDA code: list it in cuda_files (the host C++ compiler alone compiles cpp_files)");
}

}  // namespace

TEST(CompileErrors, OutputShowsEachDiagnosticOnce) {
  const std::string error = "k.cuh(6): error: expected a \";\"\n    if (i < n) y[i] = 0;\n    ^\n\n";
  const std::string note = "host.cc:4:1: note: in expansion of macro 'JITKERN_EXPORT'\n    4 | JITKERN_EXPORT(a, f)\n";
  const std::string count = "1 error detected in the compilation of \"device.cu\".\n";
  const std::string warning = "k.cuh(5): warning #177-D: variable \"i\" was declared but never referenced\n    int i;\n";
  // nvcc's two passes: the same error and count twice, a warning only once
  EXPECT_EQ(jitkern::compile_errors::each_diagnostic_once(error + count + error + warning + count), error + count + warning);
  // gcc: the same note after two different errors is kept after each; a repeated error takes its notes with it
  const std::string other = "k.h:2:3: error: 'x' was not declared in this scope\n";
  EXPECT_EQ(jitkern::compile_errors::each_diagnostic_once(other + note + error + note + other + note), other + note + error + note);
  EXPECT_EQ(jitkern::compile_errors::each_diagnostic_once("ld: cannot find -lfoo\nld: cannot find -lfoo\n"),
            "ld: cannot find -lfoo\nld: cannot find -lfoo\n");  // only diagnostics and counts are folded
}

TEST(CompileErrors, TheDevicePassThatAloneFailedIsNamed) {
  char templ[] = "/tmp/jitkern-passes-XXXXXX";
  const std::string dir = mkdtemp(templ);
  const auto write = [&](const std::string& name, const std::string& text) {
    FILE* f = std::fopen((dir + "/" + name).c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  };
  const std::string error = "k.cuh(3): error: the kernel of part 2 does not compile\n";
  const std::string common = "k.cuh(9): error: every pass sees this\n";
  write("build.log", "");
  write("device.log", "");
  write("device.1.log", "");
  write("device.2.log", error);
  const plan::Plan p;
  const config::Config cfg;
  compile::Steps s(p, cfg, dir, false);
  EXPECT_EQ(s.device_pass_of(error.substr(0, error.size() - 1)), "") << "one pass ran: nothing to name";
  s.device_passes = 3;
  const std::string cause = error.substr(0, error.size() - 1);
  EXPECT_EQ(s.device_pass_of(cause), "the device pass of JITKERN_DEVICE_PART=2 (of 3)");
  EXPECT_NE(s.output().find("the device pass of JITKERN_DEVICE_PART=2 (of 3):\n" + error), std::string::npos) << s.output();
  write("device.log", common);
  write("device.1.log", common);
  write("device.2.log", common + error);
  EXPECT_EQ(s.device_pass_of(common.substr(0, common.size() - 1)), "") << "two passes' diagnostic is the module's";
  EXPECT_EQ(s.device_pass_of(cause), "the device pass of JITKERN_DEVICE_PART=2 (of 3)");
  EXPECT_NE(s.output().find("the device passes of JITKERN_DEVICE_PART=0, 1 (of 3):\n" + common), std::string::npos) << s.output();
  EXPECT_EQ(s.output().find("the device pass of JITKERN_DEVICE_PART=1 (of 3)"), std::string::npos) << "one output, one heading";
  EXPECT_EQ(s.device_pass_of("no such diagnostic"), "");
  write("build.log", "host_pass: " + error);
  EXPECT_EQ(s.device_pass_of(cause), "") << "the host pass reports it too: not one device pass's";
  for (const char* name : {"build.log", "device.log", "device.1.log", "device.2.log"}) std::remove((dir + "/" + name).c_str());
  rmdir(dir.c_str());
}
