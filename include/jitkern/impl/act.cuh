// The gated activations' math, shared by the families that compute act(gate) * up (csrc/act.cuh over dense
// rows, csrc/moe_act.cuh over MoE expert layouts):
//   device::act::Silu, Gelu, GeluTanh  the activations in fp32 (apply_fast: SiLU's for 16-bit outputs);
//   device::act::widen                 a vector's values as floats;
//   device::act::gated                 act(gate) * up element by element in fp32, rounded to T (Gated<T, kVec>:
//                                      16-bit types as packed pairs, as quant's group amax reads them);
//   device::act::kActThreads, kActGroupThreads, kActGroupSize  the gated kernels' CTA widths and the
//                                      fused forms' quantization group.
#pragma once

#include <jitkern/policy.cuh>
#include <jitkern/type.cuh>
#include <jitkern/utils.cuh>
#include <jitkern/vec.cuh>

#include <cmath>
#include <type_traits>

namespace device::act {

// CTAs of the elementwise gated kernels (a vector of the output per thread) and of the group-quantizing ones.
inline constexpr int kActThreads = host::kRowKernels.elementwise_threads;
inline constexpr int kActGroupThreads = host::kRowKernels.group_threads;
// The fused forms' quantization group: 128 outputs of a row (the fp8 block-scaled GEMMs' 1x128).
inline constexpr int kActGroupSize = 128;

// The activations, in fp32. apply_fast, where an activation has one, serves 16-bit outputs: its
// few-ulp fp32 error is far below their rounding.
struct Silu {
  static JITKERN_DEVICE float apply(float x) { return x / (1.0f + expf(-x)); }
  // exp(-x) as 2^(-x log2 e) with subnormal results flushed to zero: 1 + exp(-x) is the same float, and
  // the flush saves __expf's three instructions of subnormal handling per element.
  static JITKERN_DEVICE float apply_fast(float x) {
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.44269504088896341f));
    return __fdividef(x, 1.0f + e);
  }
};
struct Gelu {
  static JITKERN_DEVICE float apply(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
};
struct GeluTanh {
  static JITKERN_DEVICE float apply(float x) {
    constexpr float kBeta = 0.79788456080286536f;  // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(kBeta * (x + 0.044715f * x * x * x)));
  }
};

// A vector's values as floats, 16-bit types a pair at a time (one instruction a value: bf16 by its bits,
// fp16 a pair per conversion).
template <typename T, int kVec>
__device__ __forceinline__ void widen(const AlignedVector<T, kVec>& v, float (&f)[kVec]) {
  if constexpr (sizeof(T) == 2 && kVec % 2 == 0) {
#pragma unroll
    for (int j = 0; j < kVec; j += 2) {
      packed_t<T> pair;
      __builtin_memcpy(&pair, &v.data[j], sizeof(pair));
      const fp32x2_t f2 = cast<fp32x2_t>(pair);
      f[j] = f2.x, f[j + 1] = f2.y;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) f[j] = cast<float>(v[j]);
  }
}

// gated's result: kVec values of T, 16-bit types as packed pairs (as one conversion writes them, so the
// group amax reads them packed: quant::fold_pairs).
template <typename T, int kVec>
using Gated = std::conditional_t<sizeof(T) == 2 && kVec % 2 == 0, AlignedVector<packed_t<T>, kVec / 2>, AlignedVector<T, kVec>>;

// act(gate) * up, element by element in fp32, rounded to T (16-bit types a pair per conversion).
template <typename Act, typename T, int kVec>
__device__ __forceinline__ Gated<T, kVec> gated(const AlignedVector<T, kVec>& gate, const AlignedVector<T, kVec>& up) {
  float g[kVec], u[kVec], a[kVec];
  widen(gate, g);
  widen(up, u);
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    if constexpr (sizeof(T) < sizeof(float) && requires { Act::apply_fast(g[j]); }) {
      a[j] = Act::apply_fast(g[j]) * u[j];
    } else {
      a[j] = Act::apply(g[j]) * u[j];
    }
  }
  Gated<T, kVec> y;
  if constexpr (sizeof(T) == 2 && kVec % 2 == 0) {
#pragma unroll
    for (int j = 0; j < kVec; j += 2) y[j / 2] = cast<packed_t<T>>(fp32x2_t{a[j], a[j + 1]});
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) y[j] = cast<T>(a[j]);
  }
  return y;
}

}  // namespace device::act
