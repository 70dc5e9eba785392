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

// The masked layout with 32-bit offsets (every one below 2^32, checked on the host), its rows interleaved:
// position p is row p / experts of expert p % experts, so that a position's place in the buffers is known
// before the counts are read (no scan: the first load after the PDL wait is the position's count, then its
// data). Positions are visited up to experts * the largest count; a position at or past its expert's count
// is not computed.
struct InterleavedRows {
  const int32_t* masked_m;
  int32_t m_max;
  uint32_t experts;
  uint32_t in_expert, in_row, out_expert, out_row, scale_expert, scale_row;
  device::kv_cache::Divisor32 by_experts, by_groups;  // experts; groups a row (d / kActGroupSize)

  // Experts * the largest count (within [0, M]), read by each warp after the PDL wait.
  __device__ __forceinline__ uint32_t positions() const {
    const int lane = static_cast<int>(threadIdx.x % device::kWarpThreads);
    int32_t most = lane < static_cast<int>(experts) ? masked_m[lane] : 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    most = __reduce_max_sync(0xffffffffu, most);
#else
    most = device::warp::reduce_max(most);
#endif
    return experts * static_cast<uint32_t>(most <= 0 ? 0 : (most < m_max ? most : m_max));
  }
  // Row m of expert e, computed where m is below its count.
  __device__ __forceinline__ RowAt at(uint32_t e, uint32_t m, int32_t count) const {
    const bool valid = static_cast<int32_t>(m) < count && static_cast<int32_t>(m) < m_max;
    return {valid, int64_t{e * in_expert + m * in_row}, int64_t{e * out_expert + m * out_row}, int64_t{e * scale_expert + m * scale_row}};
  }
  // As a layout's rows (visit, at) for the turn kernels: position f's row.
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
    return at(e, m, masked_m[e]);
  }
};

// The group form over InterleavedRows: a group per lane set and turn, kLanes lanes of kPerLane vectors (as
// group_quant_turns'), the groups of positions in order (ptxas works out the first place after the wait),
// rounding policy kRounding.
template <typename T, int kVec, int kLanes, int kPerLane, Rounding kRounding>
__global__ void __launch_bounds__(kActGroupThreads)
    silu_and_mul_group_quant_interleaved_kernel(const __grid_constant__ InterleavedRows rows, const T* in, uint8_t* q, float* scales,
                                                int64_t group_stride, int64_t d, float eps, bool trigger_at_start) {
#ifdef __CUDACC__
  constexpr uint32_t kGroupsPerCta = kActGroupThreads / kLanes;
  if (trigger_at_start) device::pdl_trigger_secondary();
  const uint32_t turn = gridDim.x * kGroupsPerCta, groups_per_row = rows.by_groups.d;
  uint32_t first = blockIdx.x * kGroupsPerCta, e, m, g;
  const auto place = [&](uint32_t group) {  // the lane set's position's expert e, row m and group g
    const uint32_t p = rows.by_groups.divide(group, g);
    m = rows.by_experts.divide(p, e);
  };
  place(first + threadIdx.x / kLanes);
  WaitPrimary{trigger_at_start}();
  int32_t count = rows.masked_m[e];
  const uint32_t total = rows.positions() * groups_per_row;
  do {
    const RowAt r = rows.at(e, m, count);
    // A warp with no group to compute skips the turn (the group's shuffles take whole warps either way).
    if (__any_sync(0xffffffffu, r.valid)) group_quant_item<T, kVec, kLanes, kPerLane, kRounding>(r, g, in, q, scales, group_stride, d, eps);
    first += turn;
    if (first < total) {
      place(first + threadIdx.x / kLanes);
      count = rows.masked_m[e];
    }
  } while (first < total);
#endif
}

