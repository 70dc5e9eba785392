// Launch schedules of the MoE activations side by side (bench_moe_act.py --schedules): the product's entry
// points (csrc/moe_act.cuh) under other Schedules than the product's, bf16. Sched<kScan, kPerSm, kItems,
// kGroupItems, kLoadAll, kSpread, kChunkRows, kPipelined, kMaskedChunk, kTokenWarp, kGroupVecs, kContig,
// kTurnsFirst>:
//   kScan: the masked layout's counts scanned by the CTA into shared memory (0), by each warp where the
//          experts fit a warp (1), or as 1 with masked_m read before the PDL wait (2: a measurement of what
//          reading early is worth; wrong where the previous kernel writes masked_m), or as 1 with a row's
//          expert always found by bisection (3: MaskedRowsWarpBisect);
//   kPerSm: persistent_grid's CTAs per SM (-1: threads_per_sm / threads, 0: the occupancy API's, k: at most k,
//           -2: kOneTurn, no limit);
//   kItems, kGroupItems, kSpread, kPipelined: TurnSchedule's, for both layouts (and the chunks' items);
//   kLoadAll: Schedule's kLoadAllBytes;
//   kChunkRows: the sorted layout by chunks of that many rows, every form, at every capacity (0: none);
//   kMaskedChunk: the masked layout by chunks of that many rows of an expert (silu_and_mul and the group form;
//                 the per-token form too with kTokenWarp), -R: at most R, fewer where the rows are few (0: none);
//   kTokenWarp: the per-token form by chunks a row per warp; kGroupVecs, kContig: the group form's vectors a
//               lane in the chunks, one after another; kTurnsFirst: the masked chunks' rows by turns where they
//               fit one turn of the grid (ChunkSchedule's).
#pragma once

#include <moe_act.cuh>

namespace bench_moe_act {

using namespace jitkern_moe_act;

// kScan 2's rows: the counts loaded before the wait, scanned after it.
struct MaskedRowsWarpEarly : MaskedRowsWarp {
  template <typename Wait>
  __device__ __forceinline__ State visit(const Wait& wait) const {
    const int lane = static_cast<int>(threadIdx.x % device::kWarpThreads);
    const int32_t rows = lane < experts ? rows_of(lane) : 0;
    wait();
    return scan(rows);
  }
};

// kScan 3's rows: a row's expert always found by bisection (no vote).
struct MaskedRowsWarpBisect : MaskedRowsWarp {
  __device__ __forceinline__ RowAt at(const State& s, int64_t f) const { return bisect(s, f); }
};

#ifndef __CUDACC_RTC__
template <int kScan, int kPerSm, int kItems, int kGroupItems, int64_t kLoadAll, int kSpread, int kChunkRows, int kPipelined, int kMaskedChunk,
          int kTokenWarp, int kGroupVecs, int kContig, int kTurnsFirst>
struct Sched {
  using Masked = TurnSchedule<kItems, kGroupItems, kSpread != 0, kPipelined != 0, kPerSm>;
  using Sorted = Masked;
  using Chunks = ChunkSchedule<kChunkRows, kChunkRows, kChunkRows, kItems, kGroupItems, kPerSm, false, kTokenWarp != 0, kGroupVecs, kContig != 0>;
  static constexpr int kMaskedRows = kMaskedChunk < 0 ? -kMaskedChunk : kMaskedChunk;
  using MaskedChunks = ChunkSchedule<kMaskedRows, kMaskedRows, kTokenWarp ? kMaskedRows : 0, kItems, kGroupItems, kPerSm, (kMaskedChunk < 0),
                                     kTokenWarp != 0, kGroupVecs, kContig != 0, kTurnsFirst != 0>;
  static constexpr int64_t kLoadAllBytes = kLoadAll;
  static bool chunked(int64_t, int, DLDevice) { return true; }
  template <typename F>
  static void masked_rows(const MaskedLayout& layout, F&& f) {
    if constexpr (kScan == 0) {
      f(MaskedRows{layout});
    } else {
      host::RuntimeCheck(layout.experts <= MaskedRowsWarp::kMaxWarpExperts, "bench_moe_act: the warp scans take at most 32 experts");
      if constexpr (kScan == 1) {
        f(MaskedRowsWarp{layout});
      } else if constexpr (kScan == 2) {
        f(MaskedRowsWarpEarly{layout});
      } else {
        f(MaskedRowsWarpBisect{layout});
      }
    }
  }
};

template <int kScan, int kPerSm, int kItems, int kGroupItems, int64_t kLoadAll, int kSpread, int kChunkRows, int kPipelined, int kMaskedChunk,
          int kTokenWarp, int kGroupVecs, int kContig, int kTurnsFirst>
using Ops = MoeActOps<bf16_t, Sched<kScan, kPerSm, kItems, kGroupItems, kLoadAll, kSpread, kChunkRows, kPipelined, kMaskedChunk, kTokenWarp,
                                    kGroupVecs, kContig, kTurnsFirst>>;
using ProductOps = MoeActOps<bf16_t>;
#endif  // __CUDACC_RTC__

}  // namespace bench_moe_act
