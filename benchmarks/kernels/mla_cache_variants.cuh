// The MLA cache write's alternatives beside the product (csrc/mla_cache.cuh), on the product's checked
// parameters (MlaCacheOps::prepare), bf16 caches (bench_mla_cache.py variants):
//   before   the product's kernel before the fixed-row instantiation: every row through the runtime vector
//            counts, the location's address worked out after the PDL wait, every cache through the division;
//   general  the product's kernel without its fixed-row instantiation (the runtime vector counts).
#pragma once

#include <mla_cache.cuh>  // csrc/

#include <jitkern/impl/kv_cache.cuh>
#include <jitkern/impl/quant.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/utils.cuh>
#include <jitkern/vec.cuh>
#ifndef __CUDACC_RTC__
#include <jitkern/optional.h>
#include <jitkern/tensor.h>
#include <jitkern/utils.h>
#endif

#include <cstdint>
#include <type_traits>

namespace bench_mla_cache {

using jitkern_mla_cache::kBatch;
using jitkern_mla_cache::kThreads;
using jitkern_mla_cache::Params;
using bf16 = bf16_t;
constexpr int kV = 8;  // bf16 elements of a 16-byte vector

__global__ void __launch_bounds__(kThreads) before_kernel(const __grid_constant__ Params<bf16> p) {
#ifdef __CUDACC__
  using E = uint32_t;
  using Vec = device::AlignedVector<E, 4>;
  const uint32_t row = (blockIdx.x * kThreads + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= static_cast<uint32_t>(p.tokens) * (1 + p.heads)) return;
  const bool is_kv = row < static_cast<uint32_t>(p.tokens);
  const uint32_t q_row = row - p.tokens, q_token = is_kv ? 0 : q_row / static_cast<uint32_t>(p.heads);
  const int64_t token = is_kv ? row : q_token, head = is_kv ? 0 : q_row - q_token * p.heads;
  const bf16* nope = is_kv ? p.k_nope + token * p.k_nope_token : p.q_nope + token * p.q_nope_token + head * p.q_nope_head;
  const bf16* rope = is_kv ? p.k_rope + token * p.k_rope_token : p.q_rope + token * p.q_rope_token + head * p.q_rope_head;
  device::pdl_wait_primary();
  const int64_t slot = is_kv ? device::kv_cache::load_index(p.loc, p.loc64, token * p.loc_stride) : 0;
  const auto load = [&](Vec(&v)[kBatch], int first) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = min(first + 32 * b, p.vecs - 1);
      v[b].load_global(reinterpret_cast<const E*>(j < p.nope_vecs ? nope + j * kV : rope + (j - p.nope_vecs) * kV));
    }
  };
  Vec x[kBatch];
  load(x, lane);
  device::pdl_trigger_secondary();
  char* out;
  if (is_kv) {
    if (slot == p.skip || !p.cache.holds(slot)) return;
    out = p.cache.row(slot);
  } else {
    out = p.q_out + (token * p.heads + head) * p.vecs * kV * int64_t{sizeof(bf16)};
  }
  const auto store = [&](const Vec(&v)[kBatch], int first) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = first + 32 * b;
      if (j >= p.vecs) break;
      v[b].store_global(reinterpret_cast<E*>(reinterpret_cast<bf16*>(out) + j * kV));
    }
  };
  store(x, lane);
  for (int first = lane + 32 * kBatch; first < p.vecs; first += 32 * kBatch) {
    Vec y[kBatch];
    load(y, first);
    store(y, first);
  }
#endif
}

#ifndef __CUDACC_RTC__
// set_mla_kv_concat_q (q_nope given) or set_mla_kv_buffer into a bf16 kv_buffer, every location kept;
// variant 0: before, 1: general.
inline void launch(int64_t variant, jitkern::TensorView kv_buffer, jitkern::TensorView loc, jitkern::TensorView k_nope,
                   jitkern::TensorView k_rope, jitkern::Optional<jitkern::TensorView> q_nope, jitkern::Optional<jitkern::TensorView> q_rope,
                   jitkern::Optional<jitkern::TensorView> q_out) {
  using Ops = jitkern_mla_cache::MlaCacheOps<bf16>;
  const auto l = Ops::prepare<false>(kv_buffer, loc, k_nope, k_rope, q_nope, q_rope, q_out, -1, 1.0, 1.0);
  host::RuntimeCheck(l.fixed, "the variants take 512 + 64 bf16 rows in 16-byte vectors");
  if (l.ctas == 0) return;
  host::LaunchKernel(static_cast<unsigned>(l.ctas), static_cast<unsigned>(kThreads), l.device)
      .enable_pdl()(variant == 0 ? before_kernel : jitkern_mla_cache::mla_cache_kernel<bf16, false, kV, false>, l.p);
}

void store_kv(int64_t variant, jitkern::TensorView kv_buffer, jitkern::TensorView loc, jitkern::TensorView k_nope,
              jitkern::TensorView k_rope) {
  launch(variant, kv_buffer, loc, k_nope, k_rope, {}, {}, {});
}

void store_kv_q(int64_t variant, jitkern::TensorView kv_buffer, jitkern::TensorView loc, jitkern::TensorView k_nope,
                jitkern::TensorView k_rope, jitkern::TensorView q_nope, jitkern::TensorView q_rope, jitkern::TensorView q_out) {
  launch(variant, kv_buffer, loc, k_nope, k_rope, q_nope, q_rope, q_out);
}
#endif  // __CUDACC_RTC__

}  // namespace bench_mla_cache
