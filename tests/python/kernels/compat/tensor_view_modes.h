// Which tvm::ffi::TensorView a module gets from <sgl_kernel/tensor.h>: jitkern's lean one unless tvm-ffi's
// header came first (-DTVM_HEADER_FIRST) or SGL_KERNEL_TVM_FFI_TENSOR is defined. Host code only.
#pragma once

#ifdef TVM_HEADER_FIRST
#include <tvm/ffi/container/tensor.h>
#endif
#include <sgl_kernel/tensor.h>
#include <tvm/ffi/container/tensor.h>  // after <sgl_kernel/tensor.h>, as the reference's kernels write it

#include <cstdint>
#include <type_traits>

// 1000 when the view is jitkern's, plus 10 * x's rank and the rank of y (0 for None).
inline int64_t view_kind(tvm::ffi::TensorView x, tvm::ffi::Optional<tvm::ffi::TensorView> y) {
  constexpr bool lean = std::is_same_v<tvm::ffi::TensorView, jitkern::TensorView>;
  return lean * 1000 + x.ndim() * 10 + (y.has_value() ? y.value().ndim() : 0);
}
