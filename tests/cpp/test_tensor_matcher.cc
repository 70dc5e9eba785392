#include <gtest/gtest.h>
#include <jitkern/error.h>
#include <jitkern/tensor.h>

#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

// An owning DLTensor for tests.
struct FakeTensor {
  std::vector<int64_t> shape, strides;
  DLTensor t{};
  FakeTensor(std::vector<int64_t> shape_, std::vector<int64_t> strides_ = {}, DLDataType dtype = {kDLFloat, 32, 1},
             DLDevice device = {kDLCUDA, 0})
      : shape(std::move(shape_)), strides(std::move(strides_)) {
    if (strides.empty()) {
      strides.resize(shape.size());
      int64_t s = 1;
      for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) strides[d] = s, s *= shape[d];
    }
    t.data = reinterpret_cast<void*>(0x1000);
    t.device = device;
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = dtype;
    t.shape = shape.data();
    t.strides = strides.data();
  }
  FakeTensor(const FakeTensor& o) : shape(o.shape), strides(o.strides), t(o.t) { repoint(o); }
  FakeTensor& operator=(const FakeTensor& o) {
    shape = o.shape, strides = o.strides, t = o.t;
    repoint(o);
    return *this;
  }
  jitkern::TensorView view() const { return jitkern::TensorView(&t); }

 private:
  void repoint(const FakeTensor& o) {  // t points into this tensor's own vectors (null strides stay null)
    t.shape = shape.data();
    t.strides = o.t.strides != nullptr ? strides.data() : nullptr;
  }
};

template <typename F>
std::string failure(F&& f) {
  try {
    f();
  } catch (const host::PanicError& e) {
    return e.what();
  }
  return "<no failure>";
}

#define EXPECT_CONTAINS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// A user-defined element type registered through dtype_trait.
struct Half {
  uint16_t bits;
};

constexpr DLDataType kF32{kDLFloat, 32, 1};
constexpr DLDataType kF16{kDLFloat, 16, 1};
constexpr DLDataType kI32{kDLInt, 32, 1};

}  // namespace

template <>
struct host::dtype_trait<Half> {
  static constexpr DLDataType value = {kDLFloat, 16, 1};
};

using namespace host;

TEST(TensorMatcher, ResolvesSymbolsAcrossTensors) {
  FakeTensor a({100, 256}), b({7, 256});
  auto D = SymbolicSize{"head_dim"};
  auto dtype = SymbolicDType{};
  auto device = SymbolicDevice{};
  TensorMatcher({-1, D}).with_dtype<float, int32_t>(dtype).with_device<kDLCUDA, kDLCPU>(device).verify(a.view()).verify(b.view());
  EXPECT_EQ(D.unwrap(), 256);
  EXPECT_TRUE(host::dtype_equal(dtype.unwrap(), kF32));
  EXPECT_TRUE(dtype.is_type<float>());
  EXPECT_EQ(device.unwrap().device_type, kDLCUDA);
}

TEST(TensorMatcher, FullMessageForSizeMismatch) {
  FakeTensor a({100, 128}), b({100, 256});
  auto D = SymbolicSize{"head_dim"};
  int line = 0;
  const std::string msg = failure([&] {
    line = __LINE__ + 1;
    TensorMatcher({-1, D}).with_dtype<float>().verify(a.view()).verify(b.view());
  });
  EXPECT_CONTAINS(msg, "Tensor match failed for Tensor<100, 256>[strides=<256, 1>, dtype=float32, device=cuda:0] at ");
  EXPECT_CONTAINS(msg, std::string(__FILE__) + ":" + std::to_string(line));
  EXPECT_CONTAINS(msg, "- Expected: Tensor<*, head_dim>[strides=contiguous, dtype in {float32}]");
  EXPECT_CONTAINS(msg, "- Root cause: Size mismatch for shape#1('head_dim'): expected 128 (resolved earlier) but got 256");
}

TEST(TensorMatcher, LiteralSizeMismatch) {
  FakeTensor a({4, 3});
  const std::string msg = failure([&] { TensorMatcher({4, 5}).verify(a.view()); });
  EXPECT_CONTAINS(msg, "Size mismatch for shape#1: expected 5 but got 3");
}

