// Exports through jitkern's C-ABI export layer for kernels of the reference framework (SGLang) compiled
// with <jitkern/compat/tvm_ffi_lean.h>: included after the kernel files, it makes the names of namespace
// sglang (where the reference's kernels live) visible to the JITKERN_EXPORT lines jitkern generates, and
// lets exported functions take strings as the reference's do (std::string, std::string_view).
#pragma once

#include <jitkern/export.h>  // before the using-directive: jitkern's own code never sees sglang's names

#include <string>
#include <string_view>

namespace jitkern::ffi {
namespace sglang_compat {
// The characters of a string argument, in any of the forms tvm-ffi passes one.
inline bool string_view_of(const TVMFFIAny& a, std::string_view* out) {
  const TVMFFIByteArray* bytes = nullptr;
  switch (a.type_index) {
    case kTVMFFIRawStr: *out = a.v_c_str; return true;
    case kTVMFFISmallStr: *out = std::string_view(a.v_bytes, a.small_str_len); return true;
    case kTVMFFIByteArrayPtr: bytes = static_cast<const TVMFFIByteArray*>(a.v_ptr); break;
    case kTVMFFIStr:  // { TVMFFIObject, TVMFFIByteArray }
      bytes = reinterpret_cast<const TVMFFIByteArray*>(reinterpret_cast<const char*>(a.v_obj) + sizeof(TVMFFIObject));
      break;
    default: return false;
  }
  *out = std::string_view(bytes->data, bytes->size);
  return true;
}

template <typename S>
struct StringCaster {
  static constexpr const char* kExpected = "a string";
  static bool cast(const TVMFFIAny& a, Slot<S>* out) {
    std::string_view s;
    if (!string_view_of(a, &s)) return false;
    out->emplace(s);
    return true;
  }
};
}  // namespace sglang_compat

template <>
struct ArgCaster<std::string> : sglang_compat::StringCaster<std::string> {};
template <>
struct ArgCaster<std::string_view> : sglang_compat::StringCaster<std::string_view> {};  // valid while the call runs
}  // namespace jitkern::ffi

using namespace sglang;
