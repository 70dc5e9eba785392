// Host-side essentials for kernel authors: RuntimeCheck, Panic, DebugInfo, irange, min, max, div_ceil,
// pointer::offset, dtype_bytes.
//
// Kept deliberately lean (no <string>, <sstream>, <ranges>): every JIT translation unit includes
// it, and header parsing is what dominates nvcc's compile time. Message formatting and exception
// construction live in the precompiled runtime library (src/runtime/diagnostics.cc).
#pragma once

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles device code only

#include <dlpack/dlpack.h>
#include <jitkern/source_location.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace host {

// What a failure is, as Python sees it: RuntimeError (a CUDA or internal failure, host::Panic),
// TypeError (an argument of the wrong dtype or kind), ValueError (a wrong shape, stride or value,
// host::RuntimeCheck and most TensorMatcher failures), IndexError (an index out of a buffer's range)
// or TimeoutError (a wait that gave up); host::Raise throws any of them.
enum class ErrorKind : uint8_t { kRuntime, kType, kValue, kIndex, kTimeout };

// The caller's file:line:function, captured by a defaulted argument.
struct DebugInfo : std::source_location {
  DebugInfo(std::source_location loc = std::source_location::current()) : std::source_location(loc) {}
};

}  // namespace host

#include <jitkern/detail/format.h>  // FmtArg and the library's formatting entry points

namespace host {

// Throws host::PanicError (a std::runtime_error, see <jitkern/error.h>; RuntimeError in Python) whose
// message is the concatenation of `args`, prefixed by the caller's location.
template <typename... Args>
struct Panic {
  [[noreturn]] explicit Panic(Args&&... args, DebugInfo where = {}) {
    detail::panic_with(where, "Panic", args...);
  }
};
template <typename... Args>
Panic(Args&&...) -> Panic<Args...>;

// RuntimeCheck(cond, args...) or RuntimeCheck(location, cond, args...): throws like Panic when
// `cond` is false, as a ValueError in Python (it checks the values a function was called with).
// The message arguments are only packed on failure.
template <typename... Args>
struct RuntimeCheck {
  template <typename Cond>
  explicit RuntimeCheck(Cond&& cond, Args&&... args, DebugInfo where = {}) {
    if (static_cast<bool>(cond)) [[likely]]
      return;
    detail::fail_with(where, "RuntimeCheck failed", ErrorKind::kValue, args...);
  }
};
template <typename... Args>
struct RuntimeCheck<DebugInfo, Args...> {
  template <typename Cond>
  explicit RuntimeCheck(DebugInfo where, Cond&& cond, Args&&... args) {
    if (static_cast<bool>(cond)) [[likely]]
      return;
    detail::fail_with(where, "RuntimeCheck failed", ErrorKind::kValue, args...);
  }
};
template <typename Cond, typename... Args>
RuntimeCheck(Cond&&, Args&&...) -> RuntimeCheck<Args...>;
template <typename Cond, typename... Args>
RuntimeCheck(DebugInfo, Cond&&, Args&&...) -> RuntimeCheck<DebugInfo, Args...>;

// Throws host::PanicError of `kind` whose message is the concatenation of `args`, prefixed by the
// caller's location: for the kinds RuntimeCheck and Panic do not cover (ErrorKind::kIndex, kTimeout).
template <typename... Args>
struct Raise {
  [[noreturn]] explicit Raise(ErrorKind kind, Args&&... args, DebugInfo where = {}) {
    detail::fail_with(where, "Error", kind, args...);
  }
};
template <typename... Args>
Raise(ErrorKind, Args&&...) -> Raise<Args...>;

// Python-like integer range [start, end) usable in range-for; a tiny replacement for
// std::views::iota so that kernels need not include <ranges>.
template <typename T>
class IntegerRange {
  static_assert(std::is_integral_v<T>, "irange needs an integral type");

 public:
  struct iterator {
    T value;
    constexpr T operator*() const { return value; }
    constexpr iterator& operator++() { return ++value, *this; }
    constexpr bool operator!=(const iterator& other) const { return value != other.value; }
    constexpr bool operator==(const iterator& other) const { return value == other.value; }
  };
  constexpr IntegerRange(T start, T end) : m_start(start), m_end(end < start ? start : end) {}
  constexpr iterator begin() const { return {m_start}; }
  constexpr iterator end() const { return {m_end}; }
  constexpr T size() const { return m_end - m_start; }

 private:
  T m_start, m_end;
};

template <typename T>
constexpr auto irange(T end) -> IntegerRange<T> {
  return {T{0}, end};
}
template <typename T, typename U>
constexpr auto irange(T start, U end) -> IntegerRange<std::common_type_t<T, U>> {
  using C = std::common_type_t<T, U>;
  return {static_cast<C>(start), static_cast<C>(end)};
}

// The lesser and the greater of two values of one type (std::min / std::max, the type given where the
// arguments' differ): <algorithm>, their standard header, cost each pass of a module 0.06-0.15 s of parsing.
template <typename T>
constexpr T min(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
constexpr T max(T a, T b) {
  return a < b ? b : a;
}

// ceil(a / b) for non-negative a and positive b.
template <typename T, typename U>
constexpr auto div_ceil(T a, U b) -> std::common_type_t<T, U> {
  static_assert(std::is_integral_v<T> && std::is_integral_v<U>, "div_ceil needs integral arguments");
  using C = std::common_type_t<T, U>;
  return (static_cast<C>(a) + static_cast<C>(b) - 1) / static_cast<C>(b);
}

namespace pointer {
// Byte offsets on untyped pointers only: typed pointer arithmetic scales by the element size,
// which is the classic source of off-by-sizeof bugs in cache-transfer kernels.
template <typename... U>
inline auto offset(void* ptr, U... bytes) -> void* {
  static_assert((std::is_integral_v<U> && ...), "pointer::offset takes integral byte offsets");
  return static_cast<char*>(ptr) + (std::ptrdiff_t{0} + ... + static_cast<std::ptrdiff_t>(bytes));
}
template <typename... U>
inline auto offset(const void* ptr, U... bytes) -> const void* {
  static_assert((std::is_integral_v<U> && ...), "pointer::offset takes integral byte offsets");
  return static_cast<const char*>(ptr) + (std::ptrdiff_t{0} + ... + static_cast<std::ptrdiff_t>(bytes));
}
}  // namespace pointer

// Bytes per element of a DLPack dtype (sub-byte types round up).
constexpr auto dtype_bytes(DLDataType dtype) -> std::size_t {
  return (static_cast<std::size_t>(dtype.bits) * dtype.lanes + 7) / 8;
}

}  // namespace host
#endif  // __CUDACC_RTC__
