// Schedules of moe_align_block_size side by side (bench_moe.py align): the product's kernel (csrc/moe.cuh) as
// one CTA and as a cluster whatever the size, and the one-CTA chunked kernel it replaced, on the product's
// checked parameters (align_params).
#pragma once

#include <moe.cuh>

namespace bench_moe_align {

using namespace jitkern_moe;

constexpr int kOneCtaThreads = 1024;
constexpr int kOneCtaWarps = kOneCtaThreads / 32;
constexpr int kOneCtaRounds = 4;  // ids per lane per chunk (a chunk: kOneCtaThreads * kOneCtaRounds ids)

// The product's kernel before the cluster form: one CTA of 1024 threads for every size.
// Counts per expert, their padded offsets, the padding and expert_ids, then the ids scattered chunk by
// chunk: each warp ranks its ids by expert (match_any), a thread per expert turns the warps' counts into
// offsets, and every id lands at its expert's cursor + the offsets before it (the order of topk_ids).
template <typename = void>
__global__ void __launch_bounds__(kOneCtaThreads) one_cta_align_kernel(const __grid_constant__ AlignParams p) {
#ifdef __CUDACC__
  __shared__ int count[kMoeMaxExperts], start[kMoeMaxExperts], cursor[kMoeMaxExperts];
  __shared__ uint16_t table[kOneCtaWarps][kMoeMaxExperts];  // per warp and expert: ids in the chunk, then their offset
  device::pdl_trigger_secondary();
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, E = p.experts;
  for (int e = tid; e < E; e += kOneCtaThreads) count[e] = 0;
  for (int i = tid; i < kOneCtaWarps * kMoeMaxExperts; i += kOneCtaThreads) (&table[0][0])[i] = 0;
  device::pdl_wait_primary();
  __syncthreads();
  for (int32_t i = tid; i < p.n; i += kOneCtaThreads) {
    const int e = expert_of(p, i);
    if (e >= 0) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  const int padded = tid < E ? (count[tid] + p.block_size - 1) / p.block_size * p.block_size : 0;
  int total;
  const int first = device::cta::exclusive_sum_once(padded, total);
  if (tid < E) start[tid] = cursor[tid] = first;
  if (tid == 0) *p.total_out = total;
  __syncthreads();
  // Padding: each expert's slots after its ids, and everything after the last expert.
  if (tid < E)
    for (int s = first + count[tid]; s < first + padded; ++s) p.sorted[s] = p.n;
  for (int64_t s = total + tid; s < p.sorted_len; s += kOneCtaThreads) p.sorted[s] = p.n;
  for (int64_t b = tid; b < p.expert_ids_len; b += kOneCtaThreads) p.expert_ids[b] = block_expert(start, E, total, b * p.block_size);
  constexpr int kChunk = kOneCtaThreads * kOneCtaRounds;
  const unsigned lanes_below = (1u << lane) - 1;
  for (int32_t chunk = 0; chunk < p.n; chunk += kChunk) {
    int experts[kOneCtaRounds], ranks[kOneCtaRounds];
#pragma unroll
    for (int r = 0; r < kOneCtaRounds; ++r) {
      const int64_t i = int64_t{chunk} + warp * 32 * kOneCtaRounds + r * 32 + lane;
      const int e = i < p.n ? expert_of(p, static_cast<int32_t>(i)) : -1;
      const unsigned peers = __match_any_sync(0xffffffffu, e);
      const int before = e >= 0 ? table[warp][e] : 0;  // this warp's earlier rounds
      __syncwarp();
      if (e >= 0 && (peers & lanes_below) == 0) table[warp][e] = static_cast<uint16_t>(before + __popc(peers));
      __syncwarp();
      experts[r] = e, ranks[r] = before + __popc(peers & lanes_below);
    }
    __syncthreads();
    for (int e = tid; e < E; e += kOneCtaThreads) {
      int offset = 0;
      for (int w = 0; w < kOneCtaWarps; ++w) {
        const int c = table[w][e];
        table[w][e] = static_cast<uint16_t>(offset);
        offset += c;
      }
      start[e] = cursor[e];  // the chunk's base (start[] is not needed after expert_ids)
      cursor[e] += offset;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kOneCtaRounds; ++r) {
      const int e = experts[r];
      if (e >= 0) p.sorted[start[e] + table[warp][e] + ranks[r]] = chunk + warp * 32 * kOneCtaRounds + r * 32 + lane;
    }
    __syncwarp();
    // The whole row: the offset pass above wrote every expert's entry, also those this warp has no ids of.
    for (int e = lane; e < E; e += 32) table[warp][e] = 0;  // only this warp reads its row
    __syncthreads();  // start[] and cursor[] are rewritten by the next chunk
  }
#endif
}


#ifndef __CUDACC_RTC__
// kSchedule 0: the one-CTA chunked kernel; 1: the product's one-CTA form; 8: its cluster of 8; the lanes of an
// expert found by ballots (kBallots) or match_any.
template <int kSchedule, bool kBallots>
void align_schedule(jitkern::TensorView topk_ids, int64_t num_experts, int64_t block_size, jitkern::TensorView sorted_token_ids,
                    jitkern::TensorView expert_ids, jitkern::TensorView num_tokens_post_pad) {
  DLDevice dev;
  const AlignParams p = align_params<>(topk_ids, num_experts, block_size, sorted_token_ids, expert_ids, num_tokens_post_pad, dev);
  if constexpr (kSchedule == 0) {
    host::LaunchKernel(1, kOneCtaThreads, dev).enable_pdl()(one_cta_align_kernel<>, p);
  } else {
    launch_align<kSchedule, kSchedule == 1 ? kAlignBatch : kAlignClusterBatch, kBallots>(p, dev);
  }
}
#endif

}  // namespace bench_moe_align
