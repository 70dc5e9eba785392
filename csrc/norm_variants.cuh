// RMSNorm variants of today's models, on the norm family's kernels and launch rules
// (<jitkern/impl/norm_launch.cuh>), for fp16/bf16/fp32 rows of any width:
//   NormVariants<T>::gemma_rmsnorm            out = x * rsqrt(mean(x^2) + eps) * (1 + w), in fp32, rounded
//                                             once (Gemma's norms);
//   NormVariants<T>::gemma_fused_add_rmsnorm  residual += input (rounded to T), input = gemma_rmsnorm(residual);
//   NormVariants<T>::rmsnorm_hf               out = w * T(x * rsqrt(mean(x^2) + eps)): the normalised value
//                                             rounded to T before the weight multiply (transformers' order).
// The out-of-place ops launch as rmsnorm does (host::norm::launch_token_norm). Each rule is an element type: T tagged with the rule (Tagged), whose per-vector arithmetic
// (device::norm::VecMath) is the only thing that differs from rmsnorm; loads, reductions, launch shapes
// and checks are the norm family's own.
#pragma once

#include <jitkern/impl/norm.cuh>
#include <jitkern/impl/norm_launch.cuh>
#include <jitkern/type.cuh>
#include <jitkern/vec.cuh>
#ifndef __CUDACC_RTC__
#include <jitkern/tensor.h>
#endif

#include <cstdint>
#include <cstring>
#include <utility>

namespace jitkern_norm_variants {

// How the normalised value x * s and the weight w make the output.
enum class Rule { kGemma, kHf };

// T's bits, tagged with the rule.
template <typename T, Rule kRule>
struct Tagged {
  T value;
};

}  // namespace jitkern_norm_variants

#ifndef __CUDACC_RTC__
// A tagged tensor is a tensor of T.
template <typename T, jitkern_norm_variants::Rule kRule>
struct host::dtype_trait<jitkern_norm_variants::Tagged<T, kRule>> {
  static constexpr DLDataType value = host::dtype_trait<T>::value;
};
#endif

namespace device::norm {

// The norm arithmetic of a tagged type: T's for the sum of squares and the residual add, the rule's for
// the output.
template <typename T, jitkern_norm_variants::Rule kRule, int kVec>
struct VecMath<jitkern_norm_variants::Tagged<T, kRule>, kVec> {
  using Vec = AlignedVector<jitkern_norm_variants::Tagged<T, kRule>, kVec>;
  using Plain = VecMath<T, kVec>;
  static JITKERN_DEVICE typename Plain::Vec plain(const Vec& x) {
    typename Plain::Vec y;
    __builtin_memcpy(&y, &x, sizeof y);
    return y;
  }
  static JITKERN_DEVICE Vec tagged(const typename Plain::Vec& x) {
    Vec y;
    __builtin_memcpy(&y, &x, sizeof y);
    return y;
  }
  static JITKERN_DEVICE void add(Vec& x, const Vec& r) {
    typename Plain::Vec y = plain(x);
    Plain::add(y, plain(r));
    x = tagged(y);
  }
  static JITKERN_DEVICE float sum_squares(const Vec& x) { return Plain::sum_squares(plain(x)); }
  template <typename Op>
  static JITKERN_DEVICE float fold(const Vec& x, const Op& op, float acc) {
    return Plain::fold(plain(x), op, acc);
  }
  static JITKERN_DEVICE Vec normalized(const Vec& x, const Vec& w, float scale) {
    Vec y;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float v = cast<float>(x[j].value) * scale, wj = cast<float>(w[j].value);
      if constexpr (kRule == jitkern_norm_variants::Rule::kGemma) {
        y[j].value = cast<T>(v * (1.0f + wj));
      } else {
        y[j].value = cast<T>(wj * cast<float>(cast<T>(v)));
      }
    }
    return y;
  }
};

}  // namespace device::norm

namespace jitkern_norm_variants {

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels (impl/norm_launch.cuh) only
template <typename T>
struct NormVariants {
  // out[t, :] = x * rsqrt(mean(x^2) + eps) * (1 + weight), x = input[t, :]; rows may be strided; out may be input.
  static void gemma_rmsnorm(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView out, double eps) {
    norm<Rule::kGemma, false>(input, weight, &out, nullptr, eps);
  }
  // residual += input; input = gemma_rmsnorm(residual) (both in place).
  static void gemma_fused_add_rmsnorm(jitkern::TensorView input, jitkern::TensorView residual, jitkern::TensorView weight, double eps) {
    norm<Rule::kGemma, true>(input, weight, nullptr, &residual, eps);
  }
  // out[t, :] = weight * T(x * rsqrt(mean(x^2) + eps)); out may be input.
  static void rmsnorm_hf(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView out, double eps) {
    norm<Rule::kHf, false>(input, weight, &out, nullptr, eps);
  }

 private:
  template <Rule kRule, bool kFusedAdd>
  static void norm(jitkern::TensorView input, jitkern::TensorView weight, const jitkern::TensorView* output, const jitkern::TensorView* residual,
                   double eps) {
    using E = Tagged<T, kRule>;
    static_assert(sizeof(E) == sizeof(T) && alignof(E) == alignof(T), "a tagged element is its T");
    const host::norm::TokenRows<E> rows(input, weight, output, residual, eps, "out");
    if constexpr (kFusedAdd) {
      rows.check_input_written();
      host::norm::launch_norm<E, true>(rows.params, 1, rows.tokens, rows.device);
    } else {  // rmsnorm's launch rule
      host::norm::launch_token_norm(rows);
    }
  }
};
#endif  // __CUDACC_RTC__

}  // namespace jitkern_norm_variants
