// <sgl_kernel/tensor.h> for kernels written against the reference framework: jitkern's TensorMatcher and
// symbols, tvm::ffi::TensorView (tvm-ffi's own header), and operator== on devices.
#pragma once

#include <jitkern/export.h>
#include <jitkern/tensor.h>
#include <tvm/ffi/container/tensor.h>

namespace host {
inline bool operator==(DLDevice a, DLDevice b) { return a.device_type == b.device_type && a.device_id == b.device_id; }
}  // namespace host
