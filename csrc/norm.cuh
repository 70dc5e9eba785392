// The RMSNorm family: rmsnorm, fused_add_rmsnorm, per-head QK-norm and QK-norm across heads, for
// fp16/bf16/fp32 (fp32 accumulation), any hidden size, strided rows, in place or not. The kernels and
// their launch rules: <jitkern/impl/norm_launch.cuh> (the quantization family normalises rows with them too).
#pragma once

#include <jitkern/impl/norm_launch.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/type.cuh>
#include <jitkern/utils.cuh>

#include <cstdint>

namespace jitkern_norm {

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels (impl/norm_launch.cuh) only
using namespace host::norm;

// One token-wise problem per width (p.hidden for problem[0], p.hidden1 for problem[1]; one row per
// token each), normalised in a single launch instead of one per width, where the grid is small enough
// for launch latency to dominate and both widths take the wide path with 16-byte vectors and rows that
// fit in registers. Returns false (nothing launched) where that does not hold (docs/benchmarks/design.md).
template <typename T>
bool launch_norm_two_widths(NormParams<T> p, int64_t tokens, DLDevice device) {
  using namespace host;
  constexpr int kVec = device::kVec16<T>;
  if (tokens == 0) return true;
  const int64_t widest = host::max(p.hidden, p.hidden1) / kVec, narrowest = host::min(p.hidden, p.hidden1) / kVec;
  const int sm_count = runtime::get_sm_count(device.device_id);
  const int row_threads = row_policy(device).row_threads;
  if (narrowest <= 32 || widest > kNormTwoWidthsRegVecs * row_threads || 2 * tokens >= int64_t{kNormManyRowsPerSm} * sm_count) return false;
  const int64_t widths[2] = {p.hidden, p.hidden1};
  for (int k = 0; k < 2; ++k) {
    const RowProblem<T>& q = p.problem[k];
    if (vector_width(kVec, widths[k], {q.out, q.in, q.weight}, {q.out_token, q.in_token}) != kVec) return false;
  }
  p.rows0 = static_cast<int32_t>(tokens);
  p.heads_per_token = 2;
  p.total_rows = static_cast<int32_t>(2 * tokens);
  LaunchKernel(static_cast<unsigned>(2 * tokens), wide_threads(widest, kNormTwoWidthsRegVecs, row_threads), device)
      .enable_pdl()(
          norm_wide_kernel<T, kVec, kNormTwoWidthsRegVecs, false, RowFit::kFits, device::norm::StoreOutput<T>, RowOrder::kProblemMajor, true>, p,
          device::norm::StoreOutput<T>{});
  return true;
}

template <typename T>
struct NormOps {
  // output[t, :] = rmsnorm(input[t, :]) * weight; rows may be strided; output may be input.
  static void rmsnorm(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output, double eps) {
    launch_token_norm(TokenRows<T>(input, weight, &output, nullptr, eps));
  }

  // residual += input; input = rmsnorm(residual) * weight (both in place).
  static void fused_add_rmsnorm(jitkern::TensorView input, jitkern::TensorView residual, jitkern::TensorView weight, double eps) {
    const TokenRows<T> rows(input, weight, nullptr, &residual, eps);
    rows.check_input_written();
    launch_norm<T, true>(rows.params, 1, rows.tokens, rows.device);
  }

