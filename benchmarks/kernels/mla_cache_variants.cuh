// The MLA cache write's alternatives beside the product (csrc/mla_cache.cuh), on the product's checked
// parameters (MlaCacheOps::prepare), set_mla_kv_buffer into a bf16 cache, int64 locations (bench_mla_cache.py
// variants):
//   before               the kernel the product took before mla_kv_rows_kernel: the fixed-row instantiation
//                        of mla_cache_kernel (Params, 192 bytes; the query rows' code);
//   trigger after loads  mla_kv_rows_kernel triggering the next launch once its loads are issued at every
//                        size (the product: at its start on grids of at most 256 threads an SM);
//   no prefetch          mla_kv_rows_kernel without the location's L2 prefetch before the PDL wait.
#pragma once

#include <mla_cache.cuh>  // csrc/

#include <jitkern/runtime.cuh>
#include <jitkern/utils.cuh>
#include <jitkern/vec.cuh>
#ifndef __CUDACC_RTC__
#include <jitkern/tensor.h>
#include <jitkern/utils.h>
#endif

#include <cstdint>

namespace bench_mla_cache {

using jitkern_mla_cache::kThreads;
using jitkern_mla_cache::RowParams;
using bf16 = bf16_t;

// mla_kv_rows_kernel<1024, 128, int64_t, kTriggerFirst> without the location's L2 prefetch before the wait.
template <bool kTriggerFirst>
__global__ void __launch_bounds__(1024) rows_kernel(const __grid_constant__ RowParams p) {
#ifdef __CUDACC__
  if constexpr (kTriggerFirst) device::pdl_trigger_secondary();
  using Vec = device::AlignedVector<uint32_t, 4>;
  const uint32_t row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const uint32_t lane = threadIdx.x % 32;
  if (row >= p.tokens) return;
  const int64_t* at = static_cast<const int64_t*>(p.loc) + static_cast<uint64_t>(row) * p.loc_stride;
  const char* nope = p.k_nope + static_cast<uint64_t>(row) * p.k_nope_token + lane * 16;
  const char* rope = p.k_rope + static_cast<uint64_t>(row) * p.k_rope_token + lane * 4;
  device::pdl_wait_primary();
  const int64_t slot = *at;
  Vec v[2];
  v[0].load_global(reinterpret_cast<const uint32_t*>(nope));
  v[1].load_global(reinterpret_cast<const uint32_t*>(nope + 512));
  device::AlignedVector<uint32_t, 1> w;
  w.load_global(reinterpret_cast<const uint32_t*>(rope));
  device::pdl_trigger_secondary();  // (kTriggerFirst: again, without effect, as the product)
  if (static_cast<uint64_t>(slot) >= p.slots || static_cast<uint32_t>(slot) == p.skip) return;
  char* out = p.cache + static_cast<uint64_t>(static_cast<uint32_t>(slot)) * p.row_stride;
  v[0].store_global(reinterpret_cast<uint32_t*>(out + lane * 16));
  v[1].store_global(reinterpret_cast<uint32_t*>(out + lane * 16 + 512));
  w.store_global(reinterpret_cast<uint32_t*>(out + 1024 + lane * 4));
#endif
}

#ifndef __CUDACC_RTC__
// set_mla_kv_buffer into a bf16 kv_buffer, int64 locations, every location kept; variant 0: before, 1: trigger
// after loads, 2: no prefetch (triggering where the product does).
void store_kv(int64_t variant, jitkern::TensorView kv_buffer, jitkern::TensorView loc, jitkern::TensorView k_nope,
              jitkern::TensorView k_rope) {
  using Ops = jitkern_mla_cache::MlaCacheOps<bf16>;
  const auto l = Ops::prepare<false>(kv_buffer, loc, k_nope, k_rope, {}, {}, {}, -1, 1.0, 1.0);
  host::RuntimeCheck(l.kv_rows && l.p.loc64, "the variants take 512 + 64 bf16 rows in 16-byte vectors at int64 locations");
  if (l.ctas == 0) return;
  const auto launch = [&](auto kernel, const auto& params) {
    host::LaunchKernel(static_cast<unsigned>(l.ctas), static_cast<unsigned>(kThreads), l.device).enable_pdl()(kernel, params);
  };
  const bool first = l.trigger_first;
  if (variant == 0) launch(jitkern_mla_cache::mla_cache_kernel<bf16, false, 8, true>, l.p);
  else if (variant == 1) launch(Ops::kRowsKernel<int64_t, false>, l.rows);
  else launch(first ? rows_kernel<true> : rows_kernel<false>, l.rows);
}
#endif  // __CUDACC_RTC__

}  // namespace bench_mla_cache
