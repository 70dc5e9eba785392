// Reference-style RMSNorm from the impl/norm.cuh building blocks: one warp per row (kDim <= 256) or one
// CTA per row (kDim > 256), each thread loading its StorageType from the row.
#pragma once

#include <sgl_kernel/impl/norm.cuh>
#include <sgl_kernel/tensor.h>
#include <sgl_kernel/utils.cuh>

#include <cstdint>

template <typename T, int64_t kDim, bool kUseCta>
__global__ void compat_rmsnorm_kernel(T* out, const T* in, const T* weight, int64_t rows, float eps) {
  using namespace device;
  using Storage = norm::StorageType<T, kDim>;
  __shared__ float smem[norm::kSmemBufferSize];
  const int64_t row = kUseCta ? blockIdx.x : blockIdx.x * (blockDim.x / kWarpThreads) + threadIdx.x / kWarpThreads;
  const unsigned part = kUseCta ? threadIdx.x : threadIdx.x % kWarpThreads;
  if (row >= rows) return;  // whole warps (warp path) or whole CTAs (CTA path) leave together
  Storage x, w;
  x.load(static_cast<const void*>(in + row * kDim), part);
  w.load(static_cast<const void*>(weight), part);
  Storage y;
  if constexpr (kUseCta) y = norm::apply_norm_cta<kDim>(x, w, eps, smem);
  else y = norm::apply_norm_warp<kDim>(x, w, eps);
  y.store(static_cast<void*>(out + row * kDim), part);
}

template <typename T, int64_t kDim>
void compat_rmsnorm(tvm::ffi::TensorView out, tvm::ffi::TensorView in, tvm::ffi::TensorView weight, double eps) {
  using namespace host;
  static_assert(norm::is_config_supported<T, kDim>(), "unsupported hidden size for this dtype");
  auto rows = SymbolicSize{"rows"};
  auto device = SymbolicDevice{};
  TensorMatcher({rows, kDim}).with_device<kDLCUDA>(device).with_dtype<T>().verify(out).verify(in);
  TensorMatcher({kDim}).with_device<kDLCUDA>(device).with_dtype<T>().verify(weight);
  constexpr bool kUseCta = norm::should_use_cta<T, kDim>();
  const int64_t n = rows.unwrap();
  if constexpr (kUseCta) {
    LaunchKernel(n, norm::get_cta_threads<T, kDim>(), device.unwrap())(compat_rmsnorm_kernel<T, kDim, true>, static_cast<T*>(out.data_ptr()),
                                                                        static_cast<const T*>(in.data_ptr()),
                                                                        static_cast<const T*>(weight.data_ptr()), n, static_cast<float>(eps));
  } else {
    constexpr int kRowsPerBlock = 4;
    LaunchKernel(div_ceil(n, kRowsPerBlock), kRowsPerBlock * 32, device.unwrap())(
        compat_rmsnorm_kernel<T, kDim, false>, static_cast<T*>(out.data_ptr()), static_cast<const T*>(in.data_ptr()),
        static_cast<const T*>(weight.data_ptr()), n, static_cast<float>(eps));
  }
}
