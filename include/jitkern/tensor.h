// TensorMatcher and the Symbolic{Size,DType,Device} variables: declarative validation of tensor
// shape, strides, dtype and device, with readable failure messages.
//
//   auto N = SymbolicSize{"num_tokens"};
//   auto dtype = SymbolicDType{};
//   TensorMatcher({N, 128}).with_dtype<float, int32_t>(dtype).with_device<kDLCUDA>().verify(x, "x").verify(y, "y");
//   TensorMatcher({N}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(z, "z");  // in templates
//
// A failure throws host::PanicError naming the argument: TypeError in Python for a wrong dtype or a
// missing tensor, ValueError for a wrong shape, stride or device.
//
// The header only records the pattern; matching and message formatting are in the runtime library.
#pragma once

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles device code only

#include <jitkern/optional.h>
#include <jitkern/tensor_view.h>
#include <jitkern/utils.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

namespace host {

// DLPack dtype of a C++ element type. Specialise for further types before using them in
// with_dtype<...>() (the CUDA half/bfloat16/fp8 types are specialised by <jitkern/type.cuh>).
template <typename T, typename = void>
struct dtype_trait;

template <typename T>
struct dtype_trait<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static constexpr DLDataType value = {static_cast<uint8_t>(std::is_signed_v<T> ? kDLInt : kDLUInt),
                                       static_cast<uint8_t>(sizeof(T) * 8), 1};
};
template <>
struct dtype_trait<bool> {
  static constexpr DLDataType value = {kDLBool, 8, 1};
};
template <>
struct dtype_trait<float> {
  static constexpr DLDataType value = {kDLFloat, 32, 1};
};
template <>
struct dtype_trait<double> {
  static constexpr DLDataType value = {kDLFloat, 64, 1};
};

