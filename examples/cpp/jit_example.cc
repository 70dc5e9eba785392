// Using the jitkern engine from a C++ program, with no Python: compile a kernel instantiation on
// first use (cached afterwards), load it, call it through the tvm-ffi C ABI.
//
//   jit_example <kernel file> [cache dir]
#include <jitkern/jit.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <kernel file> [cache dir]\n", argv[0]);
    return 2;
  }
  jitkern::BuildRequest request;
  request.name_parts = {"saxpy", "2"};
  request.cpp_files = {argv[1]};
  request.cpp_wrappers = {{"saxpy", "saxpy<2>"}};
  jitkern::EngineConfig config;  // tvm-ffi paths from JITKERN_TVM_FFI_INCLUDE / JITKERN_TVM_FFI_LIB
  if (argc > 2) config.cache_dir = argv[2];
  try {
    auto module = jitkern::load(request, config);
    std::vector<float> x = {1, 2, 3}, y = {1, 1, 1};
    int64_t shape[1] = {3};
    DLTensor tx{x.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, nullptr, 0};
    DLTensor ty{y.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, nullptr, 0};
    TVMFFIAny args[2] = {};
    args[0].type_index = args[1].type_index = kTVMFFIDLTensorPtr;
    args[0].v_ptr = &ty;
    args[1].v_ptr = &tx;
    TVMFFIAny result{};
    if (module->function("saxpy")(nullptr, args, 2, &result) != 0) {
      std::fprintf(stderr, "saxpy raised an error\n");
      return 1;
    }
    std::printf("y = %g %g %g\n", y[0], y[1], y[2]);
    return (y[0] == 3 && y[1] == 5 && y[2] == 7) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
