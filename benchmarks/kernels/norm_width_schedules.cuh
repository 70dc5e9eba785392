// Layouts of the plain and Gemma norms' wide rows side by side (bench_norm.py `widths`), bf16: the kernel built
// for the width (norm_static_kernel) at kRegVecs vectors a thread, at any row count, and the general wide
// kernel (norm_wide_kernel, token rows) at kRegVecs, rows that fit held exactly or not. E: bf16_t (rmsnorm) or
// the Gemma-tagged bf16 (gemma_rmsnorm).
#pragma once

#include <norm_variants.cuh>

namespace bench_norm_widths {

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
using Gemma = jitkern_norm_variants::Tagged<bf16_t, jitkern_norm_variants::Rule::kGemma>;
constexpr int kWidths[] = {1536, 2560, 3584, 4096};

template <typename E, int kRegVecs>
void static_rows(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output, double eps) {
  using namespace device::norm;
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

template <typename E, int kRegVecs>
void wide_rows(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output, double eps) {
  using namespace device::norm;
  const host::norm::TokenRows<E> rows(input, weight, &output, nullptr, eps);
  NormParams<E> p = rows.params;
  p.problem[1] = p.problem[0], p.problem[1].heads = 0;
  p.heads_per_token = 1;
  p.rows0 = p.total_rows = static_cast<int32_t>(rows.tokens);
  const int sm_count = host::runtime::get_sm_count(rows.device.device_id);
  host::norm::launch_norm_wide<E, device::kVec16<E>, kRegVecs, false, RowFit::kFits>(p, StoreOutput<E>{}, rows.device,
                                                                                      host::row_policy(rows.device).row_threads, sm_count, true);
}

#endif  // __CUDACC_RTC__

}  // namespace bench_norm_widths
