// Reference-style element math: the global aliases, dtype_trait<T> (self_t, packed_t, from, helpers),
// packed_t<T>, device::cast, math:: functions and constants. Per element x of T, out (float32) gets
// 12 columns: see test_compat.py::test_math_and_types for the torch reference.
#pragma once

#include <sgl_kernel/math.cuh>
#include <sgl_kernel/tensor.h>
#include <sgl_kernel/type.cuh>
#include <sgl_kernel/utils.cuh>

#include <cstdint>
#include <type_traits>

static_assert(std::is_same_v<packed_t<fp16_t>, fp16x2_t> && std::is_same_v<packed_t<bf16_t>, bf16x2_t> &&
              std::is_same_v<packed_t<fp32_t>, fp32x2_t> && std::is_same_v<dtype_trait<bf16_t>::packed_t, packed_t<bf16_t>> &&
              std::is_same_v<dtype_trait<fp16_t>::self_t, fp16_t> && sizeof(fp32x4_t) == 16 && sizeof(fp8x2_e4m3_t) == 2 &&
              sizeof(fp8x2_e5m2_t) == 2 && sizeof(fp8_e5m2_t) == 1);

template <typename T>
__global__ void compat_math(float* out, const T* in, int64_t n) {
  using namespace device;
  using Trait = dtype_trait<T>;
  const int64_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const typename Trait::self_t x = in[i];
  const T one = Trait::from(1.0f);
  const packed_t<T> pair = cast<packed_t<T>>(fp32x2_t{cast<float>(x), 2.0f});
  float* o = out + i * 12;
  o[0] = cast<float>(math::max(x, one));
  o[1] = cast<float>(math::min(x, one));
  o[2] = cast<float>(math::abs(x));
  o[3] = cast<float>(math::sqrt(math::abs(x)));
  o[4] = math::rsqrt(cast<float>(math::abs(x)) + 1.0f);
  o[5] = math::exp(cast<float>(x)) * math::loge2;      // exp(x) * ln 2
  o[6] = math::sin(cast<float>(x)) + math::cos(cast<float>(x));
  o[7] = math::log2e;
  o[8] = cast<float>(cast<fp8_e4m3_t>(cast<float>(x) * 1000.0f)) / math::FP8_E4M3_MAX;  // saturates to +-1
  o[9] = cast<fp32x2_t>(pair).x + cast<fp32x2_t>(pair).y;                             // x + 2 through the packed type
  o[10] = cast<float>(Trait::max(Trait::abs(x), one));
  o[11] = cast<float>(cast<fp8_e5m2_t>(cast<float>(x)));
}

template <typename T>
void compat_math_run(tvm::ffi::TensorView out, tvm::ffi::TensorView in) {
  using namespace host;
  auto n = SymbolicSize{"n"};
  auto device = SymbolicDevice{};
  TensorMatcher({n}).with_device<kDLCUDA>(device).with_dtype<T>().verify(in);
  TensorMatcher({n, 12}).with_dtype<float>().with_device<kDLCUDA>(device).verify(out);
  LaunchKernel(div_ceil(n.unwrap(), 128), 128, device.unwrap())(compat_math<T>, static_cast<float*>(out.data_ptr()),
                                                                static_cast<const T*>(in.data_ptr()), n.unwrap());
}
