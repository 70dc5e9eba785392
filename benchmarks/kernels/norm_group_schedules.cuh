// Schedules of the norm + group fp8 ops side by side (bench_quant.py `group`): the product's entry points
// (csrc/quant.cuh, QuantOps) under other NormGroupSchedules, bf16. Sched<kLaneVecs, kFusedLaneVecs,
// kRowsMinPerSm, kPairs, kEarlyTriggerMaxRows, kStreamCtasPerSm>: NormGroupSchedule's members, in its order.
#pragma once

#include <quant.cuh>

namespace bench_norm_group {

#ifndef __CUDACC_RTC__
template <int kLaneVecsArg, int kFusedLaneVecsArg, int kRowsMinPerSmArg, int kPairsArg, int kEarlyTriggerMaxRowsArg, int kStreamCtasPerSmArg>
struct Sched {
  static constexpr int kLaneVecs = kLaneVecsArg, kFusedLaneVecs = kFusedLaneVecsArg;
  static constexpr int64_t kRowsMinPerSm = kRowsMinPerSmArg;
  static constexpr bool kPairs = kPairsArg != 0;
  static constexpr int64_t kEarlyTriggerMaxRows = kEarlyTriggerMaxRowsArg;
  static constexpr int kStreamCtasPerSm = kStreamCtasPerSmArg;
};

template <int... kArgs>
using Ops = jitkern_quant::QuantOps<bf16_t, Sched<kArgs...>>;
#endif  // __CUDACC_RTC__

}  // namespace bench_norm_group
