// The MLA cache write (csrc/mla_cache.cuh) under other launches, on the product's checked parameters
// (MlaCacheOps::prepare), bf16 caches (bench_mla_cache.py):
//   variant 0      the kernel before the location and the row loaded together: the location, its check, then
//                  the row (a second round trip), its trigger at start (<= 8 CTAs) or after the wait;
//   variant 1-3    the product's kernel with its PDL trigger at start, after the first loads, after the stores;
//   variant 4      the product's kernel and trigger in CTAs of one warp (the reference's up to a row an SM).
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

// The kernel before (bf16 copies, 16-byte vectors): the location checked before the row's loads.
__global__ void __launch_bounds__(kThreads) location_first_kernel(const __grid_constant__ Params<bf16> p) {
#ifdef __CUDACC__
  using Vec = device::AlignedVector<bf16, kV>;
  if (p.trigger == jitkern_mla_cache::kTriggerAtStart) device::pdl_trigger_secondary();
  const int64_t row = (int64_t{blockIdx.x} * kThreads + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= int64_t{p.tokens} * (1 + p.heads)) return;
  const bool is_kv = row < p.tokens;
  const int64_t token = is_kv ? row : (row - p.tokens) / p.heads, head = is_kv ? 0 : row - p.tokens - token * p.heads;
  const bf16* nope = is_kv ? p.k_nope + token * p.k_nope_token : p.q_nope + token * p.q_nope_token + head * p.q_nope_head;
  const bf16* rope = is_kv ? p.k_rope + token * p.k_rope_token : p.q_rope + token * p.q_rope_token + head * p.q_rope_head;
  device::pdl_wait_primary();
  if (p.trigger != jitkern_mla_cache::kTriggerAtStart) device::pdl_trigger_secondary();
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
// set_mla_kv_concat_q (q_nope given) or set_mla_kv_buffer into a bf16 kv_buffer, every location kept, by `variant`.
inline void launch(jitkern::TensorView kv_buffer, jitkern::TensorView loc, jitkern::TensorView k_nope, jitkern::TensorView k_rope,
                   jitkern::Optional<jitkern::TensorView> q_nope, jitkern::Optional<jitkern::TensorView> q_rope,
                   jitkern::Optional<jitkern::TensorView> q_out, int64_t variant) {
  using Ops = jitkern_mla_cache::MlaCacheOps<bf16>;
  auto l = Ops::prepare<false>(kv_buffer, loc, k_nope, k_rope, q_nope, q_rope, q_out, -1, 1.0, 1.0);
  host::RuntimeCheck(l.vec == Ops::kWideVec, "the variants take 16-byte rows");
  host::RuntimeCheck(variant >= 0 && variant <= 4, "variant: 0-4, got ", variant);
  if (l.ctas == 0) return;
  if (variant == 4) {
    const int64_t rows = int64_t{l.p.tokens} * (1 + l.p.heads);
    host::LaunchKernel(static_cast<unsigned>(rows), 32u, l.device).enable_pdl()(jitkern_mla_cache::mla_cache_kernel<bf16, false, kV, 32>, l.p);
    return;
  }
  l.p.trigger = variant == 0 ? (host::pdl_early_trigger(l.ctas) ? jitkern_mla_cache::kTriggerAtStart : jitkern_mla_cache::kTriggerAfterLoads)
                             : static_cast<int8_t>(variant - 1);
  host::LaunchKernel(static_cast<unsigned>(l.ctas), static_cast<unsigned>(kThreads), l.device)
      .enable_pdl()(variant == 0 ? location_first_kernel : jitkern_mla_cache::mla_cache_kernel<bf16, false, kV>, l.p);
}

void store_kv(jitkern::TensorView kv_buffer, jitkern::TensorView loc, jitkern::TensorView k_nope, jitkern::TensorView k_rope, int64_t variant) {
  launch(kv_buffer, loc, k_nope, k_rope, {}, {}, {}, variant);
}

void store_kv_q(jitkern::TensorView kv_buffer, jitkern::TensorView loc, jitkern::TensorView k_nope, jitkern::TensorView k_rope,
                jitkern::TensorView q_nope, jitkern::TensorView q_rope, jitkern::TensorView q_out, int64_t variant) {
  launch(kv_buffer, loc, k_nope, k_rope, q_nope, q_rope, q_out, variant);
}
#endif  // __CUDACC_RTC__

}  // namespace bench_mla_cache
