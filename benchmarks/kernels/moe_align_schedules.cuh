// Schedules of moe_align_block_size side by side (bench_moe.py align): the product's kernels (csrc/moe.cuh)
// forced to one form whatever the size, on the product's checked parameters (align_params).
#pragma once

#include <moe.cuh>

namespace bench_moe_align {

using namespace jitkern_moe;

#ifndef __CUDACC_RTC__
// kSchedule 0: the grid form; 8 / 16: the two-pass kernel as a cluster of 8 / 16, the lanes of an expert found by
// ballots (kBallots) or match_any.
// kAtStart: the PDL trigger at the kernel's start whatever its CTAs (else align_trigger's).
template <int kSchedule, bool kBallots, bool kAtStart = false>
void align_schedule(jitkern::TensorView topk_ids, int64_t num_experts, int64_t block_size, jitkern::TensorView sorted_token_ids,
                    jitkern::TensorView expert_ids, jitkern::TensorView num_tokens_post_pad) {
  DLDevice dev;
  const AlignParams p = align_params<>(topk_ids, num_experts, block_size, sorted_token_ids, expert_ids, num_tokens_post_pad, dev);
  const Trigger at_start = Trigger::kStart;
  const Trigger* forced = kAtStart ? &at_start : nullptr;
  if constexpr (kSchedule == 0) {
    launch_align_grid<>(p, dev, forced);
  } else {
    launch_align<kSchedule, kAlignClusterBatch, kBallots>(p, dev, forced);
  }
}

// The warp form (up to 32 ids).
template <typename = void>
void align_warp(jitkern::TensorView topk_ids, int64_t num_experts, int64_t block_size, jitkern::TensorView sorted_token_ids,
                jitkern::TensorView expert_ids, jitkern::TensorView num_tokens_post_pad) {
  DLDevice dev;
  const AlignParams p = align_params<>(topk_ids, num_experts, block_size, sorted_token_ids, expert_ids, num_tokens_post_pad, dev);
  host::RuntimeCheck(p.n <= kAlignWarpMaxIds, "the warp form takes up to ", kAlignWarpMaxIds, " ids");
  launch_align_warp<>(p, dev);
}
#endif

}  // namespace bench_moe_align