// A named function rather than operator==: tvm-ffi declares its own global operator== for
// DLDataType, and two would be ambiguous in kernels that include both.
constexpr bool dtype_equal(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

template <typename T>
constexpr bool is_type(DLDataType dtype) {
  return dtype_equal(dtype, dtype_trait<T>::value);
}

// A size or stride that must be equal wherever the symbol is used.
struct SymbolicSize {
  SymbolicSize(const char* annotation = nullptr) : m_annotation(annotation) {}  // NOLINT
  SymbolicSize(const SymbolicSize&) = delete;  // a copy would silently stop sharing the value
  SymbolicSize& operator=(const SymbolicSize&) = delete;

  bool has_value() const { return m_resolved; }
  int64_t unwrap(DebugInfo where = {}) const;
  void set_value(int64_t value) { m_value = value, m_resolved = true, m_source[0] = '\0'; }
  const char* annotation() const { return m_annotation; }
  const char* get_name() const { return m_annotation ? m_annotation : "(unnamed)"; }
  jitkern::Optional<int64_t> get_value() const { return m_resolved ? jitkern::Optional<int64_t>(m_value) : jitkern::Optional<int64_t>(); }
  // Resolves the symbol to `value`, or checks `value` against it; `prefix` and `dim` say where it came from.
  void verify(int64_t value, const char* prefix = "", int64_t dim = -1, DebugInfo where = {}) {
    if (!m_resolved) return set_value(value);
    RuntimeCheck(where, m_value == value, prefix, ": size mismatch for ", get_name(), " at dim ", dim, ": expected ", m_value, " but got ", value);
  }

  // Library-private state, public to keep the type a simple aggregate-like struct.
  const char* m_annotation;
  int64_t m_value = 0;
  bool m_resolved = false;
  // Where a verify() resolved the value, for messages: the tensor's name (a copy: the caller's string may be a
  // temporary), "shape" or "stride", and the dimension.
  char m_source[32] = {};
  const char* m_source_kind = nullptr;
  int64_t m_source_dim = -1;
};

// A dtype that must be equal wherever the symbol is used, optionally restricted to options.
struct SymbolicDType {
  SymbolicDType() = default;
  SymbolicDType(const SymbolicDType&) = delete;
  SymbolicDType& operator=(const SymbolicDType&) = delete;

  bool has_value() const { return m_resolved; }
  DLDataType unwrap(DebugInfo where = {}) const;
  void set_value(DLDataType value) { m_value = value, m_resolved = true; }
  jitkern::Optional<DLDataType> get_value() const { return m_resolved ? jitkern::Optional<DLDataType>(m_value) : jitkern::Optional<DLDataType>(); }
  template <typename T>
  bool is_type() const {
    return m_resolved && dtype_equal(m_value, dtype_trait<T>::value);
  }
  // The allowed dtypes; `options` (anything with data() and size(), e.g. a span) must outlive the symbol.
  template <typename Span>
  void set_options(const Span& options) {
    m_options = options.data(), m_num_options = options.size();
  }
  template <typename... Ts>
  void set_options();  // defined after detail::kDTypeList
  // Resolves the symbol to `value` (one of its options), or checks `value` against it.
  void verify(DLDataType value, DebugInfo where = {}) {
    bool allowed = m_options == nullptr;
    for (std::size_t i = 0; i < m_num_options; ++i) allowed = allowed || dtype_equal(m_options[i], value);
    RuntimeCheck(where, allowed, "SymbolicDType: dtype ", value, " is not one of the options");
    if (!m_resolved) return set_value(value);
    RuntimeCheck(where, dtype_equal(m_value, value), "SymbolicDType: dtype ", value, " differs from the resolved ", m_value);
  }

  const DLDataType* m_options = nullptr;  // static storage; null = any dtype
  std::size_t m_num_options = 0;
  DLDataType m_value = {};
  bool m_resolved = false;
};

// A device (type and index) that must be equal wherever the symbol is used.
struct SymbolicDevice {
  SymbolicDevice() = default;
  SymbolicDevice(const SymbolicDevice&) = delete;
  SymbolicDevice& operator=(const SymbolicDevice&) = delete;

  bool has_value() const { return m_resolved; }
  DLDevice unwrap(DebugInfo where = {}) const;
  void set_value(DLDevice value) { m_value = value, m_resolved = true; }
  jitkern::Optional<DLDevice> get_value() const { return m_resolved ? jitkern::Optional<DLDevice>(m_value) : jitkern::Optional<DLDevice>(); }
  template <typename Span>
  void set_options(const Span& device_types) {
    m_allowed_mask = 0;
    for (std::size_t i = 0; i < device_types.size(); ++i) m_allowed_mask |= uint64_t{1} << static_cast<unsigned>(device_types.data()[i]);
  }
  template <DLDeviceType... Codes>
  void set_options();  // defined after detail::kDeviceMask
  // Resolves the symbol to `value` (of an allowed type), or checks `value` against it.
  void verify(DLDevice value, DebugInfo where = {}) {
    RuntimeCheck(where, m_allowed_mask == 0 || (m_allowed_mask >> static_cast<unsigned>(value.device_type) & 1),
                 "SymbolicDevice: device ", value, " is not of the allowed types");
    if (!m_resolved) return set_value(value);
    RuntimeCheck(where, m_value.device_type == value.device_type && m_value.device_id == value.device_id, "SymbolicDevice: device ",
                 value, " differs from the resolved ", m_value);
  }

  uint64_t m_allowed_mask = 0;  // bit per DLDeviceType; 0 = any device
  DLDevice m_value = {};
  bool m_resolved = false;
};

// One entry of a shape or stride pattern: a literal (-1 = anything) or a symbol.
struct SizeRef {
  SizeRef(int64_t literal) : m_literal(literal) {}  // NOLINT
  SizeRef(int literal) : m_literal(literal) {}      // NOLINT
  SizeRef(SymbolicSize& symbol) : m_symbol(&symbol) {}  // NOLINT
  SymbolicSize* m_symbol = nullptr;
  int64_t m_literal = -1;
};

namespace detail {
template <typename... Ts>
inline constexpr DLDataType kDTypeList[] = {dtype_trait<Ts>::value...};

template <DLDeviceType... Codes>
inline constexpr uint64_t kDeviceMask = ((uint64_t{1} << static_cast<unsigned>(Codes)) | ... | 0);

}  // namespace detail

template <typename... Ts>
void SymbolicDType::set_options() {
  m_options = detail::kDTypeList<Ts...>, m_num_options = sizeof...(Ts);
}
template <DLDeviceType... Codes>
void SymbolicDevice::set_options() {
  m_allowed_mask = detail::kDeviceMask<Codes...>;
}

// with_dtype(dtype_v<Ts...>) and with_device(device_v<Codes...>): the value forms of
// with_dtype<Ts...>() and with_device<Codes...>(), which need no `.template` inside templates.
template <typename... Ts>
struct DTypeList {};
template <typename... Ts>
inline constexpr DTypeList<Ts...> dtype_v{};
template <DLDeviceType... Codes>
struct DeviceList {};
template <DLDeviceType... Codes>
inline constexpr DeviceList<Codes...> device_v{};
}  // namespace host

