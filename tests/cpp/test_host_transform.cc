// host_transform: nvcc's host preprocessing rewritten for the host compiler alone (no cudafe++).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "base/sha256.h"
#include "compile/host_transform.h"

namespace jitkern::host_transform {
namespace {

// As the host preprocessor spells CUDA's keywords (crt/host_defines.h).
constexpr const char* kDevice = "__attribute__((device))";
constexpr const char* kHost = "__attribute__((host))";
constexpr const char* kGlobal = "__attribute__((global))";
constexpr const char* kSglDevice = "__inline__ __attribute__((always_inline)) __attribute__((device))";  // SGL_DEVICE expanded

std::string S(const std::string& s) { return s; }

Result rewrite(const std::string& unit, const std::vector<std::string>& toolkit = {}) {
  return transform("# 1 \"kernels.cuh\"\n" + unit, toolkit, "_0123abcd_9_device_cu_4567ef01");
}

TEST(HostTransform, KernelsBecomeEmptyNoipaStubsAndCudaAttributesGo) {
  const Result r = rewrite(S("namespace sglang {\ntemplate <int N, typename T>\n") + kGlobal +
                           " __attribute__((launch_bounds(N / 16))) void k(const P __attribute__((grid_constant)) p) {\n"
                           "  if (threadIdx.x < N) { p.out[0] = 1; }\n}\n}\n");
  ASSERT_TRUE(r.ok) << r.why;
  EXPECT_EQ(r.kernels, 1);
  EXPECT_NE(r.text.find("__attribute__((noipa))  void k(const P  p) {}\n\n\n}\n"), std::string::npos) << r.text;
  EXPECT_EQ(r.text.find("threadIdx"), std::string::npos);
  EXPECT_EQ(r.text.find("grid_constant"), std::string::npos);
}

TEST(HostTransform, DeviceOnlyBodiesGoHostDeviceAndHostBodiesStay) {
  const Result r = rewrite(S("struct V {\n  ") + kSglDevice + " float get(int i) const { return data[i]; }\n  " + kHost + " " + kDevice +
                           " int size() const { return 4; }\n  int host_only() { auto f = [](int x) { return x + 1; }; return f(1); }\n"
                           "  float data[4];\n};\n");
  ASSERT_TRUE(r.ok) << r.why;
  EXPECT_EQ(r.emptied, 1);
  EXPECT_NE(r.text.find("__inline__ __attribute__((always_inline))  float get(int i) const { __builtin_unreachable(); }"), std::string::npos)
      << r.text;
  EXPECT_NE(r.text.find("  int size() const { return 4; }"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("auto f = [](int x) { return x + 1; }; return f(1);"), std::string::npos);
  EXPECT_NE(r.text.find("float data[4];\n};"), std::string::npos);
}

TEST(HostTransform, ConstructorsOperatorsAndInitializers) {
  const Result r = rewrite(S("struct A {\n  ") + kDevice + " A(int v) : a{v}, b(v) { a += b; }\n  " + kDevice +
                           " A& operator=(const A& o) { a = o.a; return *this; }\n  int a{0}, b = 1;\n};\n" + kDevice +
                           " int table[2] = {1, 2};\nconst char* s = \"} {\";\nchar c = '}';\nconst char* r = R\"x(})x\";\n" + kDevice +
                           " int after() { return 3; }\n");
  ASSERT_TRUE(r.ok) << r.why;
  EXPECT_EQ(r.emptied, 3);
  EXPECT_NE(r.text.find("A(int v) : a{v}, b(v) { __builtin_unreachable(); }"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("A& operator=(const A& o) { __builtin_unreachable(); }"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("int a{0}, b = 1;"), std::string::npos);
  EXPECT_NE(r.text.find(" int table[2] = {1, 2};"), std::string::npos);
  EXPECT_NE(r.text.find(" int after() { __builtin_unreachable(); }"), std::string::npos) << r.text;
}

TEST(HostTransform, DeducedReturnTypes) {
  // Kept where never compiled for the host: inline, templates, members (host code never calls them).
  const Result kept = rewrite(S("template <typename T>\n") + kDevice + " auto twice(T x) { return x + x; }\n" + kSglDevice +
                              " auto one() { return 1; }\n" + kDevice +
                              " auto three() -> int { return 3; }\n");
  ASSERT_TRUE(kept.ok) << kept.why;
  EXPECT_NE(kept.text.find("auto twice(T x) { return x + x; }"), std::string::npos);
  EXPECT_NE(kept.text.find("auto one() { return 1; }"), std::string::npos);
  EXPECT_NE(kept.text.find("auto three() -> int { __builtin_unreachable(); }"), std::string::npos) << kept.text;
  // Otherwise the host compiler would compile its device body: refused.
  const Result refused = rewrite(S(kDevice) + " auto f() { return 1; }\n");
  EXPECT_FALSE(refused.ok);
  EXPECT_NE(refused.why.find("deduced return type"), std::string::npos) << refused.why;
  // constexpr device functions: host code may call them (--expt-relaxed-constexpr).
  const Result ce = rewrite(S(kDevice) + " constexpr int c() { return 7; }\n");
  ASSERT_TRUE(ce.ok);
  EXPECT_NE(ce.text.find("constexpr int c() { return 7; }"), std::string::npos);
}

TEST(HostTransform, RefusesWhatItCannotRoute) {
  const auto why = [](const std::string& unit) {
    const Result r = rewrite(unit);
    return r.ok ? std::string("accepted") : r.why;
  };
  EXPECT_NE(why("void f() { obj.k<<<1, 1>>>(); }\n").find("<<<...>>> launch of a kernel that is not a name"), std::string::npos);
  EXPECT_NE(why("void f() { K<T>::kernel<<<1, 1>>>(); }\n").find("<<<...>>> launch of a kernel that is not a name"), std::string::npos);
  EXPECT_NE(why("void f() { k<<<1, 1; }\n").find("unterminated <<<"), std::string::npos);
  EXPECT_NE(why("__attribute__((managed)) int m;\n").find("__managed__"), std::string::npos);
  EXPECT_NE(why("void f() { cudaMemcpyToSymbol(x, y, 4, 0, cudaMemcpyHostToDevice); }\n").find("cudaMemcpyToSymbol needs"), std::string::npos);
  EXPECT_NE(why(S("static ") + kGlobal + " void k() {}\n").find("a static kernel"), std::string::npos);
  EXPECT_EQ(why(S("namespace {\n") + kGlobal + " void k() {}\n}\n"), "accepted") << "found by the device code's name (host_launch.h)";
  EXPECT_NE(why("void f() { cudaLaunchKernelExC_ptsz(c, k, a); }\n").find("per-thread"), std::string::npos);
  // The reason names where: file and line.
  EXPECT_NE(why("int a;\n\nvoid f() { (k)<<<1, 1>>>(); }\n").find("(kernels.cuh:3)"), std::string::npos);
  // The toolkit's headers declare those functions.
  const std::string decl = "# 1 \"/opt/toolkit/include/cuda_runtime_api.h\"\nextern cudaError_t cudaMemcpyToSymbol(const void*, const void*);\n";
  EXPECT_TRUE(transform(decl, {"/opt/toolkit/include"}, "id").ok);
  EXPECT_FALSE(transform(decl, {"/opt/other"}, "id").ok);
  // A symbol call in a device body that is removed is never compiled for the host.
  EXPECT_EQ(why(S(kDevice) + " void d() { cudaMemcpyToSymbol(x, y); }\n"), "accepted");
}

TEST(HostTransform, RoutesKernelTakingRuntimeCalls) {
  const Result r = rewrite(S("extern \"C\" {\nextern ") + kHost + " cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t*, const void*, void**);\n}\n"
                           "void launch() { ::cudaLaunchKernelExC(&c, (const void*)k, args); cudaFuncSetAttribute(k, a, 1); "
                           "cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, 128, 0); cudaMalloc(&p, 4); }\n");
  ASSERT_TRUE(r.ok) << r.why;
  EXPECT_NE(r.text.find("cudaError_t jitkern_compat_cudaLaunchKernelExC(const cudaLaunchConfig_t*"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("::jitkern_compat_cudaLaunchKernelExC(&c"), std::string::npos);
  EXPECT_NE(r.text.find(" jitkern_compat_cudaFuncSetAttribute(k"), std::string::npos);
  EXPECT_NE(r.text.find(" jitkern_compat_cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n"), std::string::npos);
  EXPECT_NE(r.text.find(" cudaMalloc(&p"), std::string::npos);  // not a kernel: unchanged
  EXPECT_EQ(std::count(routed_functions().begin(), routed_functions().end(), "cudaLaunchKernelExC"), 1);
}

// The rewrite renames each routed call to jitkern_compat_<name>: <jitkern/compat/host_launch.h> must define
// every one (a missing wrapper fails the rewritten module's host compile, which then takes cudafe++).
TEST(HostTransform, EveryRoutedCallHasItsWrapperAndRuntimeBinding) {
  std::ifstream in(std::string(JITKERN_SOURCE_DIR) + "/include/jitkern/compat/host_launch.h");
  ASSERT_TRUE(in.good());
  std::stringstream header;
  header << in.rdbuf();
  for (const std::string& name : routed_functions()) {
    EXPECT_NE(header.str().find("inline cudaError_t jitkern_compat_" + name + "("), std::string::npos) << name;
    EXPECT_NE(header.str().find("JITKERN_COMPAT_RUNTIME(" + name + ");"), std::string::npos) << name;
  }
}

TEST(HostTransform, TripleChevronLaunchesOfNamedKernelsBecomeRoutedCalls) {
  const Result r = rewrite("template <class K> void go(K k, dim3 g, cudaStream_t s, int* p) {\n  k<<<g, dim3{32, 1, 1}, f(1, 2), s>>>(p, 3);\n}\n");
  ASSERT_TRUE(r.ok) << r.why;
  EXPECT_NE(r.text.find("  ::jitkern::compat::chevron(k, g, dim3{32, 1, 1}, f(1, 2), s)(p, 3);\n"), std::string::npos) << r.text;
  const Result t = rewrite("void go() {\n  ::sglang::kern<T, static_cast<bool>(N > 2), Vec<int>><<<n, 128>>>(p);\n}\n");
  ASSERT_TRUE(t.ok) << t.why;
  EXPECT_NE(t.text.find("  ::jitkern::compat::chevron(::sglang::kern<T, static_cast<bool>(N > 2), Vec<int>>, n, 128)(p);"), std::string::npos)
      << t.text;
}

TEST(HostTransform, LinesAndLineMarkersKept) {
  const std::string unit = S(kDevice) + " int d() {\n  int x = 1;\n# 1 \"inner.h\" 1\n  x += 2;\n# 3 \"kernels.cuh\" 2\n  return x;\n}\nint host_line() { return __LINE__; }\n";
  const Result r = rewrite(unit);
  ASSERT_TRUE(r.ok) << r.why;
  // The unit's lines, the line marker rewrite() adds, and the module id's definition after them.
  EXPECT_EQ(std::count(r.text.begin(), r.text.end(), '\n'), std::count(unit.begin(), unit.end(), '\n') + 1 + 2);
  EXPECT_NE(r.text.find("\nextern \"C\" const char jitkern_compat_module_id[] = \"_0123abcd_9_device_cu_4567ef01\";\n"), std::string::npos);
  EXPECT_NE(r.text.find(" int d() { __builtin_unreachable(); }\n\n# 1 \"inner.h\" 1\n\n# 3 \"kernels.cuh\" 2\n\n\nint host_line()"), std::string::npos)
      << r.text;
}

TEST(HostTransform, StdMathDeclarationsOfCudaDropped) {
  // libstdc++ declares them (constexpr) for the host; CUDA's redeclarations would conflict.
  const Result r = rewrite(S("namespace std {\nextern ") + kHost + " " + kDevice + " float abs(float);\nusing ::abs;\n}\nnamespace other {\nextern " +
                           kDevice + " float abs(float);\n}\n");
  ASSERT_TRUE(r.ok) << r.why;
  EXPECT_EQ(r.text.find("float abs(float);\nusing"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("using ::abs;"), std::string::npos);
  EXPECT_NE(r.text.find("namespace other {\nextern  float abs(float);"), std::string::npos) << r.text;
}

TEST(HostTransform, ClassHeadsAndNamespaces) {
  const Result r = rewrite(S("namespace a::b {\ninline namespace v1 {\ntemplate <typename T, int N = (1 > 0)>\nstruct alignas(16) X : Base<decltype(f())> {\n  ") +
                           kDevice + " T at(int i) { return v[i]; }\n  T v[N];\n};\nenum class E : int { kA = 1 };\ntemplate <>\nstruct X<int, 1> final {\n  " +
                           kDevice + " int at(int) { return 0; }\n};\n}\n}\n");
  ASSERT_TRUE(r.ok) << r.why;
  EXPECT_EQ(r.emptied, 2) << r.text;
  EXPECT_NE(r.text.find("enum class E : int { kA = 1 };"), std::string::npos);
}

// What the rewrite writes for a unit with each of its cases, pinned to kVersion: a module built by an
// older rewrite must not be served to a newer one (the version is in the build key), so a change here
// bumps kVersion and then this pin.
TEST(HostTransform, ItsOutputIsPinnedToItsVersion) {
  const Result r = rewrite(S("namespace std {\nextern ") + kHost + " " + kDevice + " float abs(float);\n}\nnamespace sglang {\nnamespace {\n" +
                           kGlobal + " void anon(int* p) { p[0] = 1; }\n}\ntemplate <int N>\n" + kGlobal +
                           " __attribute__((launch_bounds(N))) void k(int* p) { p[threadIdx.x] = N; }\nstruct V {\n  " + kSglDevice +
                           " int get() const { return 1; }\n  " + kHost + " " + kDevice + " int both() const { return 2; }\n  " + kDevice +
                           " constexpr int c() const { return 3; }\n};\ntemplate <typename T>\n" + kDevice + " auto twice(T x) { return x + x; }\n" +
                           "inline void run(int* p, cudaStream_t s) {\n  cudaFuncSetAttribute(k<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, 0);\n"
                           "  k<4><<<1, 4, 0, s>>>(p);\n  anon<<<1, 1>>>(p);\n}\n}\n");
  ASSERT_TRUE(r.ok) << r.why;
  EXPECT_EQ(kVersion, 1);
  EXPECT_EQ(Sha256().update(r.text).hex(), "2a8c77987d6955a6a4ee49a8f9c24baef3d2d4ab7db8b883ce774ff2d7344655") << "the rewrite's output changed: bump host_transform::kVersion, then this pin\n" << r.text;
}

TEST(HostTransform, UnbalancedInputIsRefusedNotGuessed) {
  EXPECT_FALSE(rewrite("namespace a {\nint x;\n").ok);
  EXPECT_FALSE(rewrite("}\n").ok);
  EXPECT_FALSE(rewrite(S(kDevice) + " int d() { return 1;\n").ok);
}

// A unit as the host preprocessor writes it: built-ins, a forced include, then the main file's includes.
constexpr const char* kPrefixed =
    "# 0 \"device.cu\"\n# 0 \"<built-in>\"\n# 1 \"/usr/include/stdc-predef.h\" 1 3 4\n# 0 \"<command-line>\" 2\n"
    "# 1 \"cuda_runtime.h\" 1\nint runtime;\n# 0 \"<command-line>\" 2\n# 1 \"device.cu\"\n"
    "# 1 \"/pkg/shared.h\" 1\n#pragma GCC diagnostic push\n# 1 \"/pkg/nested.h\" 1\nint nested;\n# 3 \"/pkg/shared.h\" 2\n"
    "#pragma GCC visibility push(default)\nint shared;\n#pragma GCC visibility pop\n#pragma GCC diagnostic pop\n"
    "# 3 \"device.cu\" 2\n# 1 \"/pkg/kernel.cuh\" 1\nconst char* s = R\"(\n# 9 \"device.cu\" 2\n)\";\n# 4 \"device.cu\" 2\n";

TEST(HostTransform, TheSharedPrefixEndsWhereTheMainFileResumesAfterTheHeader) {
  std::string why;
  const std::string text = kPrefixed;
  const std::size_t end = shared_prefix_end(text, "/pkg/shared.h", &why);
  ASSERT_NE(end, std::string::npos) << why;
  EXPECT_EQ(text.substr(end, 21), "# 3 \"device.cu\" 2\n# 1") << text.substr(end);
  // A marker-like line inside a raw string is no marker: the kernel's include ends at its real one.
  const std::size_t kernel_end = shared_prefix_end(text, "/pkg/kernel.cuh", &why);
  ASSERT_NE(kernel_end, std::string::npos) << why;
  EXPECT_EQ(text.substr(kernel_end), "# 4 \"device.cu\" 2\n");
  // Only a top-level include of it; a nested one is no boundary.
  EXPECT_EQ(shared_prefix_end(text, "/pkg/nested.h", &why), std::string::npos);
  EXPECT_NE(why.find("no top-level #include of /pkg/nested.h"), std::string::npos) << why;
  EXPECT_EQ(after_prefix(text, end, "/tmp/p \"q\".h.gch"),
            "# 0 \"device.cu\"\n#pragma GCC pch_preprocess \"/tmp/p \\\"q\\\".h.gch\"\n" + text.substr(end));
}

TEST(HostTransform, NoSharedPrefixWherePragmaStateCouldDifferPrecompiled) {
  std::string why;
  for (const std::string pragma : {"#pragma pack(push, 1)", "#pragma GCC push_options", "#pragma GCC optimize(\"O3\")", "#pragma weak w"}) {
    std::string with = kPrefixed;
    with.insert(with.find("int shared;"), pragma + "\n");
    EXPECT_EQ(shared_prefix_end(with, "/pkg/shared.h", &why), std::string::npos) << pragma;
    EXPECT_NE(why.find(pragma), std::string::npos) << why;
  }
  std::string open = kPrefixed;
  open.erase(open.find("#pragma GCC visibility pop\n"), 27);
  EXPECT_EQ(shared_prefix_end(open, "/pkg/shared.h", &why), std::string::npos);
  EXPECT_NE(why.find("visibility push open"), std::string::npos) << why;
}

}  // namespace
}  // namespace jitkern::host_transform
