// The MLA cache write's kernel before the location and the row loaded together (csrc/mla_cache.cuh), on the
// product's checked parameters (MlaCacheOps::prepare), bf16 caches, beside the product (bench_mla_cache.py):
// the location, its check, then the row (a second round trip); the PDL trigger at start up to
// host::kPdlEarlyTriggerMaxCtas CTAs, else after the wait.
#pragma once

#include <mla_cache.cuh>  // csrc/

#include <jitkern/impl/kv_cache.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/utils.cuh>
#ifndef __CUDACC_RTC__
#include <jitkern/optional.h>
#include <jitkern/tensor.h>
#include <jitkern/utils.h>
#endif

#include <cstdint>

namespace bench_mla_cache {

using jitkern_mla_cache::kBatch;
using jitkern_mla_cache::kThreads;
using jitkern_mla_cache::Params;
using bf16 = bf16_t;
constexpr int kV = 8;  // bf16 elements of a 16-byte vector

template <bool kEarlyTrigger>
__global__ void __launch_bounds__(kThreads) location_first_kernel(const __grid_constant__ Params<bf16> p) {
#ifdef __CUDACC__
  using Vec = device::AlignedVector<bf16, kV>;
  if (kEarlyTrigger) device::pdl_trigger_secondary();
  const int64_t row = (int64_t{blockIdx.x} * kThreads + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= int64_t{p.tokens} * (1 + p.heads)) return;
  const bool is_kv = row < p.tokens;
  const int64_t token = is_kv ? row : (row - p.tokens) / p.heads, head = is_kv ? 0 : row - p.tokens - token * p.heads;
  const bf16* nope = is_kv ? p.k_nope + token * p.k_nope_token : p.q_nope + token * p.q_nope_token + head * p.q_nope_head;
  const bf16* rope = is_kv ? p.k_rope + token * p.k_rope_token : p.q_rope + token * p.q_rope_token + head * p.q_rope_head;
  device::pdl_wait_primary();
  if (!kEarlyTrigger) device::pdl_trigger_secondary();
  char* out;
  if (is_kv) {
    const int64_t slot = device::kv_cache::load_index(p.loc, p.loc64, token * p.loc_stride);
    if (slot == p.skip || !p.cache.holds(slot)) return;
    out = p.cache.row(slot);
  } else {
    out = p.q_out + (token * p.heads + head) * p.vecs * kV * int64_t{sizeof(bf16)};
  }
  for (int first = lane; first < p.vecs; first += 32 * kBatch) {
    Vec x[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = first + 32 * b;
      if (j < p.vecs) x[b].load(j < p.nope_vecs ? nope + j * kV : rope + (j - p.nope_vecs) * kV);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = first + 32 * b;
      if (j >= p.vecs) break;
      x[b].store(reinterpret_cast<bf16*>(out) + j * kV);
    }
  }
#endif
}

#ifndef __CUDACC_RTC__
// set_mla_kv_concat_q (q_nope given) or set_mla_kv_buffer into a bf16 kv_buffer, every location kept.
inline void launch(jitkern::TensorView kv_buffer, jitkern::TensorView loc, jitkern::TensorView k_nope, jitkern::TensorView k_rope,
                   jitkern::Optional<jitkern::TensorView> q_nope, jitkern::Optional<jitkern::TensorView> q_rope,
                   jitkern::Optional<jitkern::TensorView> q_out) {
  using Ops = jitkern_mla_cache::MlaCacheOps<bf16>;
  const auto l = Ops::prepare<false>(kv_buffer, loc, k_nope, k_rope, q_nope, q_rope, q_out, -1, 1.0, 1.0);
  host::RuntimeCheck(l.vec == Ops::kWideVec, "the kernel before takes 16-byte rows here");
  if (l.ctas == 0) return;
  host::LaunchKernel(static_cast<unsigned>(l.ctas), static_cast<unsigned>(kThreads), l.device)
      .enable_pdl()(host::pdl_early_trigger(l.ctas) ? location_first_kernel<true> : location_first_kernel<false>, l.p);
}

void store_kv(jitkern::TensorView kv_buffer, jitkern::TensorView loc, jitkern::TensorView k_nope, jitkern::TensorView k_rope) {
  launch(kv_buffer, loc, k_nope, k_rope, {}, {}, {});
}

void store_kv_q(jitkern::TensorView kv_buffer, jitkern::TensorView loc, jitkern::TensorView k_nope, jitkern::TensorView k_rope,
                jitkern::TensorView q_nope, jitkern::TensorView q_rope, jitkern::TensorView q_out) {
  launch(kv_buffer, loc, k_nope, k_rope, q_nope, q_rope, q_out);
}
#endif  // __CUDACC_RTC__

}  // namespace bench_mla_cache
