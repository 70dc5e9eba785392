// host::RowOperands: the operands of a row-wise op, an [rows, width] input of T and its [rows, width]
// output, both with strided rows (the last dimension contiguous), and the widest vector they allow;
// shared by the quantization and gated-activation families.
#pragma once

#ifndef __CUDACC_RTC__  // host code
#include <jitkern/utils.cuh>
#include <jitkern/vec.cuh>

#include <cstdint>

namespace host {

template <typename T>
struct RowOperands {
  const T* in;
  void* out;
  int out_bytes;  // bytes of an output element
  int64_t rows, width, in_stride, out_stride;
  DLDevice device;

  // vec elements per access where the width, both base pointers and both row strides allow, else 1.
  int vector_width(int vec) const {
    return host::vector_width(vec, width, {in, {out, out_bytes}}, {rows > 1 ? in_stride : 0, rows > 1 ? out_stride : 0});
  }
  // Both tensors are one contiguous block (they may then be seen as one row).
  bool contiguous() const { return rows <= 1 || (in_stride == width && out_stride == width); }
};

}  // namespace host
#endif  // __CUDACC_RTC__
