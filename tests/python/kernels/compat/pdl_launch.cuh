// Reference-style PDL pair on an explicit stream: SGL_DEVICE, SGLANG_LDG, PDLWaitPrimary/PDLTriggerSecondary,
// LaunchKernel(stream).enable_pdl, resolve_device, RuntimeDeviceCheck, device::pointer::offset<T>.
#pragma once

#include <sgl_kernel/tensor.h>
#include <sgl_kernel/utils.cuh>

#include <cstdint>

namespace {

template <bool kUsePDL>
__global__ void compat_producer(float* buf, int64_t n) {
  device::PDLWaitPrimary<kUsePDL>();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) buf[i] = static_cast<float>(i);
  device::PDLTriggerSecondary<kUsePDL>();
}

// out[i] = buf[row_offset + i] * 2, reading through pointer::offset in elements and in bytes.
template <bool kUsePDL>
__global__ void compat_consumer(float* out, const void* buf, int64_t row_offset, int64_t n) {
  device::PDLWaitPrimary<kUsePDL>();
  const auto* row = static_cast<const float*>(device::pointer::offset<float>(buf, row_offset));
  const auto* same = static_cast<const float*>(device::pointer::offset(buf, row_offset * 2, row_offset * 2));
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = SGLANG_LDG(row + i) + SGLANG_LDG(same + i);
}

}  // namespace

template <bool kUsePDL>
void compat_pdl_pair(tvm::ffi::TensorView buf, tvm::ffi::TensorView out) {
  using namespace host;
  auto n = SymbolicSize{"n"};
  auto device = SymbolicDevice{};
  TensorMatcher({-1}).with_dtype<float>().with_device<kDLCUDA>(device).verify(buf);
  TensorMatcher({n}).with_dtype<float>().with_device<kDLCUDA>(device).verify(out);
  RuntimeCheck(buf.size(0) >= 2 * n.unwrap(), "buf must hold 2n elements");
  const cudaStream_t stream = LaunchKernel::resolve_device(device.unwrap());
  LaunchKernel(1, 128, stream).enable_pdl(kUsePDL)(compat_producer<kUsePDL>, static_cast<float*>(buf.data_ptr()), buf.size(0));
  LaunchKernel(1, 128, stream, 0).enable_pdl(kUsePDL)(compat_consumer<kUsePDL>, static_cast<float*>(out.data_ptr()),
                                                      static_cast<const void*>(buf.data_ptr()), n.unwrap(), n.unwrap());
  RuntimeDeviceCheck();
  RuntimeDeviceCheck(cudaGetLastError(), DebugInfo{});
}