TEST(TensorMatcher, DimensionMismatch) {
  FakeTensor a({4, 3, 2});
  const std::string msg = failure([&] { TensorMatcher({-1, -1}).verify(a.view()); });
  EXPECT_CONTAINS(msg, "Dimension mismatch: expected 2 dimensions but got 3");
}

TEST(TensorMatcher, ContiguityRequiredWithoutStrides) {
  FakeTensor a({4, 3}, {1, 4});
  const std::string msg = failure([&] { TensorMatcher({4, 3}).verify(a.view()); });
  EXPECT_CONTAINS(msg, "Tensor is not contiguous");
  EXPECT_CONTAINS(msg, "strides=<1, 4>");
}

TEST(TensorMatcher, StridesLiteralSymbolicAndWildcard) {
  FakeTensor a({4, 3}, {8, 1}), b({5, 3}, {8, 1}), c({5, 3}, {9, 1});
  auto N = SymbolicSize{"row_stride"};
  TensorMatcher({-1, 3}).with_strides({N, 1}).verify(a.view()).verify(b.view());
  EXPECT_EQ(N.unwrap(), 8);
  std::string msg = failure([&] { TensorMatcher({-1, 3}).with_strides({N, 1}).verify(c.view()); });
  EXPECT_CONTAINS(msg, "Stride mismatch for stride#0('row_stride'): expected 8 (resolved earlier) but got 9");
  msg = failure([&] { TensorMatcher({-1, 3}).with_strides({8, 1}).verify(c.view()); });
  EXPECT_CONTAINS(msg, "Stride mismatch for stride#0: expected 8 but got 9");
  EXPECT_NO_THROW(TensorMatcher({-1, 3}).with_strides({-1, 1}).verify(c.view()));
}

TEST(TensorMatcher, MismatchNamesWhereTheEarlierValueCameFrom) {
  FakeTensor y({5, 3}, {8, 1}), x({4, 3}, {9, 1});
  auto N = SymbolicSize{"n"};
  auto S = SymbolicSize{"row_stride"};
  auto unnamed = SymbolicSize{};
  std::string msg = failure([&] { TensorMatcher({N, 3}).verify(y.view(), std::string("y").c_str()); });
  EXPECT_CONTAINS(msg, "not contiguous");  // a failed match resolves nothing
  EXPECT_FALSE(N.has_value());
  msg = failure([&] { TensorMatcher({N, 3}).with_strides({S, 1}).verify(y.view(), std::string("y").c_str()).verify(x.view(), "x"); });
  EXPECT_CONTAINS(msg, "Size mismatch for shape#0('n'): expected 5 (resolved earlier) but got 4; n = 5 from y (shape#0)");
  msg = failure([&] { TensorMatcher({-1, 3}).with_strides({S, 1}).verify(x.view(), "x"); });
  EXPECT_CONTAINS(msg, "Stride mismatch for stride#0('row_stride'): expected 8 (resolved earlier) but got 9; row_stride = 8 from y (stride#0)");
  msg = failure([&] { TensorMatcher({-1, unnamed}).verify(FakeTensor({2, 3}).view(), "a").verify(FakeTensor({2, 7}).view(), "b"); });
  EXPECT_CONTAINS(msg, "expected 3 (resolved earlier) but got 7; 3 came from a (shape#1)");
  auto M = SymbolicSize{"m"};
  M.set_value(6);  // set by hand: no source to name
  msg = failure([&] { TensorMatcher({M}).verify(FakeTensor({7}).view(), "z"); });
  EXPECT_CONTAINS(msg, "expected 6 (resolved earlier) but got 7");
  EXPECT_EQ(msg.find("; m = "), std::string::npos) << msg;
}

TEST(TensorMatcher, SizeOneDimensionsSkipStrideCheck) {
  FakeTensor a({1, 3}, {12345, 1});  // torch gives arbitrary strides to size-1 dims
  EXPECT_NO_THROW(TensorMatcher({1, 3}).verify(a.view()));
  EXPECT_NO_THROW(TensorMatcher({1, 3}).with_strides({3, 1}).verify(a.view()));
}

