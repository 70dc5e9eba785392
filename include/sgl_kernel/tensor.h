// <sgl_kernel/tensor.h> for kernels written against the reference framework: jitkern's TensorMatcher and
// symbols, operator== on devices, and tvm::ffi::TensorView / tvm::ffi::Optional.
//
// Those two are tvm-ffi's own classes when its <tvm/ffi/container/tensor.h> came first, or when
// SGL_KERNEL_TVM_FFI_TENSOR is defined (e.g. -DSGL_KERNEL_TVM_FFI_TENSOR for a kernel that uses more of
// tvm-ffi's C++ API). Otherwise they are jitkern's lean TensorView and Optional (the members kernels use:
// data_ptr, shape, strides, size, stride, ndim, dtype, device, numel, is_contiguous; has_value, value),
// and a later #include <tvm/ffi/container/tensor.h>, as the reference's kernels write it, adds nothing:
// parsing tvm-ffi's C++ headers costs more than the rest of a typical kernel's compile.
#pragma once

#include <jitkern/tensor.h>

#ifdef SGL_KERNEL_TVM_FFI_TENSOR
#include <tvm/ffi/container/tensor.h>
#endif
#include <jitkern/compat/tvm_ffi_lean.h>  // adds nothing when tvm-ffi's header came first

#include <jitkern/export.h>

namespace host {
inline bool operator==(DLDevice a, DLDevice b) { return a.device_type == b.device_type && a.device_id == b.device_id; }
}  // namespace host
