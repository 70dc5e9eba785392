// Test kernel for the quantizers' division shortcuts (tests/python/ops/test_quant.py): every operand of
// their range against the IEEE division they stand for.
#pragma once

#include <jitkern/impl/quant.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/utils.cuh>

#include <cstdint>

namespace {

// Over every positive finite float m: counts[0] / counts[1]: normal_scale_for<Q>(m, eps) != scale_for<Q>(m, eps)
// with eps = kNormalScaleEps<Q>, fp8 / int8; counts[2]: normal_reciprocal(m) != 1.0f / m for m in [2^-64, 2^126];
// counts[3]: the floats looked at.
__global__ void normal_math_mismatches_kernel(unsigned long long* counts) {
  namespace quant = device::quant;
  unsigned long long bad[3] = {0, 0, 0}, seen = 0;
  const auto differs = [](float a, float b) { return __float_as_uint(a) != __float_as_uint(b); };
  for (uint32_t bits = blockIdx.x * blockDim.x + threadIdx.x; bits < 0x7f800000u; bits += gridDim.x * blockDim.x) {
    const float m = __uint_as_float(bits);
    constexpr float kFp8Eps = quant::kNormalScaleEps<fp8_e4m3_t>, kInt8Eps = quant::kNormalScaleEps<int8_t>;
    bad[0] += differs(quant::normal_scale_for<fp8_e4m3_t>(m, kFp8Eps), quant::scale_for<fp8_e4m3_t>(m, kFp8Eps));
    bad[1] += differs(quant::normal_scale_for<int8_t>(m, kInt8Eps), quant::scale_for<int8_t>(m, kInt8Eps));
    if (m >= 0x1p-64f && m <= 0x1p126f) bad[2] += differs(quant::normal_reciprocal(m), 1.0f / m);
    ++seen;
  }
  for (int k = 0; k < 3; ++k) atomicAdd(counts + k, bad[k]);
  atomicAdd(counts + 3, seen);
}

void normal_math_mismatches(jitkern::TensorView counts) {
  using namespace host;
  TensorMatcher({4}).with_dtype<int64_t>().with_device<kDLCUDA>().verify(counts);
  RuntimeDeviceCheck(cudaMemsetAsync(counts.data_ptr(), 0, 4 * sizeof(int64_t), LaunchKernel::resolve_device(counts.device())));
  LaunchKernel(1024, 256, counts.device())(normal_math_mismatches_kernel, static_cast<unsigned long long*>(counts.data_ptr()));
}

}  // namespace
