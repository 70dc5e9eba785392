// Layouts of the plain and Gemma norms' wide rows side by side (bench_norm.py `widths`), bf16: the kernel built
// for the width (norm_static_kernel) at kRegVecs vectors a thread, at any row count, and the product's folded
// kernel (norm_folded_kernel) at 2560, a width the product does not fold. E: bf16_t (rmsnorm) or the Gemma-tagged
// bf16 (gemma_rmsnorm). (Two rows a CTA, a persistent grid loading the next row ahead and the width kernel under
// bounds of 9 CTAs an SM, each with the product's bits, lost at [4096, 3584]: docs/benchmarks/norm.md.)
#pragma once

#include <norm_variants.cuh>

namespace bench_norm_widths {

using namespace device::norm;

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
using Gemma = jitkern_norm_variants::Tagged<bf16_t, jitkern_norm_variants::Rule::kGemma>;
constexpr int kWidths[] = {1536, 2560, 3584, 4096};

template <typename E, int kRegVecs>
void static_rows(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output, double eps) {
  const host::norm::TokenRows<E> rows(input, weight, &output, nullptr, eps);
  const NormParams<E>& p = rows.params;
  const RowProblem<E>& q = p.problem[0];
  const StaticRows<E> s{q.out, q.in, q.weight, q.out_token, q.in_token, p.eps, rows.tokens <= kNormStaticEarlyTriggerMaxRows};
  bool launched = false;
  const auto one = [&](auto width) {
    constexpr int kWidth = decltype(width)::value;
    if (p.hidden != kWidth) return;
    host::LaunchKernel(static_cast<unsigned>(rows.tokens), kNormStaticThreads<E, kWidth, kRegVecs>, rows.device)
        .enable_pdl()(norm_static_kernel<E, kWidth, kRegVecs>, s);
    launched = true;
  };
  one(std::integral_constant<int, kWidths[0]>{}), one(std::integral_constant<int, kWidths[1]>{});
  one(std::integral_constant<int, kWidths[2]>{}), one(std::integral_constant<int, kWidths[3]>{});
  host::RuntimeCheck(launched, "width ", p.hidden, " is not built here");
}

// The product's norm_folded_kernel<E, 2560> (the product folds rows of 3584 only).
template <typename E>
void folded_rows(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output, double eps) {
  const host::norm::TokenRows<E> rows(input, weight, &output, nullptr, eps);
  const NormParams<E>& p = rows.params;
  const RowProblem<E>& q = p.problem[0];
  host::RuntimeCheck(p.hidden == 2560, "rows of 2560 only, got ", p.hidden);
  if (rows.tokens > 0)
    host::LaunchKernel(static_cast<unsigned>(rows.tokens), kNormFoldedThreads<E, 2560>, rows.device)
        .enable_pdl()(norm_folded_kernel<E, 2560>, StaticRows<E>{q.out, q.in, q.weight, q.out_token, q.in_token, p.eps, false});
}

#endif  // __CUDACC_RTC__

}  // namespace bench_norm_widths