  // q [N, Hq, D], k [N, Hk, D]: every head normalised over D, in place. With head_dim > 0 either
  // may also be 2-D, [N, H * D] (the heads of a token side by side, e.g. columns of a fused qkv buffer).
  static void qknorm(jitkern::TensorView q, jitkern::TensorView k, jitkern::TensorView q_weight, jitkern::TensorView k_weight,
                     double eps, int64_t head_dim) {
    using namespace host;
    RuntimeCheck(head_dim >= 0, "head_dim must be positive, or 0 when q and k are [N, H, D]; got ", head_dim);
    RuntimeCheck(head_dim > 0 || (q.dim() == 3 && k.dim() == 3), "head_dim must be positive unless q and k are both [N, H, D]; got q with ",
                 q.dim(), " and k with ", k.dim(), " dimensions");
    auto N = SymbolicSize{"num_tokens"};
    auto D = SymbolicSize{"head_dim"};
    if (head_dim > 0) D.set_value(head_dim);
    auto device = SymbolicDevice{};
    const Heads hq = heads_of(q, N, D, device, {"num_q_heads", "q_token_stride", "q_head_stride", "q_width", "q"});
    const Heads hk = heads_of(k, N, D, device, {"num_k_heads", "k_token_stride", "k_head_stride", "k_width", "k"});
    TensorMatcher({D}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(q_weight, "q_weight").verify(k_weight, "k_weight");
    check_disjoint(Extents{N.unwrap(), hq.count, D.unwrap()}, Extents{hq.token_stride, hq.head_stride, 1}, "q");
    check_disjoint(Extents{N.unwrap(), hk.count, D.unwrap()}, Extents{hk.token_stride, hk.head_stride, 1}, "k");
    check_distinct(q, k, "q", "k");
    NormParams<T> p{};
    p.hidden = D.unwrap();
    p.eps = checked_eps(eps);
    p.problem[0] = heads_problem(q, q_weight, N.unwrap(), hq.count, hq.token_stride, hq.head_stride);
    p.problem[1] = heads_problem(k, k_weight, N.unwrap(), hk.count, hk.token_stride, hk.head_stride);
    launch_norm<T, false>(p, 2, N.unwrap(), device.unwrap());
  }

  // q [N, Wq], k [N, Wk]: every row normalised over its whole width, in place.
  static void qknorm_across_heads(jitkern::TensorView q, jitkern::TensorView k, jitkern::TensorView q_weight,
                                  jitkern::TensorView k_weight, double eps) {
    using namespace host;
    auto N = SymbolicSize{"num_tokens"};
    auto Wq = SymbolicSize{"q_width"}, Wk = SymbolicSize{"k_width"};
    auto q_stride = SymbolicSize{"q_row_stride"}, k_stride = SymbolicSize{"k_row_stride"};
    auto device = SymbolicDevice{};
    TensorMatcher({N, Wq}).with_strides({q_stride, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(q, "q");
    TensorMatcher({N, Wk}).with_strides({k_stride, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(k, "k");
    TensorMatcher({Wq}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(q_weight, "q_weight");
    TensorMatcher({Wk}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(k_weight, "k_weight");
    Rows::check_rows(N, Wq, q_stride, "q");
    Rows::check_rows(N, Wk, k_stride, "k");
    check_distinct(q, k, "q", "k");
    const float e = checked_eps(eps);
    const RowProblem<T> pq = heads_problem(q, q_weight, N.unwrap(), 1, Rows::stride_of(q_stride), 0);
    const RowProblem<T> pk = heads_problem(k, k_weight, N.unwrap(), 1, Rows::stride_of(k_stride), 0);
    NormParams<T> p{};
    p.eps = e;
    if (Wq.unwrap() == Wk.unwrap()) {  // one launch for both
      p.hidden = Wq.unwrap();
      p.problem[0] = pq, p.problem[1] = pk;
      launch_norm<T, false>(p, 2, N.unwrap(), device.unwrap());
    } else {
      p.hidden = Wq.unwrap(), p.hidden1 = Wk.unwrap();
      p.problem[0] = pq, p.problem[1] = pk;
      if (launch_norm_two_widths(p, N.unwrap(), device.unwrap())) return;
      p.hidden = Wq.unwrap();
      p.problem[0] = pq;
      launch_norm<T, false>(p, 1, N.unwrap(), device.unwrap());
      p.hidden = Wk.unwrap();
      p.problem[0] = pk;
      launch_norm<T, false>(p, 1, N.unwrap(), device.unwrap());
    }
  }

 private:
  using Rows = TokenRows<T>;  // the row checks

  struct Heads {
    int64_t count, token_stride, head_stride;
  };
  struct HeadsNames {
    const char *heads, *token_stride, *head_stride, *width, *tensor;
  };

  // The heads of q or k, [N, H, D], or [N, H * D] once D is known (head_dim given).
  static Heads heads_of(jitkern::TensorView t, host::SymbolicSize& N, host::SymbolicSize& D, host::SymbolicDevice& device,
                        const HeadsNames& names) {
    using namespace host;
    auto token = SymbolicSize{names.token_stride};
    if (t.dim() == 2 && D.has_value()) {
      auto W = SymbolicSize{names.width};
      TensorMatcher({N, W}).with_strides({token, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(t, names.tensor);
      RuntimeCheck(W.unwrap() % D.unwrap() == 0, names.tensor, " width ", W.unwrap(), " is not a multiple of head_dim ", D.unwrap());
      Rows::check_rows(N, W, token, names.tensor);
      return {W.unwrap() / D.unwrap(), Rows::stride_of(token), D.unwrap()};
    }
    auto H = SymbolicSize{names.heads}, head = SymbolicSize{names.head_stride};
    TensorMatcher({N, H, D}).with_strides({token, head, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(t, names.tensor);
    return {H.unwrap(), Rows::stride_of(token), Rows::stride_of(head)};
  }

  static RowProblem<T> heads_problem(jitkern::TensorView t, jitkern::TensorView w, int64_t tokens, int64_t heads,
                                     int64_t token_stride, int64_t head_stride) {
    host::RuntimeCheck(heads <= kNormMaxRowsPerLaunch, "at most ", kNormMaxRowsPerLaunch, " heads per token are supported, got ", heads);
    auto* ptr = static_cast<T*>(t.data_ptr());
    return {ptr, ptr, nullptr, static_cast<const T*>(w.data_ptr()), token_stride, head_stride, token_stride, head_stride, 0, 0,
            static_cast<int32_t>(heads)};
  }
};
#endif  // __CUDACC_RTC__

}  // namespace jitkern_norm
