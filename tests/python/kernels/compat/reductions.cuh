// Reference-style reductions: warp::reduce_sum/reduce_max (with warp::kFullMask and device::kFullMask),
// cta::reduce_max(v, smem) and atomic::max. One block per row: out[row] = {sum, warp 0's max, row max}; global_max = max of all.
#pragma once

#include <sgl_kernel/atomic.cuh>
#include <sgl_kernel/cta.cuh>
#include <sgl_kernel/tensor.h>
#include <sgl_kernel/utils.cuh>
#include <sgl_kernel/warp.cuh>

#include <cstdint>

__global__ void compat_row_reductions(float* out, float* global_max, const float* in, int64_t cols) {
  using namespace device;
  __shared__ float smem[kWarpThreads];
  __shared__ float sums[kWarpThreads];
  const float* row = in + blockIdx.x * cols;
  float sum = 0.0f, mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += row[c], mx = fmaxf(mx, row[c]);
  sum = warp::reduce_sum(sum, warp::kFullMask);
  const float warp_max = warp::reduce_max(mx, kFullMask);
  if (threadIdx.x % kWarpThreads == 0) sums[threadIdx.x / kWarpThreads] = sum;
  cta::reduce_max(mx, smem, -INFINITY);
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (unsigned w = 0; w < blockDim.x / kWarpThreads; ++w) total += sums[w];
    out[blockIdx.x * 3 + 0] = total;
    out[blockIdx.x * 3 + 1] = warp_max;
    out[blockIdx.x * 3 + 2] = smem[0];
    atomic::max(global_max, smem[0]);
  }
}

void compat_row_reductions_run(tvm::ffi::TensorView out, tvm::ffi::TensorView global_max, tvm::ffi::TensorView in) {
  using namespace host;
  auto rows = SymbolicSize{"rows"}, cols = SymbolicSize{"cols"};
  auto device = SymbolicDevice{};
  device.set_options<kDLCUDA>();
  TensorMatcher({rows, cols}).with_dtype<float>().with_device(device).verify(in);
  TensorMatcher({rows, 3}).with_dtype<float>().with_device(device).verify(out);
  TensorMatcher({1}).with_dtype<float>().with_device(device).verify(global_max);
  LaunchKernel(rows.unwrap(), 256, device.unwrap())(compat_row_reductions, static_cast<float*>(out.data_ptr()),
                                                    static_cast<float*>(global_max.data_ptr()), static_cast<const float*>(in.data_ptr()),
                                                    cols.unwrap());
}