TEST(TensorMatcher, DTypeNotAllowed) {
  FakeTensor a({2}, {}, kF16);
  const std::string msg = failure([&] { TensorMatcher({2}).with_dtype<float, int32_t>().verify(a.view()); });
  EXPECT_CONTAINS(msg, "DType mismatch: float16 is not one of the allowed dtypes");
  EXPECT_CONTAINS(msg, "dtype in {float32, int32}");
}

TEST(TensorMatcher, DTypeSymbolMismatch) {
  FakeTensor a({2}, {}, kF32), b({2}, {}, kI32);
  auto dtype = SymbolicDType{};
  const std::string msg = failure([&] { TensorMatcher({2}).with_dtype<float, int32_t>(dtype).verify(a.view()).verify(b.view()); });
  EXPECT_CONTAINS(msg, "DType mismatch: expected float32 (resolved earlier) but got int32");
}

TEST(TensorMatcher, DTypeSymbolKeepsItsOptionsWhenReusedWithoutTypes) {
  // The reference wipes the symbol's options in with_dtype(symbol); we keep them.
  FakeTensor f32({3}, {}, kF32), i32({2}, {}, kI32);
  auto dtype = SymbolicDType{};
  TensorMatcher({3}).with_dtype<float, Half>(dtype).verify(f32.view());
  const std::string msg = failure([&] { TensorMatcher({2}).with_dtype(dtype).verify(i32.view()); });
  EXPECT_CONTAINS(msg, "DType mismatch: int32 is not one of the dtype symbol's options");
  EXPECT_CONTAINS(msg, "dtype (symbol) in {float32, float16}");
}

TEST(TensorMatcher, DTypeSymbolOptionsFromAnEarlierMatcher) {
  FakeTensor i32({2}, {}, kI32), f16({3}, {}, kF16);
  auto dtype = SymbolicDType{};
  // The first matcher restricts the symbol to {float32, float16} but fails on int32...
  EXPECT_NE(failure([&] { TensorMatcher({2}).with_dtype<float, Half>(dtype).verify(i32.view()); }), "<no failure>");
  EXPECT_FALSE(dtype.has_value());
  // ...and a later with_dtype(symbol) without template arguments still enforces those options.
  TensorMatcher({3}).with_dtype(dtype).verify(f16.view());
  EXPECT_TRUE(host::dtype_equal(dtype.unwrap(), kF16));
}

TEST(TensorMatcher, DeviceNotAllowedAndSymbolMismatch) {
  FakeTensor cpu({2}, {}, kF32, {kDLCPU, 0}), gpu0({2}, {}, kF32, {kDLCUDA, 0}), gpu1({2}, {}, kF32, {kDLCUDA, 1});
  std::string msg = failure([&] { TensorMatcher({2}).with_device<kDLCUDA>().verify(cpu.view()); });
  EXPECT_CONTAINS(msg, "Device mismatch: cpu:0 is not one of {cuda}");
  auto device = SymbolicDevice{};
  msg = failure([&] { TensorMatcher({2}).with_device<kDLCUDA>(device).verify(gpu0.view()).verify(gpu1.view()); });
  EXPECT_CONTAINS(msg, "Device mismatch: expected cuda:0 (resolved earlier) but got cuda:1");
}

TEST(TensorMatcher, FailedVerifyLeavesNewSymbolsUnresolved) {
  FakeTensor a({4, 3}, {}, kF16);
  auto R = SymbolicSize{"rows"};
  EXPECT_NE(failure([&] { TensorMatcher({R, 3}).with_dtype<float>().verify(a.view()); }), "<no failure>");
  EXPECT_FALSE(R.has_value());
}

TEST(TensorMatcher, UnwrapBeforeResolutionFails) {
  auto N = SymbolicSize{"num_tokens"};
  std::string msg = failure([&] { (void)N.unwrap(); });
  EXPECT_CONTAINS(msg, "SymbolicSize('num_tokens') was never resolved");
  auto dtype = SymbolicDType{};
  msg = failure([&] { (void)dtype.unwrap(); });
  EXPECT_CONTAINS(msg, "SymbolicDType was never resolved");
  auto device = SymbolicDevice{};
  msg = failure([&] { (void)device.unwrap(); });
  EXPECT_CONTAINS(msg, "SymbolicDevice was never resolved");
}