#include <jitkern/detail/matcher.h>  // MatcherSpec and the library's matching entry point

namespace host {

// A temporary expression: build it, chain verify() calls, let it die. Do not store it (it refers
// to the initializer lists of the full expression).
class TensorMatcher {
 public:
  explicit TensorMatcher(std::initializer_list<SizeRef> shape)
      : m_spec{shape.begin(), shape.size(), nullptr, 0, nullptr, 0, nullptr, 0, nullptr} {}
  TensorMatcher(const TensorMatcher&) = delete;
  TensorMatcher& operator=(const TensorMatcher&) = delete;

  TensorMatcher&& with_strides(std::initializer_list<SizeRef> strides) && {
    m_spec.strides = strides.begin(), m_spec.num_strides = strides.size();
    return static_cast<TensorMatcher&&>(*this);
  }

  // with_dtype<Ts...>(): dtype must be one of Ts. With a symbol: also consistent across tensors;
  // the symbol adopts Ts as its options when it has none and keeps its own options otherwise.
  template <typename... Ts>
  TensorMatcher&& with_dtype() && {
    static_assert(sizeof...(Ts) > 0, "with_dtype<Ts...>() needs at least one type (or a SymbolicDType)");
    m_spec.dtypes = detail::kDTypeList<Ts...>, m_spec.num_dtypes = sizeof...(Ts);
    return static_cast<TensorMatcher&&>(*this);
  }
  template <typename... Ts>
  TensorMatcher&& with_dtype(SymbolicDType& symbol) && {
    if constexpr (sizeof...(Ts) > 0) {
      m_spec.dtypes = detail::kDTypeList<Ts...>, m_spec.num_dtypes = sizeof...(Ts);
      if (symbol.m_options == nullptr) symbol.m_options = detail::kDTypeList<Ts...>, symbol.m_num_options = sizeof...(Ts);
    }
    m_spec.dtype_symbol = &symbol;
    return static_cast<TensorMatcher&&>(*this);
  }

  template <typename... Ts>
  TensorMatcher&& with_dtype(DTypeList<Ts...>) && {
    return static_cast<TensorMatcher&&>(*this).template with_dtype<Ts...>();
  }
  template <typename... Ts>
  TensorMatcher&& with_dtype(DTypeList<Ts...>, SymbolicDType& symbol) && {
    return static_cast<TensorMatcher&&>(*this).template with_dtype<Ts...>(symbol);
  }

  template <DLDeviceType... Codes>
  TensorMatcher&& with_device() && {
    static_assert(sizeof...(Codes) > 0, "with_device<Codes...>() needs at least one device type (or a SymbolicDevice)");
    m_spec.device_mask = detail::kDeviceMask<Codes...>;
    return static_cast<TensorMatcher&&>(*this);
  }
  template <DLDeviceType... Codes>
  TensorMatcher&& with_device(SymbolicDevice& symbol) && {
    if constexpr (sizeof...(Codes) > 0) {
      m_spec.device_mask = detail::kDeviceMask<Codes...>;
      if (symbol.m_allowed_mask == 0) symbol.m_allowed_mask = detail::kDeviceMask<Codes...>;
    }
    m_spec.device_symbol = &symbol;
    return static_cast<TensorMatcher&&>(*this);
  }
  template <DLDeviceType... Codes>
  TensorMatcher&& with_device(DeviceList<Codes...>) && {
    return static_cast<TensorMatcher&&>(*this).template with_device<Codes...>();
  }
  template <DLDeviceType... Codes>
  TensorMatcher&& with_device(DeviceList<Codes...>, SymbolicDevice& symbol) && {
    return static_cast<TensorMatcher&&>(*this).template with_device<Codes...>(symbol);
  }

