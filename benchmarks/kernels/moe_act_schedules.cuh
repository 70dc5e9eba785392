// Launch schedules of the MoE activations side by side (bench_moe_act.py --schedules): the product's kernels
// (csrc/moe_act.cuh) reached through other row types, grids and widths than the product's launch rules pick,
// bf16. Each struct below is an alternative with the entry point of its form (the product's signature), its
// arguments checked by the product's own code (MoeActOps' sorted_* / masked_*).
#pragma once

#include <moe_act.cuh>

namespace bench_moe_act {

using namespace jitkern_moe_act;
constexpr int kV = device::kVec16<bf16_t>;

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

// The group form over the interleaved rows where their positions fit one turn of the grid (decode sizes),
// else by turns over the computed rows, each warp scanning the counts (the previous product's kernel).
struct HybridRows {
  InterleavedRows interleaved;
  MaskedRowsWarp computed;
};
template <int kLanes>
__global__ void __launch_bounds__(kActGroupThreads)
    group_quant_hybrid_kernel(const __grid_constant__ HybridRows rows, const bf16_t* in, uint8_t* q, float* scales, int64_t group_stride,
                              int64_t d, float eps, bool trigger_at_start) {
#ifdef __CUDACC__
  constexpr int kPerLane = kActGroupSize / kV / kLanes;
  constexpr uint32_t kGroupsPerCta = kActGroupThreads / kLanes;
  if (trigger_at_start) device::pdl_trigger_secondary();
  const InterleavedRows& ir = rows.interleaved;
  uint32_t g, e;
  const uint32_t m = ir.by_experts.divide(ir.by_groups.divide(blockIdx.x * kGroupsPerCta + threadIdx.x / kLanes, g), e);
  device::prefetch_before_wait(ir.masked_m + e);
  WaitPrimary{trigger_at_start}();
  const int32_t count = ir.masked_m[e];
  if (ir.positions() * ir.by_groups.d <= gridDim.x * kGroupsPerCta) {
    const RowAt r = ir.at(e, m, count);
    if (__any_sync(0xffffffffu, r.valid)) group_quant_item<bf16_t, kV, kLanes, kPerLane>(r, g, in, q, scales, group_stride, d, eps);
    return;
  }
  group_quant_turns<MaskedRowsWarp, bf16_t, kV, kLanes, kPerLane>(rows.computed, rows.computed.visit([] {}), in, q, scales, group_stride, d, eps);
#endif
}

#ifndef __CUDACC_RTC__
using ProductOps = MoeActOps<bf16_t>;
using TensorView = jitkern::TensorView;

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

// The masked layout's rows interleaved (InterleavedRows), as the turn kernels take them.
inline InterleavedRows interleaved_of(const ProductOps::Masked& m) {
  InterleavedRows rows;
  host::RuntimeCheck(ProductOps::interleaved(m, rows), "bench_moe_act: the interleaved rows do not take this layout");
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

// The masked group form by turns over the computed rows (rows kScan), or over the interleaved rows (kScan -1:
// the interleaved kernel; -2: the turn kernel, each turn's place worked out after the count is read; -3:
// group_quant_hybrid_kernel), kLanes
// lanes a group, at most kPerSm CTAs an SM (0: what the occupancy API fits).
template <int kScan, int kLanes, int kPerSm>
struct MaskedGroup {
  static void silu_and_mul_masked_per_token_group_quant_fp8(TensorView input, TensorView masked_m, TensorView output_q, TensorView output_s,
                                                            int64_t group_size, double eps) {
    const auto m = ProductOps::masked_group(input, masked_m, output_q, output_s, group_size, eps);
    if constexpr (kScan == -1) {
      host::RuntimeCheck(ProductOps::group_quant_interleaved<kLanes>(m, kPerSm), "bench_moe_act: the interleaved rows do not take this layout");
    } else if constexpr (kScan == -3) {
      constexpr auto kernel = group_quant_hybrid_kernel<kLanes>;
      const int64_t groups = m.op.capacity * (m.op.d / kActGroupSize);
      ProductOps::launch_group(kernel, persistent_grid<kernel>(groups, kActGroupThreads / kLanes, kActGroupThreads, kPerSm, m.op.device),
                               HybridRows{interleaved_of(m), MaskedRowsWarp{m.rows}}, m.op);
    } else {
      const auto rows = [&] {
        if constexpr (kScan == -2) return interleaved_of(m);
        else return masked_rows_of<kScan>(m.rows);
      }();
      constexpr auto kernel = silu_and_mul_group_quant_rows_kernel<decltype(rows), bf16_t, kV, kLanes, kActGroupSize / kV / kLanes>;
      const int64_t groups = m.op.capacity * (m.op.d / kActGroupSize);
      ProductOps::launch_group(kernel, persistent_grid<kernel>(groups, kActGroupThreads / kLanes, kActGroupThreads, kPerSm, m.op.device), rows, m.op);
    }
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
      ProductOps::group_quant(SortedRowsPerRow{s.rows}, s.op);
    } else {
      constexpr auto kernel = silu_and_mul_group_quant_chunks_kernel<bf16_t, kV, kLanes, kActGroupSize / kV / kLanes>;
      ProductOps::launch_group(kernel, persistent_grid<kernel>(ProductOps::chunks_in(s.rows), 1, kActGroupThreads, kOneTurn, s.op.device), s.rows,
                               s.op);
    }
  }
};
#endif  // __CUDACC_RTC__

}  // namespace bench_moe_act
