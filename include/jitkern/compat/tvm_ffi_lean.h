// tvm::ffi::TensorView and tvm::ffi::Optional as jitkern's lean classes, for kernels written against
// tvm-ffi's C++ tensor header that use nothing else of it: parsing tvm-ffi's C++ headers costs more
// than the rest of a typical kernel's compile. Defines the include guards of tvm-ffi's tensor, dtype
// and optional headers, so that a later #include of them adds nothing, and gives DLDataType the
// comparisons and printing those headers give. A translation unit that needs more of tvm-ffi includes
// its headers before this one (this header then adds nothing).
#pragma once

#include <dlpack/dlpack.h>
#include <jitkern/optional.h>
#include <jitkern/tensor_view.h>

#include <ostream>

#if !defined(TVM_FFI_CONTAINER_TENSOR_H_) && !defined(TVM_FFI_DTYPE_H_) && !defined(TVM_FFI_OPTIONAL_H_)
#define TVM_FFI_CONTAINER_TENSOR_H_
#define TVM_FFI_DTYPE_H_
#define TVM_FFI_OPTIONAL_H_
#define JITKERN_TVM_FFI_LEAN 1

namespace jitkern::compat {
// jitkern's view with the spellings tvm-ffi's view adds (kernels written against tvm-ffi call them); a
// class of its own, so the export glue's casters for tvm::ffi::TensorView (<jitkern/export.h>) apply.
class TvmTensorView : public ::jitkern::TensorView {
 public:
  using ::jitkern::TensorView::TensorView;
  constexpr TvmTensorView(const ::jitkern::TensorView& view) : ::jitkern::TensorView(view) {}  // NOLINT(google-explicit-constructor)
  bool IsContiguous() const { return is_contiguous(); }
  IntArrayView sizes() const { return shape(); }
};
}  // namespace jitkern::compat

namespace tvm::ffi {
using TensorView = ::jitkern::compat::TvmTensorView;
template <typename T>
using Optional = ::jitkern::Optional<T>;
}  // namespace tvm::ffi

// In the root namespace, where tvm-ffi's dtype header puts them.
inline bool operator==(const DLDataType& a, const DLDataType& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}
inline bool operator!=(const DLDataType& a, const DLDataType& b) { return !(a == b); }
// tvm-ffi's spelling ("float16", "bfloat16", "int32", "float8_e4m3fn", "float32x4"), for messages.
inline std::ostream& operator<<(std::ostream& os, DLDataType t) {
  switch (t.code) {
    case kDLInt: os << "int" << int(t.bits); break;
    case kDLUInt: os << "uint" << int(t.bits); break;
    case kDLFloat: os << "float" << int(t.bits); break;
    case kDLBfloat: os << "bfloat" << int(t.bits); break;
    case kDLBool: os << "bool"; break;
    case kDLFloat8_e4m3fn: os << "float8_e4m3fn"; break;
    case kDLFloat8_e5m2: os << "float8_e5m2"; break;
    case kDLFloat8_e8m0fnu: os << "float8_e8m0fnu"; break;
    case kDLFloat4_e2m1fn: os << "float4_e2m1fn"; break;
    default: os << "dtype(code=" << int(t.code) << ", bits=" << int(t.bits) << ")"; break;
  }
  if (t.lanes != 1) os << "x" << t.lanes;
  return os;
}
#endif
