#include <gtest/gtest.h>
#include <jitkern/error.h>
#include <jitkern/utils.h>

#include <string>
#include <vector>

namespace {

std::string message_of(void (*fn)()) {
  try {
    fn();
  } catch (const host::PanicError& e) {
    return e.what();
  }
  return "<no exception>";
}

}  // namespace

TEST(RuntimeCheck, PassingConditionDoesNothing) {
  EXPECT_NO_THROW(host::RuntimeCheck(1 + 1 == 2, 1 + 1, " != ", 2));
  const int x = 3;
  EXPECT_NO_THROW(host::RuntimeCheck(x > 0));
}

TEST(RuntimeCheck, FailureMessageHasArgumentsAndCallerLocation) {
  int line = 0;
  try {
    const int64_t n = -4;
    line = __LINE__ + 1;
    host::RuntimeCheck(n > 0, "n must be positive, got ", n, " (", 2.5, ", ", true, ", '", 'c', "')");
    FAIL() << "no exception";
  } catch (const host::PanicError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("RuntimeCheck failed at "), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string(__FILE__) + ":" + std::to_string(line)), std::string::npos) << msg;
    EXPECT_NE(msg.find("n must be positive, got -4 (2.5, true, 'c')"), std::string::npos) << msg;
    EXPECT_NE(msg.find("TestBody"), std::string::npos) << "function name missing: " << msg;
  }
}

TEST(RuntimeCheck, ExplicitLocationForm) {
  const host::DebugInfo where;  // captured here
  const int line = __LINE__ - 1;
  try {
    host::RuntimeCheck(where, false, "explicit");
    FAIL() << "no exception";
  } catch (const host::PanicError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(":" + std::to_string(line)), std::string::npos) << msg;
    EXPECT_NE(msg.find("explicit"), std::string::npos) << msg;
  }
}

TEST(RuntimeCheck, StringTypesArePrinted) {
  const std::string owned = "owned";
  try {
    host::RuntimeCheck(false, owned, "/", std::string_view("view"));
    FAIL() << "no exception";
  } catch (const host::PanicError& e) {
    EXPECT_NE(std::string(e.what()).find("owned/view"), std::string::npos) << e.what();
  }
}

TEST(Panic, AlwaysThrowsWithLocation) {
  const std::string msg = message_of([] { host::Panic("bad state ", 42); });
  EXPECT_EQ(msg.rfind("Panic at ", 0), 0u) << msg;
  EXPECT_NE(msg.find("test_utils.cc:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad state 42"), std::string::npos) << msg;
}

TEST(Panic, DTypeAndDeviceArePrinted) {
  const std::string msg = message_of([] { host::Panic(DLDataType{kDLBfloat, 16, 1}, " on ", DLDevice{kDLCUDA, 3}); });
  EXPECT_NE(msg.find("bfloat16 on cuda:3"), std::string::npos) << msg;
}

TEST(IRange, CoversHalfOpenRanges) {
  std::vector<int> seen;
  for (auto i : host::irange(4)) seen.push_back(i);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3}));
  seen.clear();
  for (auto i : host::irange(2, 5)) seen.push_back(i);
  EXPECT_EQ(seen, (std::vector<int>{2, 3, 4}));
  seen.clear();
  for (auto i : host::irange(5, 2)) seen.push_back(i);  // empty, not an endless loop
  EXPECT_TRUE(seen.empty());
  int64_t count = 0;
  for (auto i : host::irange(int64_t{3}, 7u)) count += i;
  EXPECT_EQ(count, 3 + 4 + 5 + 6);
  EXPECT_EQ(host::irange(10).size(), 10);
}

TEST(DivCeil, RoundsUp) {
  EXPECT_EQ(host::div_ceil(0, 4), 0);
  EXPECT_EQ(host::div_ceil(1, 4), 1);
  EXPECT_EQ(host::div_ceil(8, 4), 2);
  EXPECT_EQ(host::div_ceil(9, 4), 3);
  EXPECT_EQ(host::div_ceil(std::size_t{1} << 40, 256), (std::size_t{1} << 32));
  static_assert(host::div_ceil(7, 2) == 4);
}

TEST(PointerOffset, AddsBytes) {
  char buf[64];
  void* p = buf;
  EXPECT_EQ(host::pointer::offset(p, 3, 4u, int64_t{5}), static_cast<void*>(buf + 12));
  const void* cp = buf;
  EXPECT_EQ(host::pointer::offset(cp, 8), static_cast<const void*>(buf + 8));
  EXPECT_EQ(host::pointer::offset(p), p);
}

TEST(DTypeBytes, RoundsSubByteTypes) {
  EXPECT_EQ(host::dtype_bytes({kDLFloat, 32, 1}), 4u);
  EXPECT_EQ(host::dtype_bytes({kDLBfloat, 16, 1}), 2u);
  EXPECT_EQ(host::dtype_bytes({kDLFloat, 16, 2}), 4u);
  EXPECT_EQ(host::dtype_bytes({kDLInt, 4, 1}), 1u);
  EXPECT_EQ(host::dtype_bytes({kDLFloat8_e4m3fn, 8, 1}), 1u);
}
