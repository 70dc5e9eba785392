// The engine from C++ alone: JIT-compile a CPU kernel, load it, call it through the C ABI.
#include <gtest/gtest.h>
#include <jitkern/jit.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

namespace {

jitkern::EngineConfig test_config(const std::string& cache) {
  jitkern::EngineConfig cfg;
  cfg.cache_dir = cache;
  cfg.package_dir = JITKERN_SOURCE_DIR;  // include/ and csrc/ of the source tree
  cfg.tvm_ffi_include_dir = JITKERN_TVM_FFI_INCLUDE_DIR;
  cfg.tvm_ffi_lib_dir = JITKERN_TVM_FFI_LIB_DIR;
  return cfg;
}

std::string temp_dir() {
  char templ[] = "/tmp/jitkern-cpp-test-XXXXXX";
  return mkdtemp(templ);
}

TVMFFIAny tensor_arg(DLTensor* t) {
  TVMFFIAny a{};
  a.type_index = kTVMFFIDLTensorPtr;
  a.v_ptr = t;
  return a;
}

TVMFFIAny int_arg(int64_t v) {
  TVMFFIAny a{};
  a.type_index = kTVMFFIInt;
  a.v_int64 = v;
  return a;
}

}  // namespace

TEST(Engine, CompilesLoadsAndCallsACpuKernel) {
  const std::string dir = temp_dir();
  const std::string kernel = dir + "/axpy.h";
  // The example's saxpy kernel, plus a function with an integer result.
  std::ofstream(kernel) << "#include \"" JITKERN_SOURCE_DIR "/examples/cpp/saxpy_cpu.h\"\n"
                        << "inline int64_t twice(int64_t v) { return 2 * v; }\n";
  jitkern::BuildRequest req;
  req.name_parts = {"axpy", "3"};
  req.cpp_files = {kernel};
  req.cpp_wrappers = {{"axpy", "saxpy<3>"}, {"twice", "twice"}};
  auto module = jitkern::load(req, test_config(dir + "/cache"));

  std::vector<float> x = {1, 2, 3, 4}, y = {10, 10, 10, 10};
  int64_t shape[1] = {4}, strides[1] = {1};
  DLTensor tx{x.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, strides, 0};
  DLTensor ty{y.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, strides, 0};
  TVMFFIAny args[2] = {tensor_arg(&ty), tensor_arg(&tx)};
  TVMFFIAny result{};
  ASSERT_EQ(module->function("axpy")(nullptr, args, 2, &result), 0);
  EXPECT_EQ(y, (std::vector<float>{13, 16, 19, 22}));

  TVMFFIAny one = int_arg(21);
  TVMFFIAny out{};
  ASSERT_EQ(module->function("twice")(nullptr, &one, 1, &out), 0);
  EXPECT_EQ(out.type_index, kTVMFFIInt);
  EXPECT_EQ(out.v_int64, 42);

  // Wrong argument count and a mismatching tensor are errors (-1), not crashes.
  EXPECT_EQ(module->function("axpy")(nullptr, args, 1, &result), -1);
  DLTensor bad = tx;
  bad.dtype = {kDLInt, 32, 1};
  TVMFFIAny bad_args[2] = {tensor_arg(&ty), tensor_arg(&bad)};
  EXPECT_EQ(module->function("axpy")(nullptr, bad_args, 2, &result), -1);
  EXPECT_THROW(module->function("missing"), std::runtime_error);

  // Warm: the same request resolves to the same published library without compiling.
  EXPECT_EQ(jitkern::build(req, test_config(dir + "/cache")), module->path());
  struct stat st;
  ASSERT_EQ(stat((dir + "/cache").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(Engine, CompileErrorIsABuildErrorWithTheCompilerDiagnostic) {
  const std::string dir = temp_dir();
  const std::string kernel = dir + "/broken.h";
  std::ofstream(kernel) << "inline int broken() {\n  return nope;\n}\n";
  jitkern::BuildRequest req;
  req.name_parts = {"broken"};
  req.cpp_files = {kernel};
  req.cpp_wrappers = {{"broken", "broken"}};
  try {
    jitkern::build(req, test_config(dir + "/cache"));
    FAIL() << "no exception";
  } catch (const jitkern::BuildError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("broken.h:2:"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("command: "), std::string::npos) << msg;  // the commands are in the kept log
    EXPECT_NE(msg.find("the commands, their full output and the generated source: "), std::string::npos) << msg;
  }
}
