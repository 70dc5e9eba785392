// Launch schedules of the MoE activations side by side (bench_moe_act.py --schedules): the product's entry
// points (csrc/moe_act.cuh) under other Schedules than the product's, bf16. Sched<kScan, kPerSm, kItems,
// kGroupItems, kLoadAll, kSpread, kChunkRows, kPipelined>:
//   kScan: the masked layout's counts scanned by the CTA into shared memory (0), by each warp where the
//          experts fit a warp (1), or as 1 with masked_m read before the PDL wait (2: a measurement of what
//          reading early is worth; wrong where the previous kernel writes masked_m), or as 1 with a row's
//          expert found by a vote (3: MaskedRowsWarpVote);
//   kPerSm: persistent_grid's CTAs per SM (-1: threads_per_sm / threads, 0: the occupancy API's, k: at most k,
//           -2: kOneTurn, no limit);
//   kItems, kGroupItems, kLoadAll, kSpread, kChunkRows, kPipelined: Schedule's kItems, kGroupItems,
//           kLoadAllBytes, kSpread, kChunkRows, kPipelined.
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

// kScan 3's rows: a row's expert found by one vote where the warp's items share a row (the common case: a
// warp's vectors or groups lie in one row), by MaskedRowsWarp's bisection otherwise.
struct MaskedRowsWarpVote : MaskedRowsWarp {
  __device__ __forceinline__ RowAt at(const State& s, int64_t f) const {
    const int32_t f32 = static_cast<int32_t>(f);  // rows fit 31 bits (checked on the host)
    const int32_t first = __shfl_sync(0xffffffffu, f32, 0), last = __shfl_sync(0xffffffffu, f32, device::kWarpThreads - 1);
    if (first != last) return MaskedRowsWarp::at(s, f);
    const int e = __popc(__ballot_sync(0xffffffffu, s.end <= f32));  // experts whose rows end at or before f
    const int32_t begin = __shfl_sync(0xffffffffu, s.end, e > 0 ? e - 1 : 0);
    return locate(e, f - (e > 0 ? begin : 0));
  }
};

#ifndef __CUDACC_RTC__
template <int kScan, int kPerSm, int kItemsArg, int kGroupItemsArg, int64_t kLoadAll, int kSpreadArg, int kChunkRowsArg, int kPipelinedArg>
struct Sched {
  static constexpr int kItems = kItemsArg, kGroupItems = kGroupItemsArg, kCtasPerSm = kPerSm, kChunkRows = kChunkRowsArg;
  static constexpr int64_t kLoadAllBytes = kLoadAll;
  static constexpr bool kSpread = kSpreadArg != 0, kPipelined = kPipelinedArg != 0;
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
        f(MaskedRowsWarpVote{layout});
      }
    }
  }
};

template <int kScan, int kPerSm, int kItems, int kGroupItems, int64_t kLoadAll, int kSpread, int kChunkRows, int kPipelined>
using Ops = MoeActOps<bf16_t, Sched<kScan, kPerSm, kItems, kGroupItems, kLoadAll, kSpread, kChunkRows, kPipelined>>;
using ProductOps = MoeActOps<bf16_t>;
#endif  // __CUDACC_RTC__

}  // namespace bench_moe_act
