// Internals of host::Panic / RuntimeCheck: FmtArg packs message arguments in the header, the runtime
// library formats them (src/runtime/diagnostics.cc). Not for kernel authors; include <jitkern/utils.h>.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace host {
enum class ErrorKind : uint8_t;
struct DebugInfo;

namespace detail {

// A type-erased message fragment: the header only packs arguments, the library formats them.
struct FmtArg {
  enum Kind : uint8_t { kInt, kUInt, kFloat, kBool, kChar, kStr, kPtr, kDType, kDevice };
  Kind kind;
  std::size_t len;  // for kStr
  union {
    long long i;
    unsigned long long u;
    double f;
    const char* s;
    const void* p;
    DLDataType dtype;
    DLDevice device;
  };

  template <typename T>
  FmtArg(const T& v) {  // NOLINT(google-explicit-constructor)
    using D = std::decay_t<T>;
    if constexpr (std::is_same_v<D, bool>) {
      kind = kBool, u = v;
    } else if constexpr (std::is_same_v<D, char>) {
      kind = kChar, i = v;
    } else if constexpr (std::is_enum_v<D>) {
      kind = kInt, i = static_cast<long long>(v);
    } else if constexpr (std::is_integral_v<D> && std::is_signed_v<D>) {
      kind = kInt, i = v;
    } else if constexpr (std::is_integral_v<D>) {
      kind = kUInt, u = v;
    } else if constexpr (std::is_floating_point_v<D>) {
      kind = kFloat, f = static_cast<double>(v);
    } else if constexpr (std::is_same_v<D, const char*> || std::is_same_v<D, char*>) {
      kind = kStr, s = v, len = static_cast<std::size_t>(-1);
    } else if constexpr (std::is_same_v<D, DLDataType>) {
      kind = kDType, dtype = v;
    } else if constexpr (std::is_same_v<D, DLDevice>) {
      kind = kDevice, device = v;
    } else if constexpr (std::is_pointer_v<D>) {
      kind = kPtr, p = static_cast<const void*>(v);
    } else if constexpr (requires { v.data(); v.size(); }) {  // std::string, std::string_view
      kind = kStr, s = v.data(), len = v.size();
    } else {
      static_assert(sizeof(T) == 0, "host::RuntimeCheck/Panic: this argument type cannot be printed; "
                                    "pass a number, string, pointer, DLDataType or DLDevice");
    }
  }
};

[[noreturn]] void fail(const DebugInfo& where, const char* what, ErrorKind kind, const FmtArg* args, std::size_t n);

template <typename... Args>
[[noreturn]] inline void fail_with(const DebugInfo& where, const char* what, ErrorKind kind, const Args&... args) {
  if constexpr (sizeof...(Args) == 0) {
    fail(where, what, kind, nullptr, 0);
  } else {
    const FmtArg packed[] = {FmtArg(args)...};
    fail(where, what, kind, packed, sizeof...(Args));
  }
}

template <typename... Args>
[[noreturn]] inline void panic_with(const DebugInfo& where, const char* what, const Args&... args) {
  fail_with(where, what, ErrorKind::kRuntime, args...);
}

}  // namespace detail

}  // namespace host