TEST(TensorMatcher, MissingTensor) {
  const std::string msg = failure([&] { TensorMatcher({2}).verify(jitkern::TensorView()); });
  EXPECT_CONTAINS(msg, "the tensor is missing (None)");
}

TEST(TensorView, AccessorsAndChecks) {
  FakeTensor a({2, 3, 4});
  const auto v = a.view();
  EXPECT_EQ(v.dim(), 3);
  EXPECT_EQ(v.size(-1), 4);
  EXPECT_EQ(v.stride(0), 12);
  EXPECT_EQ(v.numel(), 24);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_CONTAINS(failure([&] { (void)v.size(3); }), "Dimension index 3 out of range");
  FakeTensor implicit({2, 3});
  implicit.t.strides = nullptr;  // DLPack allows compact tensors without strides
  EXPECT_EQ(implicit.view().stride(0), 3);
  EXPECT_CONTAINS(failure([&] { (void)implicit.view().strides(); }), "implicit (compact) strides");
}

TEST(TensorMatcher, NamedArgumentsAndErrorKinds) {
  using namespace host;
  FakeTensor x({4, 8}), y({4, 8}, {}, {kDLInt, 32, 1}), z({5, 8}), cpu({4, 8}, {}, {kDLFloat, 32, 1}, {kDLCPU, 0});
  auto kind_of = [](auto&& f) {
    try {
      f();
    } catch (const PanicError& e) {
      return e.kind;
    }
    return static_cast<ErrorKind>(255);
  };
  auto N = SymbolicSize{"n"};
  TensorMatcher({N, 8}).with_dtype<float>().verify(x.view(), "x");
  const std::string msg = failure([&] { TensorMatcher({N, 8}).with_dtype<float>().verify(y.view(), "y"); });
  EXPECT_NE(msg.find("Tensor match failed for y = Tensor<4, 8>"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Root cause: y: DType mismatch: int32"), std::string::npos) << msg;
  EXPECT_EQ(kind_of([&] { TensorMatcher({N, 8}).with_dtype<float>().verify(y.view(), "y"); }), ErrorKind::kType);
  EXPECT_EQ(kind_of([&] { TensorMatcher({N, 8}).with_dtype<float>().verify(z.view(), "z"); }), ErrorKind::kValue);
  EXPECT_EQ(kind_of([&] { TensorMatcher({N, 8}).with_device<kDLCUDA>().verify(cpu.view(), "cpu"); }), ErrorKind::kValue);
  EXPECT_EQ(kind_of([&] { TensorMatcher({N, 8}).verify(static_cast<const DLTensor*>(nullptr), "none"); }), ErrorKind::kType);
  EXPECT_EQ(kind_of([&] { RuntimeCheck(false, "value"); }), ErrorKind::kValue);
  EXPECT_EQ(kind_of([&] { Panic("internal"); }), ErrorKind::kRuntime);
}

template <typename T>
struct ValueForms {  // inside a class template: no `.template` needed with dtype_v / device_v
  static int64_t rows(const jitkern::TensorView& t) {
    using namespace host;
    auto N = SymbolicSize{"n"};
    auto device = SymbolicDevice{};
    TensorMatcher({N, -1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(t, "t");
    return N.unwrap();
  }
};

TEST(TensorMatcher, ValueFormsOfDTypeAndDevice) {
  FakeTensor f({3, 2}), i({3, 2}, {}, {kDLInt, 32, 1});
  EXPECT_EQ(ValueForms<float>::rows(f.view()), 3);
  EXPECT_NE(failure([&] { ValueForms<float>::rows(i.view()); }).find("t: DType mismatch"), std::string::npos);
  auto dtype = host::SymbolicDType{};
  host::TensorMatcher({-1, 2}).with_dtype(host::dtype_v<float, int32_t>, dtype).verify(i.view());
  EXPECT_TRUE(dtype.is_type<int32_t>());
}

TEST(WrittenLayouts, TwoWrittenTensorsAreDistinct) {
  FakeTensor a({4, 8}), b({4, 8}), empty({0, 8});
  b.t.data = reinterpret_cast<void*>(0x2000);
  check_distinct(a.view(), b.view(), "k_cache", "v_cache");
  check_distinct(a.view(), empty.view(), "q", "k");  // nothing written through an empty one
  EXPECT_CONTAINS(failure([&] { check_distinct(a.view(), a.view(), "k_cache", "v_cache"); }), "k_cache and v_cache must not overlap");
}

// A view of `shape` and `strides` (elements of `bytes` bytes) whose first element is `offset` bytes into a buffer.
FakeTensor at(std::vector<int64_t> shape, std::vector<int64_t> strides, int64_t offset, uint8_t bytes = 4) {
  FakeTensor t(std::move(shape), std::move(strides), {kDLUInt, static_cast<uint8_t>(8 * bytes), 1});
  t.t.data = reinterpret_cast<void*>(0x10000 + offset);
  return t;
}

TEST(WrittenLayouts, DistinctViewsOfOneBufferMustNotShareAByte) {
  // q and k: columns of a qkv row of 48 floats, side by side; k reaching back one column into q.
  check_distinct(at({5, 32}, {48, 1}, 0).view(), at({5, 8}, {48, 1}, 32 * 4).view(), "q", "k");
  EXPECT_CONTAINS(failure([] { check_distinct(at({5, 32}, {48, 1}, 0).view(), at({5, 8}, {48, 1}, 31 * 4).view(), "q", "k"); }),
                  "q and k must not overlap: they share memory");
  // K and V pages of one cache [pages, 2, page, 8]; V moved back one element into K's page.
  check_distinct(at({6, 16, 8}, {256, 8, 1}, 0).view(), at({6, 16, 8}, {256, 8, 1}, 128 * 4).view(), "k_cache", "v_cache");
  EXPECT_CONTAINS(failure([] { check_distinct(at({6, 16, 8}, {256, 8, 1}, 0).view(), at({6, 16, 8}, {256, 8, 1}, 127 * 4).view(), "k_cache",
                                              "v_cache"); }),
                  "k_cache and v_cache must not overlap");
  // Heads that interleave (q heads 0, 2, 4 and k heads 1, 3, 5 of each token): each spans the other's, neither shares a byte.
  check_distinct(at({4, 3, 8}, {48, 16, 1}, 0).view(), at({4, 3, 8}, {48, 16, 1}, 8 * 4).view(), "q", "k");
  EXPECT_NE(failure([] { check_distinct(at({4, 3, 8}, {48, 16, 1}, 0).view(), at({4, 3, 8}, {48, 16, 1}, 9 * 4).view(), "q", "k"); }), "");
  // Byte granularity: a float starting inside a byte tensor's last element shares it.
  EXPECT_NE(failure([] { check_distinct(at({10}, {1}, 0, 1).view(), at({1}, {1}, 9, 4).view(), "a", "b"); }), "");
  check_distinct(at({10}, {1}, 0, 1).view(), at({1}, {1}, 10, 4).view(), "a", "b");
  // Negative strides (DLPack allows them): the lowest byte is the last element's.
  check_distinct(at({4}, {-1}, 12).view(), at({1}, {1}, -4).view(), "a", "b");
  EXPECT_NE(failure([] { check_distinct(at({4}, {-1}, 12).view(), at({1}, {1}, 0).view(), "a", "b"); }), "");
  // Null strides: compact.
  FakeTensor compact = at({4, 8}, {}, 0);
  compact.t.strides = nullptr;
  check_distinct(compact.view(), at({1}, {1}, 32 * 4).view(), "a", "b");
  EXPECT_NE(failure([&] { check_distinct(compact.view(), at({1}, {1}, 31 * 4).view(), "a", "b"); }), "");
}

TEST(WrittenLayouts, OverlapSearchAgreesWithTheBytesOfSmallLayouts) {
  std::mt19937 rng(7);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int overlaps = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    FakeTensor views[2] = {at({1}, {1}, 0), at({1}, {1}, 0)};
    std::set<int64_t> bytes[2];
    for (FakeTensor& v : views) {
      std::vector<int64_t> shape(pick(1, 3)), strides(shape.size());
      for (std::size_t d = 0; d < shape.size(); ++d) shape[d] = pick(1, 4), strides[d] = pick(-6, 12);
      v = at(shape, strides, pick(0, 96), static_cast<uint8_t>(1 << pick(0, 2)));
    }
    for (int k = 0; k < 2; ++k) {
      const DLTensor& t = views[k].t;
      const int64_t width = t.dtype.bits / 8;
      std::vector<int64_t> index(t.ndim, 0);
      for (bool more = true; more;) {
        int64_t at_byte = reinterpret_cast<intptr_t>(t.data);
        for (int d = 0; d < t.ndim; ++d) at_byte += index[d] * t.strides[d] * width;
        for (int64_t b = 0; b < width; ++b) bytes[k].insert(at_byte + b);
        more = false;
        for (int d = t.ndim - 1; d >= 0 && !more; --d) {
          if (++index[d] < t.shape[d]) more = true;
          else index[d] = 0;
        }
      }
    }
    bool shared = false;
    for (int64_t b : bytes[0]) shared = shared || bytes[1].count(b) > 0;
    overlaps += shared;
    ASSERT_EQ(host::detail::tensors_overlap(&views[0].t, &views[1].t), shared ? 1 : 0) << "trial " << trial;
  }
  EXPECT_GT(overlaps, 1000);
  EXPECT_LT(overlaps, 19000);
}

TEST(WrittenLayouts, RowsMustNotOverlap) {
  check_rows_disjoint(4, 128, 128, "out");
  check_rows_disjoint(4, 128, 200, "out");  // padded rows
  check_rows_disjoint(1, 128, 0, "out");    // one row: its stride is never used
  EXPECT_CONTAINS(failure([] { check_rows_disjoint(4, 128, 64, "out"); }), "out rows overlap: row stride 64 is smaller than the row width 128");
  EXPECT_CONTAINS(failure([] { check_rows_disjoint(2, 4096, 0, "output"); }), "output rows overlap: row stride 0");
}

TEST(WrittenLayouts, DisjointTakesDenseTransposedAndPaddedLayouts) {
  check_disjoint(Extents{5, 4, 128}, Extents{512, 128, 1}, "q");           // dense
  check_disjoint(Extents{5, 4, 128}, Extents{128, 640, 1}, "q");           // heads outermost (a transposed view)
  check_disjoint(Extents{5, 4, 128}, Extents{1536, 384, 1}, "q");          // a slice of a fused qkv buffer
  check_disjoint(Extents{100, 40}, Extents{1, 104}, "output_s");           // column-major scales, columns padded
  check_disjoint(Extents{1, 4, 128}, Extents{0, 128, 1}, "q");             // a size-1 dimension's stride is never used
  check_disjoint(Extents{0, 4, 128}, Extents{0, 0, 0}, "q");               // nothing written
  check_disjoint(Extents{8, 16, 576}, Extents{16 * 600, 600, 1}, "cache"); // paged, rows padded
}

TEST(WrittenLayouts, DisjointRefusesBroadcastsAndOverlaps) {
  EXPECT_CONTAINS(failure([] { check_disjoint(Extents{5, 4, 128}, Extents{512, 64, 1}, "q"); }),
                  "q overlaps itself: its dimension 1 (4 elements, stride 64) is closer than the 128 elements the dimensions inside it span");
  EXPECT_CONTAINS(failure([] { check_disjoint(Extents{100, 40}, Extents{0, 1}, "output_s"); }), "output_s overlaps itself: its dimension 0");
  EXPECT_CONTAINS(failure([] { check_disjoint(Extents{100, 40}, Extents{1, 99}, "output_s"); }),
                  "its dimension 1 (40 elements, stride 99) is closer than the 100 elements");
  EXPECT_CONTAINS(failure([] { check_disjoint(Extents{8, 16, 576}, Extents{16 * 576 - 1, 576, 1}, "cache"); }), "cache overlaps itself");
  EXPECT_CONTAINS(failure([] { check_disjoint(Extents{2, 3}, Extents{1}, "t"); }), "as many sizes as strides");
  // The reach of the inner dimensions saturates rather than wrapping past 2^63 (which would let any stride through).
  EXPECT_CONTAINS(failure([] { check_disjoint(Extents{2, 3, 2}, Extents{1, int64_t{1} << 62, (int64_t{1} << 62) + 4}, "t"); }),
                  "t overlaps itself: its dimension 2");
}