// The masked group form's kernel (silu_and_mul_group_quant_masked_kernel's turns) with the row counts
// guessed before the PDL wait: warp 0 of each CTA reads them from L2 (ld.global.cg: L1 keeps no line the wait
// could leave stale; one load a CTA, not a warp) and shares them through shared memory; each warp places its
// first turn from the guess; after the wait the counts (ordinary loads, each warp) and that turn's data load
// together, and the turn goes on only where the counts equal the guess, else the turns start over from them.
template <int kLanes, Rounding kRounding>
__global__ void __launch_bounds__(kActGroupThreads)
    group_quant_guess_kernel(const __grid_constant__ MaskedRowsWarp rows, const bf16_t* in, uint8_t* q, float* scales, int64_t group_stride,
                             int64_t d, float eps, device::kv_cache::Divisor32 by_groups, bool trigger_at_start) {
#ifdef __CUDACC__
  constexpr int kPerLane = kActGroupSize / kV / kLanes;
  constexpr uint32_t kGroupsPerWarp = device::kWarpThreads / kLanes, kGroupsPerCta = kActGroupThreads / kLanes;
  __shared__ int32_t guesses[device::kWarpThreads];
  if (trigger_at_start) device::pdl_trigger_secondary();
  const int lane = static_cast<int>(threadIdx.x % device::kWarpThreads);
  const uint32_t mine = lane / kLanes, turn = gridDim.x * kGroupsPerCta;
  uint32_t first = blockIdx.x * kGroupsPerCta + threadIdx.x / device::kWarpThreads * kGroupsPerWarp;
  uint32_t f, g, row, last;
  const auto place = [&] {
    uint32_t unused;
    f = by_groups.divide(first + mine, g), row = by_groups.divide(first, unused), last = by_groups.divide(first + kGroupsPerWarp - 1, unused);
  };
  const auto locate = [&](const MaskedRowsWarp::State& s) {
    RowAt r = row == last ? rows.in_row(s, static_cast<int32_t>(row)) : rows.bisect(s, f);
    r.valid = r.valid && first + mine < static_cast<uint32_t>(s.rows) * by_groups.d;
    return r;
  };
  const int e = lane < rows.experts ? lane : rows.experts - 1;  // in bounds, no branch around the loads
  if (threadIdx.x < device::kWarpThreads) {
    const int32_t m = __ldcg(rows.masked_m + e);
    guesses[lane] = lane < rows.experts && m > 0 ? (m < rows.m_max ? m : rows.m_max) : 0;
  }
  __syncthreads();
  const int32_t guess = guesses[lane];
  MaskedRowsWarp::State s = rows.scan(guess);
  place();
  const RowAt r = locate(s);
  WaitPrimary{trigger_at_start}();
  const int32_t m = rows.rows_of(e), count = lane < rows.experts ? m : 0;
  const auto x = load_group<bf16_t, kV, kLanes, kPerLane>(r, g, in, d);  // in flight with the counts
  if (__all_sync(0xffffffffu, count == guess)) {
    if (__any_sync(0xffffffffu, r.valid)) quantize_loaded<bf16_t, kV, kLanes, kPerLane, kRounding>(x, r, g, q, scales, group_stride, eps);
    first += turn;
  } else {
    s = rows.scan(count);
  }
  place();
  const uint32_t total = static_cast<uint32_t>(s.rows) * by_groups.d;
  while (first < total) {  // warp-uniform
    group_quant_item<bf16_t, kV, kLanes, kPerLane, kRounding>(locate(s), g, in, q, scales, group_stride, d, eps);
    first += turn;
    place();
  }
#endif
}

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

