// Schedules of the norm + group fp8 ops side by side (bench_quant.py `group`): the product's entry points
// (csrc/quant.cuh, QuantOps) under other NormGroupSchedules, bf16. Sched<kLaneVecs, kFusedLaneVecs, kFewLaneVecs,
// kFusedFewLaneVecs, kPairs, kEarlyTriggerMaxRows, kFusedEarlyTriggerMaxRows, kClusterMaxRows, kFusedClusterMaxRows,
// kFewStageWeights>:
// NormGroupSchedule's members, in its order (kManyRowsPerSm: the product's).
#pragma once

#include <quant.cuh>

namespace bench_norm_group {

#ifndef __CUDACC_RTC__
template <int kLaneVecsArg, int kFusedLaneVecsArg, int kFewLaneVecsArg, int kFusedFewLaneVecsArg, int kPairsArg, int kEarlyTriggerMaxRowsArg,
          int kFusedEarlyTriggerMaxRowsArg, int kClusterMaxRowsArg, int kFusedClusterMaxRowsArg,
          int kFewStageWeightsArg>
struct Sched {
  static constexpr int kLaneVecs = kLaneVecsArg, kFusedLaneVecs = kFusedLaneVecsArg, kFewLaneVecs = kFewLaneVecsArg,
                       kFusedFewLaneVecs = kFusedFewLaneVecsArg;
  static constexpr int64_t kManyRowsPerSm = jitkern_quant::NormGroupSchedule::kManyRowsPerSm;
  static constexpr bool kPairs = kPairsArg != 0;
  static constexpr int64_t kEarlyTriggerMaxRows = kEarlyTriggerMaxRowsArg, kFusedEarlyTriggerMaxRows = kFusedEarlyTriggerMaxRowsArg;
  static constexpr int64_t kClusterMaxRows = kClusterMaxRowsArg, kFusedClusterMaxRows = kFusedClusterMaxRowsArg;
  static constexpr bool kFewStageWeights = kFewStageWeightsArg != 0;
};

template <int... kArgs>
using Ops = jitkern_quant::QuantOps<bf16_t, Sched<kArgs...>>;
#endif  // __CUDACC_RTC__

}  // namespace bench_norm_group
