// The masked group form (csrc/moe_act.cuh) with wrong guesses of the row counts before the PDL wait
// (tests/python/ops/test_moe_act.py): kMode 0, every count guessed 0 (nothing to load on the guess); 1, each
// count guessed one more than it is (one less where it is M: the rows of every expert after the first placed
// wrong); 2, only the last expert's guessed so. The kernel must find the guess wrong and compute from the counts read
// after the wait.
#pragma once

#include <moe_act.cuh>  // csrc/

// A named namespace: the module is built with host_without_nvcc (its host code by the host compiler alone).
namespace moe_act_guess_test {

using namespace jitkern_moe_act;

template <int kMode>
struct WrongGuess : MaskedRowsWarp {
  __device__ __forceinline__ int32_t count_before_wait() const {
    const int lane = static_cast<int>(threadIdx.x % device::kWarpThreads);
    const int32_t m = count_from_l2(), wrong = m < m_max ? m + 1 : m - 1;
    if (kMode == 0 || lane >= experts) return 0;
    return kMode == 1 || lane == experts - 1 ? wrong : m;
  }
};

template <int kMode>
void masked_group(jitkern::TensorView input, jitkern::TensorView masked_m, jitkern::TensorView output_q, jitkern::TensorView output_s,
                  int64_t group_size, double eps) {
  using Ops = MoeActOps<bf16_t>;
  const auto m = Ops::masked_group(input, masked_m, output_q, output_s, group_size, eps);
  host::RuntimeCheck(m.experts <= MaskedRowsWarp::kMaxWarpExperts, "moe_act_guess_test: at most 32 experts");
  Ops::group_quant<device::quant::Rounding::kSglang>(WrongGuess<kMode>{m.rows}, m.op);
}

}  // namespace moe_act_guess_test
