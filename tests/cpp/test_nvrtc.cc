#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "compile/nvrtc.h"

namespace {

using jitkern::nvrtc::name_expression;

TEST(Nvrtc, NameExpressionsFromKernelSymbols) {
  // A family kernel: enum constants as casts, a class template argument, no return type left over.
  EXPECT_EQ(name_expression("_ZN12jitkern_norm16norm_wide_kernelI13__nv_bfloat16Li1ELi2ELb0ELN6device4norm6RowFitE0ENS3_11StoreOutputIS1_EELNS_"
                            "8RowOrderE2ELb0EEEvNS_10NormParamsIT_EET4_"),
            "&jitkern_norm::norm_wide_kernel<__nv_bfloat16, 1, 2, false, (device::norm::RowFit)0, device::norm::StoreOutput<__nv_bfloat16>, "
            "(jitkern_norm::RowOrder)2, false>");
  EXPECT_EQ(name_expression("_ZN2ns12plain_kernelEPi"), "&ns::plain_kernel");                   // not a template
  EXPECT_EQ(name_expression("_ZN2ns1S8m_kernelILi2EEEvPi"), "&ns::S::m_kernel<2>");              // a static member
  EXPECT_EQ(name_expression("_ZN11jitkern_moe16moe_align_kernelIvEEvNS_11AlignParamsE"), "&jitkern_moe::moe_align_kernel<void>");
  EXPECT_EQ(name_expression("not_mangled"), "");
}

TEST(Nvrtc, KernelStubsAreTheInternalFunctionsOfTheObject) {
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "/stubs.cc") << "__attribute__((noipa, visibility(\"internal\"))) void a_kernel(int*) {}\n"
                                      "template <int N> __attribute__((noipa, visibility(\"internal\"))) void t_kernel(int*) {}\n"
                                      "void host_function() { a_kernel(nullptr); t_kernel<3>(nullptr); }\n";
  ASSERT_EQ(std::system(("c++ -std=c++20 -O2 -fPIC -fvisibility=hidden -c " + dir + "/stubs.cc -o " + dir + "/stubs.o").c_str()), 0);
  std::vector<std::string> stubs;
  std::string why;
  ASSERT_TRUE(jitkern::nvrtc::kernel_stubs(dir + "/stubs.o", &stubs, &why)) << why;
  EXPECT_EQ(stubs, (std::vector<std::string>{"_Z8a_kernelPi", "_Z8t_kernelILi3EEvPi"}));
  EXPECT_FALSE(jitkern::nvrtc::kernel_stubs(dir + "/stubs.cc", &stubs, &why));
  EXPECT_NE(why.find("not a 64-bit ELF object"), std::string::npos) << why;
}

}  // namespace