  // `name`: the argument's name, for the error message (e.g. "input").
  const TensorMatcher&& verify(const DLTensor* tensor, const char* name = nullptr, DebugInfo where = {}) const&& {
    detail::match_tensor(m_spec, tensor, name, where);
    return static_cast<const TensorMatcher&&>(*this);
  }
  const TensorMatcher&& verify(const jitkern::TensorView& view, const char* name = nullptr, DebugInfo where = {}) const&& {
    detail::match_tensor(m_spec, view.get(), name, where);
    return static_cast<const TensorMatcher&&>(*this);
  }
  // Any other view type with the tvm::ffi::TensorView accessors (e.g. tvm::ffi::TensorView).
  template <typename View>
    requires requires(const View& v) {
      v.data_ptr();
      v.shape().data();
      v.ndim();
      v.dtype();
      v.device();
      v.byte_offset();
      v.strides();
    }
  const TensorMatcher&& verify(const View& view, const char* name = nullptr, DebugInfo where = {}) const&& {
    DLTensor t{};
    t.data = view.data_ptr();
    t.device = view.device();
    t.ndim = view.ndim();
    t.dtype = view.dtype();
    t.shape = const_cast<int64_t*>(view.shape().data());
    t.strides = view.ndim() > 0 ? const_cast<int64_t*>(view.strides().data()) : nullptr;
    t.byte_offset = view.byte_offset();
    detail::match_tensor(m_spec, &t, name, where);
    return static_cast<const TensorMatcher&&>(*this);
  }

 private:
  detail::MatcherSpec m_spec;
};

// `rows` written rows of `width` elements, `stride` elements apart, share no element: a stride below the width
// (0: one row seen many times) would let two rows write the same elements. `name`: the argument's name.
inline void check_rows_disjoint(int64_t rows, int64_t width, int64_t stride, const char* name) {
  if (rows > 1) RuntimeCheck(stride >= width, name, " rows overlap: row stride ", stride, " is smaller than the row width ", width);
}

// Two tensors an op writes in one launch share no byte: refuses one tensor passed twice, and views of one buffer that
// reach into each other (q and k slices of a qkv row that overlap), whose elements two threads would write at once.
// Views that interleave without sharing a byte (K and V pages of one buffer) pass.
inline void check_distinct(const jitkern::TensorView& a, const jitkern::TensorView& b, const char* a_name, const char* b_name) {
  RuntimeCheck(detail::tensors_overlap(a.get(), b.get()) != 1, a_name, " and ", b_name, " must not overlap: they share memory (", a_name,
               " starts at ", a.data_ptr(), ", ", b_name, " at ", b.data_ptr(), ")");
}

// A tensor's sizes or strides, in elements (named at calls in templates, where nvcc's host pass re-emits a bare
// braced argument as a statement expression).
using Extents = std::initializer_list<int64_t>;

// A written tensor's elements are distinct: taken from the smallest stride up, each dimension of more than one
// element lies at least as far apart as the dimensions inside it reach (as in every dense, padded or transposed
// layout). Refuses 0 strides (broadcasts) and rows, heads or columns that overlap. At most 8 dimensions.
inline void check_disjoint(Extents sizes, Extents strides, const char* name) {
  constexpr std::size_t kMaxDims = 8;
  const std::size_t n = sizes.size();
  RuntimeCheck(n == strides.size() && n <= kMaxDims, "check_disjoint(", name, "): as many sizes as strides, at most ", kMaxDims);
  for (int64_t size : sizes)
    if (size == 0) return;
  bool taken[kMaxDims] = {};
  int64_t reach = 1;  // the elements the dimensions taken so far span
  for (std::size_t round = 0; round < n; ++round) {
    std::size_t k = n;
    for (std::size_t i = 0; i < n; ++i)
      if (!taken[i] && sizes.begin()[i] > 1 && (k == n || strides.begin()[i] < strides.begin()[k])) k = i;
    if (k == n) return;
    taken[k] = true;
    const int64_t size = sizes.begin()[k], stride = strides.begin()[k];
    RuntimeCheck(stride >= reach, name, " overlaps itself: its dimension ", k, " (", size, " elements, stride ", stride, ") is closer than the ",
                 reach, " elements the dimensions inside it span");
    // Past INT64_MAX no further stride can clear it: saturate rather than wrap.
    reach = stride > (INT64_MAX - reach) / (size - 1) ? INT64_MAX : reach + (size - 1) * stride;
  }
}

}  // namespace host
#endif  // __CUDACC_RTC__
