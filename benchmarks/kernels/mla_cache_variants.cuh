// The MLA cache write's alternatives beside the product (csrc/mla_cache.cuh), on the product's checked
// parameters (MlaCacheOps::prepare), set_mla_kv_buffer into a bf16 cache, int64 locations (bench_mla_cache.py
// variants):
//   before         the kernel the product took before mla_kv_rows_kernel: the fixed-row instantiation of
//                  mla_cache_kernel (Params, 192 bytes; the query rows' code);
//   warps by T     mla_kv_rows_kernel in CTAs of 1, 2 or 4 warps while the rows fill one CTA an SM at that
//                  size, else 8 (SGLang's launch);
//   no prefetch    mla_kv_rows_kernel without the location's prefetch before the PDL wait;
//   rope vectors   mla_kv_rows_kernel with k_rope in 16-byte vectors on lanes 0-7 (not a word on every lane);
//   trigger first  mla_kv_rows_kernel triggering the next launch at its start (not once its loads are issued).
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

// mla_kv_rows_kernel<1024, 128, int64_t> with its prefetch (kPrefetch), its rope form (kRopeWords: a 4-byte
// word on each lane; else 16-byte vectors on lanes 0-7) and where it triggers (kTriggerFirst: at its start)
// as parameters.
template <bool kPrefetch, bool kRopeWords, bool kTriggerFirst = false>
__global__ void __launch_bounds__(1024) rows_kernel(const __grid_constant__ RowParams p) {
#ifdef __CUDACC__
  if constexpr (kTriggerFirst) device::pdl_trigger_secondary();
  using Vec = device::AlignedVector<uint32_t, 4>;
  using Word = device::AlignedVector<uint32_t, kRopeWords ? 1 : 4>;
  constexpr int kWordBytes = sizeof(Word);
  const uint32_t row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const uint32_t lane = threadIdx.x % 32;
  if (row >= p.tokens) return;
  const int64_t* at = static_cast<const int64_t*>(p.loc) + static_cast<uint64_t>(row) * p.loc_stride;
  const char* nope = p.k_nope + static_cast<uint64_t>(row) * p.k_nope_token + lane * 16;
  const uint32_t word = kRopeWords ? lane : min(lane, 7u);
  const char* rope = p.k_rope + static_cast<uint64_t>(row) * p.k_rope_token + word * kWordBytes;
  if constexpr (kPrefetch) device::prefetch_before_wait(at);
  device::pdl_wait_primary();
  const int64_t slot = *at;
  Vec v[2];
  v[0].load_global(reinterpret_cast<const uint32_t*>(nope));
  v[1].load_global(reinterpret_cast<const uint32_t*>(nope + 512));
  Word w;
  w.load_global(reinterpret_cast<const uint32_t*>(rope));
  // (kTriggerFirst: again, without effect: ptxas otherwise sinks the row's loads past the check)
  device::pdl_trigger_secondary();
  if (static_cast<uint64_t>(slot) >= p.slots || static_cast<uint32_t>(slot) == p.skip) return;
  char* out = p.cache + static_cast<uint64_t>(static_cast<uint32_t>(slot)) * p.row_stride;
  v[0].store_global(reinterpret_cast<uint32_t*>(out + lane * 16));
  v[1].store_global(reinterpret_cast<uint32_t*>(out + lane * 16 + 512));
  if (kRopeWords || lane < 8) w.store_global(reinterpret_cast<uint32_t*>(out + 1024 + word * kWordBytes));
#endif
}

#ifndef __CUDACC_RTC__
// set_mla_kv_buffer into a bf16 kv_buffer, int64 locations, every location kept; variant 0: before, 1: warps
// by T, 2: no prefetch, 3: rope vectors, 4: trigger first.
void store_kv(int64_t variant, jitkern::TensorView kv_buffer, jitkern::TensorView loc, jitkern::TensorView k_nope,
              jitkern::TensorView k_rope) {
  using Ops = jitkern_mla_cache::MlaCacheOps<bf16>;
  const auto l = Ops::prepare<false>(kv_buffer, loc, k_nope, k_rope, {}, {}, {}, -1, 1.0, 1.0);
  host::RuntimeCheck(l.kv_rows && l.p.loc64, "the variants take 512 + 64 bf16 rows in 16-byte vectors at int64 locations");
  if (l.ctas == 0) return;
  const int64_t tokens = l.p.tokens, sms = host::runtime::get_sm_count(l.device.device_id);
  const int64_t warps = tokens <= sms ? 1 : tokens <= 2 * sms ? 2 : tokens <= 4 * sms ? 4 : 8;
  const auto launch = [&](int64_t threads, auto kernel, const auto& params) {
    host::LaunchKernel(static_cast<unsigned>(host::div_ceil(tokens * 32, threads)), static_cast<unsigned>(threads), l.device)
        .enable_pdl()(kernel, params);
  };
  if (variant == 0) launch(kThreads, jitkern_mla_cache::mla_cache_kernel<bf16, false, 8, true>, l.p);
  else if (variant == 1) launch(warps * 32, Ops::kRowsKernel<int64_t>, l.rows);
  else if (variant == 2) launch(kThreads, rows_kernel<false, true>, l.rows);
  else if (variant == 3) launch(kThreads, rows_kernel<true, false>, l.rows);
  else launch(kThreads, rows_kernel<true, true, true>, l.rows);
}
#endif  // __CUDACC_RTC__

}  // namespace bench_mla_cache