// The masked layout's rows interleaved (InterleavedRows): at most 32 experts, every offset within 32 bits.
inline InterleavedRows interleaved_of(const ProductOps::Masked& m) {
  const MaskedLayout& l = m.rows;
  const auto end = [&](int64_t se, int64_t sm, int64_t row) { return (m.experts - 1) * se + (m.m_max - 1) * sm + row; };
  host::RuntimeCheck(m.op.capacity * m.op.d > 0 && m.experts <= MaskedRowsWarp::kMaxWarpExperts && end(l.in_expert, l.in_row, 2 * m.op.d) <= UINT32_MAX &&
                         end(l.out_expert, l.out_row, m.op.d) <= UINT32_MAX && end(l.scale_expert, l.scale_row, 1) <= UINT32_MAX &&
                         m.op.capacity * (m.op.d / kActGroupSize) < (int64_t{1} << 31),
                     "bench_moe_act: the interleaved rows do not take this layout");
  const auto narrow = [](int64_t v) { return static_cast<uint32_t>(v); };
  return {l.masked_m,
          l.m_max,
          narrow(m.experts),
          narrow(l.in_expert),
          narrow(l.in_row),
          narrow(l.out_expert),
          narrow(l.out_row),
          narrow(l.scale_expert),
          narrow(l.scale_row),
          host::kv_cache::divisor<uint32_t>(m.experts),
          host::kv_cache::divisor<uint32_t>(std::max<int64_t>(m.op.d / kActGroupSize, 1))};
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

// The masked group form by the turn kernel over the computed rows (rows kScan; kScan 1: the previous
// product), or over the interleaved rows (kScan -5: the interleaved kernel), kLanes lanes a group, at most
// kPerSm CTAs an SM (0: what the occupancy API fits), rounding policy kRounding.
template <int kScan, int kLanes, int kPerSm, Rounding kRounding = Rounding::kExact>
struct MaskedGroup {
  static void silu_and_mul_masked_per_token_group_quant_fp8(TensorView input, TensorView masked_m, TensorView output_q, TensorView output_s,
                                                            int64_t group_size, double eps) {
    const auto m = ProductOps::masked_group(input, masked_m, output_q, output_s, group_size, eps);
    if constexpr (kScan == -5) {
      constexpr auto kernel = silu_and_mul_group_quant_interleaved_kernel<bf16_t, kV, kLanes, kActGroupSize / kV / kLanes, kRounding>;
      const int64_t groups = m.op.capacity * (m.op.d / kActGroupSize);
      host::RuntimeCheck(m.op.vec == kV, "bench_moe_act: the interleaved kernel takes aligned rows");
      ProductOps::launch_group(kernel, persistent_grid<kernel>(groups, kActGroupThreads / kLanes, kActGroupThreads, kPerSm, m.op.device),
                               interleaved_of(m), m.op);
    } else {
      const auto rows = masked_rows_of<kScan>(m.rows);
      constexpr auto kernel = silu_and_mul_group_quant_rows_kernel<decltype(rows), bf16_t, kV, kLanes, kActGroupSize / kV / kLanes, kRounding>;
      const int64_t groups = m.op.capacity * (m.op.d / kActGroupSize);
      ProductOps::launch_group(kernel, persistent_grid<kernel>(groups, kActGroupThreads / kLanes, kActGroupThreads, kPerSm, m.op.device), rows,
                               m.op);
    }
  }
};

// A kernel of silu_and_mul_group_quant_masked_kernel's arguments on `grid` CTAs over m's rows.
template <typename Kernel>
void launch_masked_group(Kernel kernel, unsigned grid, const ProductOps::Masked& m) {
  host::LaunchKernel(grid, kActGroupThreads, m.op.device)
      .enable_pdl()(kernel, MaskedRowsWarp{m.rows}, m.op.in, static_cast<uint8_t*>(m.op.out), m.op.scales, m.op.group_stride, m.op.d, m.op.eps,
                    host::kv_cache::divisor<uint32_t>(m.op.d / kActGroupSize), host::pdl_early_trigger(grid));
}

// The masked group form by the product's masked kernel (silu_and_mul_group_quant_masked_kernel), or with
// kGuess by group_quant_guess_kernel, kLanes lanes a group, at most kPerSm CTAs an SM (0: what the occupancy
// API fits, the product's).
template <int kLanes, Rounding kRounding, int kPerSm = 0, bool kGuess = false>
struct MaskedGroupMasked {
  static void silu_and_mul_masked_per_token_group_quant_fp8(TensorView input, TensorView masked_m, TensorView output_q, TensorView output_s,
                                                            int64_t group_size, double eps) {
    const auto m = ProductOps::masked_group(input, masked_m, output_q, output_s, group_size, eps);
    const int64_t groups = m.op.capacity * (m.op.d / kActGroupSize);
    host::RuntimeCheck(m.op.vec == kV && m.experts <= MaskedRowsWarp::kMaxWarpExperts && groups < (int64_t{1} << 31),
                       "bench_moe_act: the masked kernels take aligned rows of at most 32 experts");
    if constexpr (kGuess) {
      constexpr auto kernel = group_quant_guess_kernel<kLanes, kRounding>;
      launch_masked_group(kernel, persistent_grid<kernel>(groups, kActGroupThreads / kLanes, kActGroupThreads, kPerSm, m.op.device), m);
    } else {
      constexpr auto kernel = silu_and_mul_group_quant_masked_kernel<MaskedRowsWarp, bf16_t, kV, kLanes, kActGroupSize / kV / kLanes, kRounding>;
      launch_masked_group(kernel, persistent_grid<kernel>(groups, kActGroupThreads / kLanes, kActGroupThreads, kPerSm, m.op.device), m);
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
      ProductOps::group_quant<Rounding::kExact>(SortedRowsPerRow{s.rows}, s.op);
    } else {
      constexpr auto kernel = silu_and_mul_group_quant_chunks_kernel<bf16_t, kV, kLanes, kActGroupSize / kV / kLanes, Rounding::kExact>;
      ProductOps::launch_group(kernel, persistent_grid<kernel>(ProductOps::chunks_in(s.rows), 1, kActGroupThreads, kOneTurn, s.op.device), s.rows,
                               s.op);
    }
  }
};
#endif  // __CUDACC_RTC__

}  // namespace bench_moe_act
