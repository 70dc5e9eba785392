// Launch schedules of the MoE activations side by side (bench_moe_act.py --schedules): the product's kernels
// (csrc/moe_act.cuh) reached through other row types, grids and widths than the product's launch rules pick,
// bf16. Each struct at the end is an alternative with the entry point of its form (the product's signature),
// its arguments checked by the product's own code (MoeActOps' sorted_* / masked_*).
#pragma once

#include <moe_act.cuh>

#include <jitkern/impl/kv_cache.cuh>

namespace bench_moe_act {

using namespace jitkern_moe_act;
using device::quant::Rounding;
constexpr int kV = device::kVec16<bf16_t>;

// The product's InterleavedRows as a layout's rows (visit, at) for the turn kernels, every position up to
// experts * the largest count visited (read by each warp after the PDL wait).
struct InterleavedTurnRows : InterleavedRows {
  __device__ __forceinline__ uint32_t positions() const {
    return experts * static_cast<uint32_t>(device::warp::reduce_max(lane_rows()));
  }
  struct State {
    int64_t rows;
  };
  template <typename Wait>
  __device__ __forceinline__ State visit(const Wait& wait) const {
    wait();
    return {positions()};
  }
  __device__ __forceinline__ RowAt at(const State&, int64_t f) const {
    uint32_t e;
    const uint32_t m = by_experts.divide(static_cast<uint32_t>(f), e);
    return InterleavedRows::at(e, m, masked_m[e]);
  }
  using InterleavedRows::at;
};

// The masked layout's counts loaded before the PDL wait, scanned after it (a measurement of what reading
// early is worth: wrong where the previous kernel writes masked_m).
struct MaskedRowsWarpEarly : MaskedRowsWarp {
  template <typename Wait>
  __device__ __forceinline__ State visit(const Wait& wait) const {
    const int lane = static_cast<int>(threadIdx.x % device::kWarpThreads);
    const int32_t rows = lane < experts ? rows_of(lane) : 0;
    wait();
    return scan(rows);
  }
};
// A row's expert always found by bisection (no vote).
struct MaskedRowsWarpBisect : MaskedRowsWarp {
  __device__ __forceinline__ RowAt at(const State& s, int64_t f) const { return bisect(s, f); }
};
// The warp scan under another name: the launch rules take it by turns over the computed rows (no chunks).
struct MaskedRowsWarpTurns : MaskedRowsWarp {};
// The sorted layout under another name: the launch rules take it per row at every capacity (no chunks), two
// vectors a thread the grid apart.
struct SortedRowsPerRow : SortedRows {};

// The per-token form's rows in two shares: the resident CTAs (the first `resident`) stride over the first rows,
// all but kTailPercent of those below the count; the CTAs past them take the rest in runs of consecutive rows,
// each starting as a resident CTA ends, so that the SMs whose rows were more often padding take more of them.
template <typename T, int kVec, device::norm::RowFit kFit, int kTailPercent>
__global__ void __launch_bounds__(kRowThreadsBound)
    token_quant_tail_kernel(const __grid_constant__ SortedRows rows, const T* in, uint8_t* q, float* scales, int64_t d, uint32_t resident,
                            bool trigger_at_start) {
#ifdef __CUDACC__
  if (trigger_at_start) device::pdl_trigger_secondary();
  const device::norm::CtaGroup<false> group;
  const auto state = rows.visit(WaitPrimary{trigger_at_start});
  const int64_t n = state.limit <= 0 ? 0 : (state.limit < state.rows ? state.limit : state.rows);
  const int64_t split = n - n * kTailPercent / 100;
  int64_t f = blockIdx.x, end = split, step = resident;
  if (blockIdx.x >= resident) {  // a run of the tail
    const int64_t runs = gridDim.x - resident, per = (n - split + runs - 1) / runs;
    f = split + (blockIdx.x - resident) * per, end = f + per < n ? f + per : n, step = 1;
  }
  for (; f < end; f += step) {
    const RowAt r = rows.at(state, f);
    if (r.valid) token_quant_row<T, kVec, kFit, kRowRegVecs>(group, r, in, q, scales, d);
  }
#endif
}

// The per-token form by chunks of kRows consecutive rows, a CTA per chunk (for_each_sorted_chunk): the CTA
// quantizes its chunk's computed rows one after another, so that the hardware evens out the SMs at a CTA's
// start per chunk rather than per row. Its registers bounded for kCtas CTAs of kThreads threads an SM.
template <typename T, int kVec, device::norm::RowFit kFit, int kRows, int kThreads, int kCtas>
__global__ void __launch_bounds__(kThreads, kCtas)
    token_quant_chunks_kernel(const __grid_constant__ SortedRows rows, const T* in, uint8_t* q, float* scales, int64_t d, bool trigger_at_start) {
#ifdef __CUDACC__
  if (trigger_at_start) device::pdl_trigger_secondary();
  const device::norm::CtaGroup<false> group;
  for_each_sorted_chunk<kRows>(rows, WaitPrimary{trigger_at_start}, [&](int64_t first_row, const int32_t* list, int n) {
    for (int j = 0; j < n; ++j) token_quant_row<T, kVec, kFit, kRowRegVecs>(group, rows.at(first_row + list[j], true), in, q, scales, d);
  });
#endif
}

#ifndef __CUDACC_RTC__
using ProductOps = MoeActOps<bf16_t>;
using TensorView = jitkern::TensorView;

// The product with the group forms' entry points of rounding policy kRounding (the others as they are).
template <Rounding kRounding = Rounding::kExact>
struct Product : ProductOps {
  static void silu_and_mul_masked_per_token_group_quant_fp8(TensorView input, TensorView masked_m, TensorView output_q, TensorView output_s,
                                                            int64_t group_size, double eps) {
    ProductOps::silu_and_mul_masked_per_token_group_quant_fp8<kRounding>(input, masked_m, output_q, output_s, group_size, eps);
  }
  static void silu_and_mul_sorted_per_token_group_quant_fp8(TensorView input, TensorView ids, TensorView post_pad, int64_t num_ids,
                                                            TensorView output_q, TensorView output_s, int64_t group_size, double eps) {
    ProductOps::silu_and_mul_sorted_per_token_group_quant_fp8<kRounding>(input, ids, post_pad, num_ids, output_q, output_s, group_size, eps);
  }
};

// The masked layout's rows by kScan: 0 the CTA's scan in shared memory, 1 each warp's (the product's), 2 each
// warp's with masked_m read before the wait, 3 each warp's with a row's expert by bisection, 4 each warp's by turns.
template <int kScan>
auto masked_rows_of(const MaskedLayout& layout) {
  host::RuntimeCheck(kScan == 0 || layout.experts <= MaskedRowsWarp::kMaxWarpExperts, "bench_moe_act: the warp scans take at most 32 experts");
  if constexpr (kScan == 0) return MaskedRows{layout};
  else if constexpr (kScan == 1) return MaskedRowsWarp{layout};
  else if constexpr (kScan == 2) return MaskedRowsWarpEarly{{layout}};
  else if constexpr (kScan == 3) return MaskedRowsWarpBisect{{layout}};
  else return MaskedRowsWarpTurns{{layout}};
}

// The masked layout's rows interleaved (InterleavedTurnRows), where the product's rule for them allows.
inline InterleavedTurnRows interleaved_of(const ProductOps::Masked& m) {
  InterleavedTurnRows rows;
  host::RuntimeCheck(ProductOps::interleaved<Rounding::kSglang>(m, rows), "bench_moe_act: the interleaved rows do not take this layout");
  return rows;
}

// silu_and_mul_masked by the launch rules over rows kScan.
template <int kScan>
struct MaskedAct {
  static void silu_and_mul_masked(TensorView input, TensorView masked_m, TensorView out) {
    const auto m = ProductOps::masked_act(input, masked_m, out);
    ProductOps::elementwise(masked_rows_of<kScan>(m.rows), m.op);
  }
};
// ... over the interleaved rows (the turn kernel: kMaskedVecs vectors a thread, the grid apart).
struct MaskedActInterleaved {
  static void silu_and_mul_masked(TensorView input, TensorView masked_m, TensorView out) {
    const auto m = ProductOps::masked_act(input, masked_m, out);
    ProductOps::elementwise(interleaved_of(m), m.op);
  }
};

// The masked group form by the product's interleaved kernel in CTAs of kThreads threads, its registers bounded
// for kCtas CTAs an SM, its warps in the order kSpread (MoeActOps::group_quant_interleaved's), rounding kRounding.
template <int kThreads, int kCtas, bool kSpread, Rounding kRounding = Rounding::kExact>
struct MaskedGroupWidth {
  static void silu_and_mul_masked_per_token_group_quant_fp8(TensorView input, TensorView masked_m, TensorView output_q, TensorView output_s,
                                                            int64_t group_size, double eps) {
    const auto m = ProductOps::masked_group(input, masked_m, output_q, output_s, group_size, eps);
    InterleavedRows rows;
    host::RuntimeCheck(ProductOps::interleaved<kRounding>(m, rows), "bench_moe_act: the interleaved rows do not take this layout");
    ProductOps::group_quant_interleaved<kRounding, kThreads, kCtas, kSpread>(rows, m.op);
  }
};

// The masked group form by the previous product's kernel (silu_and_mul_group_quant_masked_kernel), kLanes lanes
// a group, at most kPerSm CTAs an SM (0: what the occupancy API fits, the previous product's).
template <int kLanes, Rounding kRounding, int kPerSm = 0>
struct MaskedGroupMasked {
  static void silu_and_mul_masked_per_token_group_quant_fp8(TensorView input, TensorView masked_m, TensorView output_q, TensorView output_s,
                                                            int64_t group_size, double eps) {
    const auto m = ProductOps::masked_group(input, masked_m, output_q, output_s, group_size, eps);
    const int64_t groups = m.op.capacity * (m.op.d / kActGroupSize);
    host::RuntimeCheck(m.op.vec == kV && m.experts <= MaskedRowsWarp::kMaxWarpExperts && groups < (int64_t{1} << 31),
                       "bench_moe_act: the masked kernel takes aligned rows of at most 32 experts");
    constexpr auto kernel = silu_and_mul_group_quant_masked_kernel<MaskedRowsWarp, bf16_t, kV, kLanes, kActGroupSize / kV / kLanes, kRounding>;
    const unsigned grid = persistent_grid(kernel, groups, kActGroupThreads / kLanes, kActGroupThreads, kPerSm, m.op.device);
    host::LaunchKernel(grid, kActGroupThreads, m.op.device)
        .enable_pdl()(kernel, MaskedRowsWarp{m.rows}, m.op.in, static_cast<uint8_t*>(m.op.out), m.op.scales, m.op.group_stride, m.op.d, m.op.eps,
                      host::kv_cache::divisor<uint32_t>(m.op.d / kActGroupSize), host::pdl_early_trigger(grid));
  }
};

// The masked per-token form by the launch rules over rows kScan.
template <int kScan>
struct MaskedToken {
  static void silu_and_mul_masked_per_token_quant_fp8(TensorView input, TensorView masked_m, TensorView output_q, TensorView output_s) {
    const auto m = ProductOps::masked_token(input, masked_m, output_q, output_s);
    ProductOps::token_quant(masked_rows_of<kScan>(m.rows), m.op);
  }
};
// ... over the interleaved rows (a CTA a position).
struct MaskedTokenInterleaved {
  static void silu_and_mul_masked_per_token_quant_fp8(TensorView input, TensorView masked_m, TensorView output_q, TensorView output_s) {
    const auto m = ProductOps::masked_token(input, masked_m, output_q, output_s);
    ProductOps::token_quant(interleaved_of(m), m.op);
  }
};

// The sorted per-token form on the grid of persistent_grid's kPerSm (kOneTurn: a CTA a row).
template <int kPerSm>
struct SortedToken {
  static void silu_and_mul_sorted_per_token_quant_fp8(TensorView input, TensorView ids, TensorView post_pad, int64_t num_ids, TensorView output_q,
                                                      TensorView output_s) {
    const auto s = ProductOps::sorted_token(input, ids, post_pad, num_ids, output_q, output_s);
    ProductOps::token_quant<kPerSm>(s.rows, s.op);
  }
};

// The sorted per-token form's arguments, checked by the product's code, for the schedules built for d = 2048 (bf16,
// aligned: a CTA of kTokenRowThreads threads holds a row).
constexpr int kTokenRowThreads = 128;
inline ProductOps::Sorted sorted_token_rows_of_2048(TensorView input, TensorView ids, TensorView post_pad, int64_t num_ids, TensorView output_q,
                                                    TensorView output_s) {
  const auto s = ProductOps::sorted_token(input, ids, post_pad, num_ids, output_q, output_s);
  host::RuntimeCheck(s.op.vec == kV && s.op.d == int64_t{kTokenRowThreads} * kRowRegVecs * kV, "bench_moe_act: this schedule takes d = ",
                     kTokenRowThreads * kRowRegVecs * kV, " (bf16, aligned), got ", s.op.d);
  return s;
}

// The sorted per-token form a CTA a row (bf16, d = 2048: CTAs of 128 threads) on kTimes times the resident CTAs.
template <int kTimes>
struct SortedTokenTimes {
  static void silu_and_mul_sorted_per_token_quant_fp8(TensorView input, TensorView ids, TensorView post_pad, int64_t num_ids, TensorView output_q,
                                                      TensorView output_s) {
    const auto s = sorted_token_rows_of_2048(input, ids, post_pad, num_ids, output_q, output_s);
    if (s.op.capacity == 0) return;
    constexpr auto kernel = silu_and_mul_token_quant_rows_kernel<SortedRows, bf16_t, kV, device::norm::RowFit::kExact>;
    const int64_t resident = int64_t{host::runtime::get_sm_count(s.op.device.device_id)} *
                             host::runtime::resident_ctas_per_sm(kernel, kTokenRowThreads, 0, s.op.device.device_id);
    ProductOps::launch_token(kernel, static_cast<unsigned>(host::min(s.op.capacity, resident * kTimes)), kTokenRowThreads, s.rows, s.op);
  }
};

// The sorted per-token form (bf16, d = 2048: CTAs of 128 threads) by token_quant_tail_kernel: the resident CTAs and
// kTailRuns runs an SM for the last kTailPercent of the rows.
template <int kTailPercent, int kTailRuns>
struct SortedTokenTail {
  static_assert(kTailRuns >= 1 && kTailPercent >= 0 && kTailPercent <= 100, "the tail's rows need CTAs of their own");
  static void silu_and_mul_sorted_per_token_quant_fp8(TensorView input, TensorView ids, TensorView post_pad, int64_t num_ids, TensorView output_q,
                                                      TensorView output_s) {
    const auto s = sorted_token_rows_of_2048(input, ids, post_pad, num_ids, output_q, output_s);
    if (s.op.capacity == 0) return;
    constexpr auto kernel = token_quant_tail_kernel<bf16_t, kV, device::norm::RowFit::kExact, kTailPercent>;
    const int sms = host::runtime::get_sm_count(s.op.device.device_id);
    const int64_t resident = host::min(s.op.capacity, int64_t{sms} * host::runtime::resident_ctas_per_sm(kernel, kTokenRowThreads, 0,
                                                                                                         s.op.device.device_id));
    const int64_t grid = resident + host::min(s.op.capacity, int64_t{sms} * kTailRuns);
    host::LaunchKernel(static_cast<unsigned>(grid), kTokenRowThreads, s.op.device)
        .enable_pdl()(kernel, s.rows, s.op.in, static_cast<uint8_t*>(s.op.out), s.op.scales, s.op.d, static_cast<uint32_t>(resident),
                      host::pdl_early_trigger(grid));
  }
};

// The sorted per-token form (bf16, d = 2048: CTAs of 128 threads) by token_quant_chunks_kernel, a CTA per chunk of
// kRows rows, where the capacity holds a chunk of kChunkRows an SM (the product's launch below that).
template <int kRows>
struct SortedTokenChunks {
  static void silu_and_mul_sorted_per_token_quant_fp8(TensorView input, TensorView ids, TensorView post_pad, int64_t num_ids, TensorView output_q,
                                                      TensorView output_s) {
    const auto s = sorted_token_rows_of_2048(input, ids, post_pad, num_ids, output_q, output_s);
    if (!ProductOps::sorted_chunks(s.op)) return ProductOps::token_quant(s.rows, s.op);
    constexpr auto kernel = token_quant_chunks_kernel<bf16_t, kV, device::norm::RowFit::kExact, kRows, kTokenRowThreads, 16>;
    const int64_t grid = host::div_ceil(s.op.capacity, int64_t{kRows});
    host::RuntimeCheck(grid <= 0x7fffffff, "bench_moe_act: the input is too large for one launch (", grid, " CTAs)");
    ProductOps::launch_token(kernel, static_cast<unsigned>(grid), kTokenRowThreads, s.rows, s.op);
  }
};

// The sorted group form a warp a row (silu_and_mul_group_quant_warps_kernel), kLanes lanes a group, kWarps warps a
// CTA, on persistent_grid's kPerSm (kOneTurn: a row per warp), with the divisions' range tests (the product skips
// them under the exact rounding where eps allows).
template <int kWarps, int kLanes, int kPerSm, Rounding kRounding = Rounding::kExact>
struct SortedGroupWarps {
  static_assert(kWarps * device::kWarpThreads <= kActGroupThreads, "the kernel's launch bound: kActGroupThreads threads a CTA");
  static void silu_and_mul_sorted_per_token_group_quant_fp8(TensorView input, TensorView ids, TensorView post_pad, int64_t num_ids,
                                                            TensorView output_q, TensorView output_s, int64_t group_size, double eps) {
    const auto s = ProductOps::sorted_group(input, ids, post_pad, num_ids, output_q, output_s, group_size, eps);
    if (s.op.capacity * s.op.d == 0) return;
    host::RuntimeCheck(s.op.vec == kV, "bench_moe_act: this schedule takes aligned rows");
    constexpr int kThreads = kWarps * device::kWarpThreads;
    constexpr auto kernel = silu_and_mul_group_quant_warps_kernel<SortedRows, bf16_t, kV, kLanes, kActGroupSize / kV / kLanes, kRounding>;
    const unsigned grid = persistent_grid(kernel, s.op.capacity, kWarps, kThreads, kPerSm, s.op.device);
    host::LaunchKernel(grid, kThreads, s.op.device)
        .enable_pdl()(kernel, s.rows, s.op.in, static_cast<uint8_t*>(s.op.out), s.op.scales, s.op.group_stride, s.op.d, s.op.eps,
                      host::pdl_early_trigger(grid));
  }
};

// The sorted group form by the product's chunks (4 vectors a lane), their registers bounded for kCtas CTAs an SM
// (0: unbounded, the product's launch before it took a warp a row from four chunks an SM), the product's launch
// below a chunk an SM.
template <int kCtas, Rounding kRounding = Rounding::kExact>
struct SortedGroupBounded {
  static void silu_and_mul_sorted_per_token_group_quant_fp8(TensorView input, TensorView ids, TensorView post_pad, int64_t num_ids,
                                                            TensorView output_q, TensorView output_s, int64_t group_size, double eps) {
    const auto s = ProductOps::sorted_group(input, ids, post_pad, num_ids, output_q, output_s, group_size, eps);
    if (s.op.capacity * s.op.d == 0) return;
    if (!ProductOps::sorted_chunks(s.op)) return ProductOps::group_quant<kRounding>(s.rows, s.op);
    host::RuntimeCheck(s.op.vec == kV, "bench_moe_act: this schedule takes aligned rows");
    constexpr int kLanes = ProductOps::kChunkLanes<kV>;
    constexpr auto kernel = silu_and_mul_group_quant_chunks_kernel<bf16_t, kV, kLanes, kActGroupSize / kV / kLanes, kRounding, kCtas>;
    ProductOps::launch_group(kernel, persistent_grid(kernel, ProductOps::chunks_in(s.rows), 1, kActGroupThreads, kOneTurn, s.op.device), s.rows,
                             s.op);
  }
};

// The sorted layout per row at every capacity.
struct SortedActPerRow {
  static void silu_and_mul_sorted(TensorView input, TensorView ids, TensorView post_pad, int64_t num_ids, TensorView out) {
    const auto s = ProductOps::sorted_act(input, ids, post_pad, num_ids, out);
    ProductOps::elementwise(SortedRowsPerRow{s.rows}, s.op);
  }
};
// The sorted group form per row at every capacity (kLanes 0), or by chunks of kChunkRows, a CTA each, kLanes
// lanes a group at every capacity.
template <int kLanes>
struct SortedGroup {
  static void silu_and_mul_sorted_per_token_group_quant_fp8(TensorView input, TensorView ids, TensorView post_pad, int64_t num_ids,
                                                            TensorView output_q, TensorView output_s, int64_t group_size, double eps) {
    const auto s = ProductOps::sorted_group(input, ids, post_pad, num_ids, output_q, output_s, group_size, eps);
    if constexpr (kLanes == 0) {
      ProductOps::group_quant<Rounding::kExact>(SortedRowsPerRow{s.rows}, s.op);
    } else {
      constexpr auto kernel = silu_and_mul_group_quant_chunks_kernel<bf16_t, kV, kLanes, kActGroupSize / kV / kLanes, Rounding::kExact>;
      ProductOps::launch_group(kernel, persistent_grid(kernel, ProductOps::chunks_in(s.rows), 1, kActGroupThreads, kOneTurn, s.op.device), s.rows,
                               s.op);
    }
  }
};
#endif  // __CUDACC_RTC__

}  // namespace bench_moe_act
