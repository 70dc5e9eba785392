// Which tvm::ffi::TensorView a module gets from <sgl_kernel/tensor.h>: jitkern's lean one unless tvm-ffi's
// tensor header (-DTVM_HEADER_FIRST) or its optional header (-DTVM_OPTIONAL_FIRST) came first or
// SGL_KERNEL_TVM_FFI_TENSOR is defined. Host code only.
#pragma once

#ifdef TVM_HEADER_FIRST
#include <tvm/ffi/container/tensor.h>
#endif
#ifdef TVM_OPTIONAL_FIRST
#include <tvm/ffi/optional.h>
#endif
#include <sgl_kernel/tensor.h>
// After <sgl_kernel/tensor.h>, as the reference's kernels write them (no "Optional" declared twice).
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/optional.h>

#include <cstdint>
#include <type_traits>

// 1000 when the view is jitkern's, plus 10 * x's rank and the rank of y (0 for None).
inline int64_t view_kind(tvm::ffi::TensorView x, tvm::ffi::Optional<tvm::ffi::TensorView> y) {
  constexpr bool lean = std::is_base_of_v<jitkern::TensorView, tvm::ffi::TensorView>;
  return lean * 1000 + x.ndim() * 10 + (y.has_value() ? y.value().ndim() : 0);
}
