// The MoE gated-activation family: SiLU-and-mul over the layouts that MoE expert GEMMs write, computing only
// the rows that hold tokens, whose number is read on the device (no host sync: CUDA-graph safe):
//   sorted: input [P, 2d] in the order of moe_align_block_size's sorted_token_ids [P]; row r is computed
//           where r < *num_tokens_post_pad and sorted_token_ids[r] < num_ids (the padding id is num_ids);
//   masked: input [E, M, 2d], the per-expert buffers of low-latency expert-parallel dispatch; rows
//           m < masked_m[e] of expert e are computed (masked_m int32 [E], taken within [0, M]).
// Rows not computed are neither read nor written: their outputs and scales keep what they held. A computed
// row is written as silu_and_mul writes it (the product rounded to T), or quantized to fp8 e4m3 from that
// rounded product with one dynamic scale per row (per_token_quant_fp8's) or per group of 128 outputs
// (per_token_group_quant_8bit's under the same rounding policy, quant::Rounding, fp32 scales with any
// strides): the dense ops' bits on the computed rows.
//
// The grid is sized from the layout's capacity (P or E * M rows). Masked: a persistent grid, at most the CTAs
// the GPU holds at once, the computed rows counted from masked_m after the PDL wait by each warp for up to 32
// experts, else by the CTA in shared memory. silu_and_mul (up to 32 experts, 2 CTAs an SM): where the
// computed rows fit one turn of the grid, each CTA takes its share at once (a row's expert found by a vote),
// else chunks of up to 8 rows of one expert, dealt to the CTAs in turn; the group form (up to 32 experts,
// 32-bit offsets) the experts' rows interleaved in its first turn (a group's place known before the counts
// are read), then each warp striding over the rows left; the fp8 forms elsewhere, and more experts, each CTA
// (the group form up to 32 experts: each warp) striding over the computed rows.
// Sorted, from a chunk of 8 rows an SM (MoeActOps::sorted_chunks): silu_and_mul and the group form a CTA per
// chunk, whose first warp lists the chunk's computed rows (below the count, a valid id), the CTA then
// computing only those; the per-token form, and smaller buffers, a persistent grid visiting every row, each
// checked against its id and the count.
#pragma once

#include <jitkern/cta.cuh>
#include <jitkern/impl/act.cuh>
#include <jitkern/impl/kv_cache.cuh>
#include <jitkern/impl/norm.cuh>
#include <jitkern/impl/quant.cuh>
#include <jitkern/policy.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/type.cuh>
#include <jitkern/utils.cuh>
#include <jitkern/vec.cuh>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace jitkern_moe_act {

using device::AlignedVector;
using device::act::Gated;
using device::act::gated;
using device::act::Silu;
using device::act::kActGroupSize;
using device::act::kActGroupThreads;
using device::act::kActThreads;
using device::norm::RowFit;
namespace quant = device::quant;

// The per-token kernel: a CTA per row, kRowRegVecs vectors of the row per thread held in registers.
constexpr int kRowThreadsBound = host::kRowKernels.max_cta_threads;
constexpr int kRowRegVecs = host::kRowKernels.token_quant_reg_vecs;
// Rows a chunk (the sorted layout's chunks, at most the masked layout's), and silu_and_mul's vectors per
// thread and turn in a chunk, in a turn over the masked layout's rows, and over the sorted layout's.
constexpr int kChunkRows = 8, kChunkVecs = 4, kMaskedVecs = 2, kSortedVecs = 1;
constexpr int kRowWarps = 4;  // warps a CTA of the sorted group form's warp-a-row kernel
static_assert(kRowWarps * device::kWarpThreads <= kActGroupThreads, "the warp-a-row kernel's launch bound: kActGroupThreads threads a CTA");
// Experts of the masked layout: their row counts are scanned into shared memory by every CTA beyond 32.
constexpr int kMaxExperts = 1024;
// silu_and_mul_group_quant_interleaved_kernel's CTAs (the launch rule's comment below): their threads, how many
// an SM its registers are bounded for (64 a thread on sm_90a, no spills for bf16 and fp16), and its warps'
// order (spread over the CTAs).
constexpr int kInterleavedThreads = 512, kInterleavedCtas = 2;
constexpr bool kInterleavedSpread = true;

// Where row f of the computed-row order lives (element offsets of its input, output and scales), and
// whether it is computed.
struct RowAt {
  bool valid;
  int64_t in, out, scale;
};

// A layout's rows: visit(wait) calls wait() (the PDL wait) and returns the State that at(state, f) reads;
// state.rows is how many rows the kernels visit. at() is called by every thread of the CTA together.

// The sorted layout: row f is row f of the [P, ...] tensors. Every one of the P rows is visited, so that
// the loop does not wait for *num_post_pad: its load and a row's id load are in flight together.
struct SortedRows {
  const int32_t* sorted_ids;
  const int32_t* num_post_pad;
  int64_t capacity;  // P
  uint32_t num_ids;
  int64_t in_stride, out_stride, scale_stride;
  struct State {
    int64_t rows, limit;  // limit: *num_post_pad
  };
  template <typename Wait>
  __device__ __forceinline__ State visit(const Wait& wait) const {
    wait();
    return {capacity, *num_post_pad};
  }
  // Computed: below *num_post_pad, and an id in [0, num_ids) (negative ids compare as large unsigned ones).
  __device__ __forceinline__ RowAt at(const State& s, int64_t f) const { return at(f, static_cast<uint32_t>(sorted_ids[f]) < num_ids && f < s.limit); }
  __device__ __forceinline__ RowAt at(int64_t f, bool computed) const { return {computed, f * in_stride, f * out_stride, f * scale_stride}; }
};

// The sorted layout in chunks of kRows consecutive rows: warp 0 lists a chunk's computed rows in
// shared memory (two lists, so one barrier a chunk), and the CTA calls body(first row, list, count). The
// next chunk's ids are loaded before the body runs, so their latency is hidden behind its work; the chunks
// end at *num_post_pad (rows past it are not visited).
template <int kRows = kChunkRows, typename Wait, typename Body>
__device__ __forceinline__ void for_each_sorted_chunk(const SortedRows& rows, const Wait& wait, const Body& body) {
  static_assert(kRows <= device::kWarpThreads, "a chunk's rows are listed by one warp");
  __shared__ int32_t list[2][kRows];
  __shared__ int32_t count[2];
  const int t = static_cast<int>(threadIdx.x);
  wait();
  const int32_t post_pad = *rows.num_post_pad;
  // Lane t of warp 0 holds the id of row t of its chunk (others, and rows past the capacity: num_ids, not computed).
  const auto id_of = [&](int64_t chunk) {
    const int64_t f = chunk * kRows + t;
    return t < kRows && f < rows.capacity ? static_cast<uint32_t>(rows.sorted_ids[f]) : rows.num_ids;
  };
  uint32_t id = id_of(blockIdx.x);  // in flight with *num_post_pad
  const int64_t limit = post_pad <= 0 ? 0 : (post_pad < rows.capacity ? post_pad : rows.capacity);
  const int64_t chunks = (limit + kRows - 1) / kRows;
  int buf = 0;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x, buf ^= 1) {
    const uint32_t next = c + gridDim.x < chunks ? id_of(c + gridDim.x) : rows.num_ids;
    if (t < device::kWarpThreads) {
      const bool computed = id < rows.num_ids && c * kRows + t < limit;
      const unsigned mask = __ballot_sync(0xffffffffu, computed);
      if (computed) list[buf][__popc(mask & ((1u << t) - 1u))] = t;
      if (t == 0) count[buf] = __popc(mask);
    }
    __syncthreads();  // also: every thread is past chunk c - 2's reads of list[buf]
    body(c * kRows, list[buf], count[buf]);
    id = next;
  }
}

// An expert's computed rows from its masked_m entry m: m clamped to [0, m_max].
__device__ __forceinline__ int32_t clamped_rows(int32_t m, int32_t m_max) { return m <= 0 ? 0 : (m < m_max ? m : m_max); }

// The inclusive sum of v over the warp's lanes in lane order (every lane gets its own).
__device__ __forceinline__ int32_t warp_inclusive_sum(int32_t v) {
  const int lane = static_cast<int>(threadIdx.x % device::kWarpThreads);
#pragma unroll
  for (int offset = 1; offset < device::kWarpThreads; offset *= 2) {
    const int32_t o = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += o;
  }
  return v;
}

// The masked layout: row f is row m of expert e, the experts' computed rows one after another.
struct MaskedLayout {
  const int32_t* masked_m;
  int experts;
  int32_t m_max;
  int64_t in_expert, in_row, out_expert, out_row, scale_expert, scale_row;
  __device__ __forceinline__ int32_t rows_of(int e) const { return clamped_rows(masked_m[e], m_max); }
  __device__ __forceinline__ RowAt locate(int64_t e, int64_t m) const {
    return {true, e * in_expert + m * in_row, e * out_expert + m * out_row, e * scale_expert + m * scale_row};
  }
};

// Any number of experts (up to kMaxExperts): the row counts' prefix sum in shared memory, computed by the
// whole CTA (a few consecutive experts per thread).
struct MaskedRows : MaskedLayout {
  struct State {
    const int32_t* ends;  // expert e's rows end at ends[e] in the computed-row order (shared memory)
    int64_t rows;
  };
  template <typename Wait>
  __device__ __forceinline__ State visit(const Wait& wait) const {
    __shared__ int32_t ends[kMaxExperts];
    wait();
    const int per = (experts + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
    const int first = static_cast<int>(threadIdx.x) * per;
    int32_t sum = 0;
    for (int k = 0; k < per; ++k)
      if (first + k < experts) sum += rows_of(first + k);
    int32_t total;
    int32_t end = device::cta::exclusive_sum_once(sum, total);
    for (int k = 0; k < per; ++k)
      if (first + k < experts) ends[first + k] = end += rows_of(first + k);  // masked_m again: an L1 hit
    __syncthreads();
    return {ends, total};
  }
  __device__ __forceinline__ RowAt at(const State& s, int64_t f) const {
    int lo = 0, hi = experts - 1;  // the first expert whose rows end after f
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (s.ends[mid] > f) hi = mid;
      else lo = mid + 1;
    }
    return locate(lo, f - (lo > 0 ? s.ends[lo - 1] : 0));
  }
};

// At most a warp's width of experts: every warp scans the counts itself, lane e holding where expert e's
// rows end (no shared memory, no barrier), and finds a row's expert by a vote where the warp's rows are one
// (a warp's vectors or groups mostly lie in one row), else by shuffles.
struct MaskedRowsWarp : MaskedLayout {
  static constexpr int kMaxWarpExperts = device::kWarpThreads;
  struct State {
    int32_t end;  // this lane's expert's rows end here (lanes past the experts: the total)
    int64_t rows;
  };
  __device__ __forceinline__ State scan(int32_t rows) const {
    const int32_t end = warp_inclusive_sum(rows);
    return {end, __shfl_sync(0xffffffffu, end, device::kWarpThreads - 1)};
  }
  template <typename Wait>
  __device__ __forceinline__ State visit(const Wait& wait) const {
    wait();
    const int lane = static_cast<int>(threadIdx.x % device::kWarpThreads);
    const int32_t m = rows_of(lane < experts ? lane : experts - 1);  // no branch around the load: the work after it goes on meanwhile
    return scan(lane < experts ? m : 0);
  }
  // f's expert: how many lanes' ends are at or below f (the ends ascend over the lanes). Called by the whole warp.
  __device__ __forceinline__ RowAt at(const State& s, int64_t f) const {
    const int32_t row = static_cast<int32_t>(f);  // the rows fit 31 bits (checked on the host)
    const int32_t first = __shfl_sync(0xffffffffu, row, 0), last = __shfl_sync(0xffffffffu, row, device::kWarpThreads - 1);
    if (first != last) return bisect(s, f);
    return in_row(s, row);
  }
  // Row `row`, the same for the whole warp: its expert by a vote. Called by the whole warp.
  __device__ __forceinline__ RowAt in_row(const State& s, int32_t row) const {
    const int e = __popc(__ballot_sync(0xffffffffu, s.end <= row));
    return from(s, e, row);
  }
  // The same by bisection over the lanes, each lane for its own f.
  __device__ __forceinline__ RowAt bisect(const State& s, int64_t f) const {
    int e = 0;
#pragma unroll
    for (int step = device::kWarpThreads / 2; step > 0; step /= 2)
      if (__shfl_sync(0xffffffffu, s.end, e + step - 1) <= f) e += step;
    return from(s, e, f);
  }
  // Row f, of expert e.
  __device__ __forceinline__ RowAt from(const State& s, int e, int64_t f) const {
    const int32_t begin = __shfl_sync(0xffffffffu, s.end, e > 0 ? e - 1 : 0);
    return locate(e, f - (e > 0 ? begin : 0));
  }
};

// A layout's computed rows by chunks (at most kChunkRows rows of one chunk): the CTA calls body(at, n) for
// each of its chunks, n > 0 computed rows, at(j) row j's RowAt (j < n). The sorted layout: chunks of
// kChunkRows consecutive rows of the buffer, their computed rows listed (for_each_sorted_chunk).
template <typename Wait, typename Body>
__device__ __forceinline__ void for_each_chunk(const SortedRows& rows, const Wait& wait, const Body& body) {
  for_each_sorted_chunk(rows, wait, [&](int64_t first_row, const int32_t* list, int n) {
    body([&](int j) { return rows.at(first_row + list[j], true); }, n);
  });
}
// The masked layout (at most a warp's width of experts): expert e's computed rows in ceil(masked_m[e] / R)
// chunks of R consecutive rows, the experts' chunks one after another, dealt to the CTAs in turn (each
// warp scans the counts itself: no shared memory, no barrier). R = kChunkRows, or the computed rows over the
// grid where that is fewer (at least 1), so that few rows still spread over the CTAs. turns(state): the
// rows' State (MaskedRowsWarp's) offered first; true where it took them (the whole CTA decides alike).
template <typename Wait, typename Body, typename Turns>
__device__ __forceinline__ void for_each_chunk(const MaskedRowsWarp& rows, const Wait& wait, const Body& body, const Turns& turns) {
  constexpr int kRows = kChunkRows;
  wait();
  const int lane = static_cast<int>(threadIdx.x % device::kWarpThreads);
  const int32_t m = lane < rows.experts ? rows.rows_of(lane) : 0;
  const MaskedRowsWarp::State all = rows.scan(m);
  if (turns(all)) return;
  const int64_t spread = (all.rows + gridDim.x - 1) / gridDim.x;
  const int32_t per = spread < 1 ? 1 : (spread < kRows ? static_cast<int32_t>(spread) : kRows);
  const MaskedRowsWarp::State chunks = rows.scan((m + per - 1) / per);  // lane e: where expert e's chunks end
  for (int64_t c = blockIdx.x; c < chunks.rows; c += gridDim.x) {
    const int32_t ci = static_cast<int32_t>(c);
    const int e = __popc(__ballot_sync(0xffffffffu, chunks.end <= ci));  // the same for the whole warp
    const int32_t before = __shfl_sync(0xffffffffu, chunks.end, e > 0 ? e - 1 : 0);
    const int32_t first = (ci - (e > 0 ? before : 0)) * per, rows_e = __shfl_sync(0xffffffffu, m, e);
    body([&](int j) { return rows.locate(e, first + j); }, rows_e - first < per ? rows_e - first : per);
  }
}

// The PDL wait, with the trigger after it where the launch did not trigger at the start.
struct WaitPrimary {
  bool triggered;
  __device__ __forceinline__ void operator()() const {
    device::pdl_wait_primary();
    if (!triggered) device::pdl_trigger_secondary();
  }
};

// f = v / n and v - f * n, in 32 bits where both fit.
__device__ __forceinline__ int64_t quotient(int64_t v, int64_t n, bool narrow) {
  return narrow ? int64_t{static_cast<uint32_t>(v) / static_cast<uint32_t>(n)} : v / n;
}

// A turn's items: their rows located, and their columns (vectors) or group numbers within the row.
template <int kItems>
struct Items {
  RowAt r[kItems];
  int64_t col[kItems];
};

// One turn of silu_and_mul over kItems vectors: every item's data loaded, then the products stored.
template <typename T, int kVec, int kItems>
__device__ __forceinline__ void silu_and_mul_items(const RowAt (&r)[kItems], const int64_t (&col)[kItems], const T* in, T* out, int64_t d) {
  AlignedVector<T, kVec> gate[kItems], up[kItems];
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    if (r[k].valid) {
      gate[k].load(in + r[k].in + col[k]);
      up[k].load(in + r[k].in + d + col[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    if (!r[k].valid) continue;
    const Gated<T, kVec> y = gated<Silu>(gate[k], up[k]);
    y.store(reinterpret_cast<std::remove_cvref_t<decltype(y[0])>*>(out + r[k].out + col[k]));
  }
}

// out[row] = silu(in[row, :d]) * in[row, d:] for the computed rows of `state` (Rows' visit()): kItems vectors
// per thread and turn, the grid's threads apart (so that a turn covering fewer vectors than the grid still
// spreads them over every CTA), every item's row located before any data is loaded, so that a turn waits for
// one id load, not kItems of them. The whole CTA takes every turn together (at() may shuffle across the warp).
template <typename Rows, typename T, int kVec, int kItems>
__device__ __forceinline__ void silu_and_mul_turns(const Rows& rows, const typename Rows::State& state, const T* in, T* out, int64_t d) {
  const int64_t row_vecs = d / kVec, total = state.rows * row_vecs;
  const bool narrow = total <= UINT32_MAX;
  const int64_t step = int64_t{gridDim.x} * kActThreads;  // between a thread's items
  const auto locate = [&](int64_t first) {
    Items<kItems> t;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int64_t v = first + k * step + threadIdx.x;
      const bool in_range = v < total;
      if (k > 0 && !__any_sync(0xffffffffu, in_range)) {  // the warp's item past the end (warp-uniform)
        t.r[k] = {false, 0, 0, 0}, t.col[k] = 0;
        continue;
      }
      const int64_t f = quotient(in_range ? v : 0, row_vecs, narrow);
      t.col[k] = ((in_range ? v : 0) - f * row_vecs) * kVec;
      t.r[k] = rows.at(state, f);
      t.r[k].valid = t.r[k].valid && in_range;
    }
    return t;
  };
  for (int64_t first = int64_t{blockIdx.x} * kActThreads; first < total; first += int64_t{gridDim.x} * kActThreads * kItems) {
    const Items<kItems> t = locate(first);
    silu_and_mul_items<T, kVec, kItems>(t.r, t.col, in, out, d);
  }
}

// The kernel of silu_and_mul_turns, every row visited.
template <typename Rows, typename T, int kVec, int kItems>
__global__ void __launch_bounds__(kActThreads)
    silu_and_mul_rows_kernel(const __grid_constant__ Rows rows, const T* in, T* out, int64_t d, bool trigger_at_start) {
#ifdef __CUDACC__
  if (trigger_at_start) device::pdl_trigger_secondary();
  silu_and_mul_turns<Rows, T, kVec, kItems>(rows, rows.visit(WaitPrimary{trigger_at_start}), in, out, d);
#endif
}

// The same by chunks of at most kChunkRows rows (for_each_chunk): a chunk's computed rows' vectors,
// kChunkVecs per thread and turn, kActThreads apart; rows not computed take no turns. The masked layout's
// rows as silu_and_mul_turns takes them (kMaskedVecs) where they fit one turn of the grid (decode sizes: each
// CTA's share of the rows at once, not a chunk's rows one after another).
template <typename Rows, typename T, int kVec>
__global__ void __launch_bounds__(kActThreads)
    silu_and_mul_chunks_kernel(const __grid_constant__ Rows rows, const T* in, T* out, int64_t d, bool trigger_at_start) {
#ifdef __CUDACC__
  constexpr int kItems = kChunkVecs;
  if (trigger_at_start) device::pdl_trigger_secondary();
  const int64_t row_vecs = d / kVec;
  const bool narrow = row_vecs * kChunkRows <= UINT32_MAX;
  const auto chunk = [&](const auto& at, int n) {
    const int64_t total = n * row_vecs;
    for (int64_t base = threadIdx.x; base < total; base += int64_t{kActThreads} * kItems) {
      RowAt r[kItems];
      int64_t col[kItems];
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int64_t v = base + k * kActThreads;
        const bool in_range = v < total;
        const int64_t j = in_range ? quotient(v, row_vecs, narrow) : 0;
        col[k] = in_range ? (v - j * row_vecs) * kVec : 0;
        r[k] = at(static_cast<int>(j));
        r[k].valid = in_range;
      }
      silu_and_mul_items<T, kVec, kItems>(r, col, in, out, d);
    }
  };
  if constexpr (std::is_same_v<Rows, SortedRows>) {
    for_each_chunk(rows, WaitPrimary{trigger_at_start}, chunk);
  } else {
    for_each_chunk(rows, WaitPrimary{trigger_at_start}, chunk, [&](const typename Rows::State& state) {
      if (state.rows * row_vecs > int64_t{gridDim.x} * kActThreads * kMaskedVecs) return false;
      silu_and_mul_turns<Rows, T, kVec, kMaskedVecs>(rows, state, in, out, d);
      return true;
    });
  }
#endif
}

// A group's input as a lane set holds it: lane l of the group vectors l, l + kLanes, ... of gate and up.
template <typename T, int kVec, int kPerLane>
struct GroupInput {
  AlignedVector<T, kVec> gate[kPerLane], up[kPerLane];
};

// Loads group g of row r (nothing where r is not valid).
template <typename T, int kVec, int kLanes, int kPerLane>
__device__ __forceinline__ GroupInput<T, kVec, kPerLane> load_group(const RowAt& r, int64_t g, const T* in, int64_t d) {
  static_assert(kLanes * kPerLane * kVec == kActGroupSize, "one group per kLanes lanes");
  constexpr int kNext = kLanes * kVec;  // from a lane's vector to its next
  GroupInput<T, kVec, kPerLane> x;
  const int64_t col = g * kActGroupSize + static_cast<int>(threadIdx.x % kLanes) * kVec;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    if (r.valid) {
      x.gate[j].load(in + r.in + col + j * kNext);
      x.up[j].load(in + r.in + d + col + j * kNext);
    }
  }
  return x;
}

// Group g of row r from its input x: the products quantized with kRounding's arithmetic, their codes and
// scale stored. Every lane of the warp calls this together (the group's votes and shuffles). kNormalEps: eps
// >= kNormalScaleEps (quantize_group_with's: the same bits).
template <typename T, int kVec, int kLanes, int kPerLane, quant::Rounding kRounding, bool kNormalEps = false>
__device__ __forceinline__ void quantize_loaded(const GroupInput<T, kVec, kPerLane>& x, const RowAt& r, int64_t g, uint8_t* q, float* scales,
                                                int64_t group_stride, float eps) {
  Gated<T, kVec> y[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) y[j] = gated<Silu>(x.gate[j], x.up[j]);
  float* scale = scales + r.scale + g * group_stride;
  const int64_t col = g * kActGroupSize + static_cast<int>(threadIdx.x % kLanes) * kVec;
  quant::quantize_group_with<fp8_e4m3_t, kLanes, kPerLane, false, false, kRounding, kNormalEps>(y, r.valid, q + r.out + col, eps, 0xffffffffu,
                                                                                                [&](float s, uint32_t) { *scale = s; });
}

// One turn of the group quantization: a group per lane set, its row located (r) and its number within the
// row known (g): its loads, then its quantization.
template <typename T, int kVec, int kLanes, int kPerLane, quant::Rounding kRounding, bool kNormalEps = false>
__device__ __forceinline__ void group_quant_item(const RowAt& r, int64_t g, const T* in, uint8_t* q, float* scales, int64_t group_stride,
                                                 int64_t d, float eps) {
  const GroupInput<T, kVec, kPerLane> x = load_group<T, kVec, kLanes, kPerLane>(r, g, in, d);
  quantize_loaded<T, kVec, kLanes, kPerLane, kRounding, kNormalEps>(x, r, g, q, scales, group_stride, eps);
}

// The computed rows' products of `state` (Rows' visit()) quantized per group of kActGroupSize outputs: kLanes
// lanes per group, kPerLane vectors each, scales[row's offset + g * group_stride]; a group per lane set and
// turn, its row located before any data is loaded. Every CTA takes the same number of turns (the group's
// votes and shuffles need whole warps).
template <typename Rows, typename T, int kVec, int kLanes, int kPerLane, quant::Rounding kRounding>
__device__ __forceinline__ void group_quant_turns(const Rows& rows, const typename Rows::State& state, const T* in, uint8_t* q, float* scales,
                                                  int64_t group_stride, int64_t d, float eps) {
  constexpr int kGroupsPerCta = kActGroupThreads / kLanes;
  const int64_t groups_per_row = d / kActGroupSize, total = state.rows * groups_per_row;
  const bool narrow = total <= UINT32_MAX;
  for (int64_t first = int64_t{blockIdx.x} * kGroupsPerCta; first < total; first += int64_t{gridDim.x} * kGroupsPerCta) {
    const int64_t group = first + threadIdx.x / kLanes;
    const bool in_range = group < total;
    const int64_t f = in_range ? quotient(group, groups_per_row, narrow) : 0;
    const int64_t g = in_range ? group - f * groups_per_row : 0;
    RowAt r = rows.at(state, f);
    r.valid = r.valid && in_range;
    group_quant_item<T, kVec, kLanes, kPerLane, kRounding>(r, g, in, q, scales, group_stride, d, eps);
  }
}

// The kernel of group_quant_turns, every row visited.
template <typename Rows, typename T, int kVec, int kLanes, int kPerLane, quant::Rounding kRounding>
__global__ void __launch_bounds__(kActGroupThreads)
    silu_and_mul_group_quant_rows_kernel(const __grid_constant__ Rows rows, const T* in, uint8_t* q, float* scales, int64_t group_stride,
                                         int64_t d, float eps, bool trigger_at_start) {
#ifdef __CUDACC__
  if (trigger_at_start) device::pdl_trigger_secondary();
  group_quant_turns<Rows, T, kVec, kLanes, kPerLane, kRounding>(rows, rows.visit(WaitPrimary{trigger_at_start}), in, q, scales, group_stride, d, eps);
#endif
}

// The same over the sorted layout by chunks of kChunkRows rows (for_each_chunk): the groups of a chunk's
// computed rows; rows not computed take no turns. kCtas > 0: registers bounded for kCtas CTAs an SM.
template <typename T, int kVec, int kLanes, int kPerLane, quant::Rounding kRounding, int kCtas = 0>
__global__ void __launch_bounds__(kActGroupThreads, kCtas)
    silu_and_mul_group_quant_chunks_kernel(const __grid_constant__ SortedRows rows, const T* in, uint8_t* q, float* scales, int64_t group_stride,
                                           int64_t d, float eps, bool trigger_at_start) {
#ifdef __CUDACC__
  constexpr int kGroupsPerCta = kActGroupThreads / kLanes;
  if (trigger_at_start) device::pdl_trigger_secondary();
  const int64_t groups_per_row = d / kActGroupSize;
  const bool narrow = groups_per_row * kChunkRows <= UINT32_MAX;
  for_each_chunk(rows, WaitPrimary{trigger_at_start}, [&](const auto& at, int n) {
    const int64_t total = n * groups_per_row;
    for (int64_t first = 0; first < total; first += kGroupsPerCta) {  // CTA-uniform turns
      const int64_t group = first + threadIdx.x / kLanes;
      const bool in_range = group < total;
      const int64_t j = in_range ? quotient(group, groups_per_row, narrow) : 0;
      const int64_t g = in_range ? group - j * groups_per_row : 0;
      RowAt r = at(static_cast<int>(j));
      r.valid = in_range;
      group_quant_item<T, kVec, kLanes, kPerLane, kRounding>(r, g, in, q, scales, group_stride, d, eps);
    }
  });
#endif
}

// The group form a warp a row (group_quant_item's): warp w of CTA b takes rows b * warps + w, then a grid's warps
// further on, and a row's groups in turns of a group per lane set (rows not computed take no turns). kNormalEps:
// quantize_loaded's.
template <typename Rows, typename T, int kVec, int kLanes, int kPerLane, quant::Rounding kRounding, bool kNormalEps = false>
__global__ void __launch_bounds__(kActGroupThreads)
    silu_and_mul_group_quant_warps_kernel(const __grid_constant__ Rows rows, const T* in, uint8_t* q, float* scales, int64_t group_stride,
                                          int64_t d, float eps, bool trigger_at_start) {
#ifdef __CUDACC__
  constexpr int kGroupsPerWarp = device::kWarpThreads / kLanes;
  if (trigger_at_start) device::pdl_trigger_secondary();
  const int64_t warps = blockDim.x / device::kWarpThreads, groups_per_row = d / kActGroupSize;
  const int mine = static_cast<int>(threadIdx.x % device::kWarpThreads) / kLanes;
  const auto state = rows.visit(WaitPrimary{trigger_at_start});
  for (int64_t f = blockIdx.x * warps + threadIdx.x / device::kWarpThreads; f < state.rows; f += gridDim.x * warps) {
    const RowAt row = rows.at(state, f);
    if (!row.valid) continue;  // warp-uniform
    for (int64_t first = 0; first < groups_per_row; first += kGroupsPerWarp) {
      RowAt r = row;
      r.valid = first + mine < groups_per_row;
      group_quant_item<T, kVec, kLanes, kPerLane, kRounding, kNormalEps>(r, r.valid ? first + mine : 0, in, q, scales, group_stride, d, eps);
    }
  }
#endif
}

// The group form over the masked layout's computed rows (at most a warp's width of experts), as
// group_quant_turns takes them, with less work between the PDL wait and the first data load: group numbers
// in 32 bits (the capacity's below 2^31: checked on the host) divided by a multiply (by_groups: the groups a
// row), whether a warp's groups share a row decided from its first and last group (no shuffles), and each
// warp taking its own turns (one with no group left stops).
template <typename Rows, typename T, int kVec, int kLanes, int kPerLane, quant::Rounding kRounding>
__global__ void __launch_bounds__(kActGroupThreads)
    silu_and_mul_group_quant_masked_kernel(const __grid_constant__ Rows rows, const T* in, uint8_t* q, float* scales,
                                           int64_t group_stride, int64_t d, float eps, device::kv_cache::Divisor32 by_groups,
                                           bool trigger_at_start) {
#ifdef __CUDACC__
  constexpr uint32_t kGroupsPerWarp = device::kWarpThreads / kLanes, kGroupsPerCta = kActGroupThreads / kLanes;
  if (trigger_at_start) device::pdl_trigger_secondary();
  const uint32_t mine = threadIdx.x % device::kWarpThreads / kLanes;  // this lane's group in the warp's
  const uint32_t turn = gridDim.x * kGroupsPerCta;
  uint32_t first = blockIdx.x * kGroupsPerCta + threadIdx.x / device::kWarpThreads * kGroupsPerWarp;  // the warp's first group
  // A turn's place: this lane's row f (computed-row order) and group g in it, the warp's rows first and last.
  uint32_t f, g, row, last;
  const auto place = [&] {
    uint32_t unused;
    f = by_groups.divide(first + mine, g), row = by_groups.divide(first, unused), last = by_groups.divide(first + kGroupsPerWarp - 1, unused);
  };
  const typename Rows::State s = rows.visit(WaitPrimary{trigger_at_start});
  place();
  asm volatile("" ::"r"(f), "r"(g), "r"(row), "r"(last));  // the first turn's place worked out while the counts load and scan
  const uint32_t total = static_cast<uint32_t>(s.rows) * by_groups.d;
  while (first < total) {  // warp-uniform
    RowAt r = row == last ? rows.in_row(s, static_cast<int32_t>(row)) : rows.bisect(s, f);
    r.valid = r.valid && first + mine < total;
    group_quant_item<T, kVec, kLanes, kPerLane, kRounding>(r, g, in, q, scales, group_stride, d, eps);
    first += turn;
    place();
  }
#endif
}

// The masked layout (at most a warp's width of experts) with 32-bit offsets (every one below 2^32, checked on
// the host), its rows interleaved: position p is row p / experts of expert p % experts, so that a group's place
// is known before the counts are read; a position at or past its expert's count is not computed.
struct InterleavedRows {
  const int32_t* masked_m;
  int32_t m_max;
  uint32_t experts;
  uint32_t in_expert, in_row, out_expert, out_row, scale_expert, scale_row;
  device::kv_cache::Divisor32 by_experts, by_groups;  // experts; groups a row (d / kActGroupSize)

  // Expert `lane`'s count within [0, M] (lanes past the experts: 0), by every lane of the warp.
  __device__ __forceinline__ int32_t lane_rows() const {
    const int lane = static_cast<int>(threadIdx.x % device::kWarpThreads);
    const int32_t m = masked_m[lane < static_cast<int>(experts) ? lane : 0];  // no branch around the load
    return lane < static_cast<int>(experts) && m > 0 ? (m < m_max ? m : m_max) : 0;  // clamped_rows, fused with the lane test
  }
  // Row m of expert e (valid: m < M).
  __device__ __forceinline__ RowAt locate(uint32_t e, uint32_t m) const {
    return {m < static_cast<uint32_t>(m_max), int64_t{e * in_expert + m * in_row}, int64_t{e * out_expert + m * out_row},
            int64_t{e * scale_expert + m * scale_row}};
  }
  // The same, computed where m is also below `count` (masked_m[e] as read).
  __device__ __forceinline__ RowAt at(uint32_t e, uint32_t m, int32_t count) const {
    RowAt r = locate(e, m);
    r.valid = r.valid && static_cast<int32_t>(m) < count;
    return r;
  }
};

// The group form over InterleavedRows, kLanes lanes a group of kPerLane vectors each (group_quant_item's),
// in two phases, over the warps in the order of their slots: kSpread, slot w * grid + b for warp w of CTA b
// (consecutive slots in other CTAs: a few rows spread over every CTA, whatever SM each runs on), else b *
// warps + w. The first turn: a group per lane set, the groups of the first positions in slot order (those
// whose groups the grid's first turn holds whole), its place worked out from the CTA's and thread's numbers,
// so that the loads after the PDL wait are the count, then the data. The rest (positions the first turn did
// not reach: many rows, or a few experts with many) as silu_and_mul_group_quant_masked_kernel takes the
// computed rows: their number is a warp's sum (the counts less the experts' rows among the first
// positions), and a warp with a group of them scans them over the experts (while its first data loads) and
// takes its own turns, a row's expert found by a vote where the warp's groups share it, else by bisection.
template <typename T, int kVec, int kLanes, int kPerLane, quant::Rounding kRounding, bool kNormalEps = false, int kThreads = kInterleavedThreads,
          int kCtas = kInterleavedCtas, bool kSpread = kInterleavedSpread>
__global__ void __launch_bounds__(kThreads, kCtas)
    silu_and_mul_group_quant_interleaved_kernel(const __grid_constant__ InterleavedRows rows, const T* in, uint8_t* q, float* scales,
                                                int64_t group_stride, int64_t d, float eps, bool trigger_at_start) {
#ifdef __CUDACC__
  constexpr uint32_t kGroupsPerWarp = device::kWarpThreads / kLanes, kWarps = kThreads / device::kWarpThreads;
  if (trigger_at_start) device::pdl_trigger_secondary();
  const int lane = static_cast<int>(threadIdx.x % device::kWarpThreads);
  const uint32_t warp = threadIdx.x / device::kWarpThreads, warps = gridDim.x * kWarps;
  const uint32_t slot = kSpread ? warp * gridDim.x + blockIdx.x : blockIdx.x * kWarps + warp;
  const uint32_t group_in_warp = static_cast<uint32_t>(lane) / kLanes;
  uint32_t unused, g, e;
  const uint32_t firsts = rows.by_groups.divide(warps * kGroupsPerWarp, unused);  // positions of the first turn
  const uint32_t p = rows.by_groups.divide(slot * kGroupsPerWarp + group_in_warp, g);
  const uint32_t m = rows.by_experts.divide(p, e);
  RowAt r = rows.locate(e, m);
  r.valid = r.valid && p < firsts;
  WaitPrimary{trigger_at_start}();
  r.valid = r.valid && static_cast<int32_t>(m) < rows.masked_m[e];
  const int32_t mine = rows.lane_rows();
  const GroupInput<T, kVec, kPerLane> x = load_group<T, kVec, kLanes, kPerLane>(r, g, in, d);
  // Expert `lane`'s rows among the first positions; its rows left, then (scanned) where those end in their
  // order (lanes past the experts: the total).
  const uint32_t before = static_cast<uint32_t>(lane) < firsts ? rows.by_experts.divide(firsts - 1 - lane, unused) + 1 : 0;
  int32_t end = static_cast<uint32_t>(mine) > before ? mine - static_cast<int32_t>(before) : 0;
  const uint32_t total = static_cast<uint32_t>(__reduce_add_sync(0xffffffffu, end)) * rows.by_groups.d;  // the rows left's groups
  uint32_t first = slot * kGroupsPerWarp;  // the warp's first group left
  const bool rest = first < total;  // warp-uniform
  if (rest) end = warp_inclusive_sum(end);
  // A warp with no group to compute skips the turn (the group's shuffles take whole warps either way).
  if (__any_sync(0xffffffffu, r.valid)) quantize_loaded<T, kVec, kLanes, kPerLane, kRounding, kNormalEps>(x, r, g, q, scales, group_stride, eps);
  if (!rest) return;
  for (; first < total; first += warps * kGroupsPerWarp) {  // warp-uniform
    uint32_t gf;  // group first + group_in_warp of the rows left: its row f and its number in it
    const uint32_t f = rows.by_groups.divide(first + group_in_warp, gf);
    const uint32_t row = rows.by_groups.divide(first, unused), last = rows.by_groups.divide(first + kGroupsPerWarp - 1, unused);
    int ef = 0;  // f's expert: how many experts' rows left end at or before it
    if (row == last) {
      ef = __popc(__ballot_sync(0xffffffffu, end <= static_cast<int32_t>(row)));
    } else {
#pragma unroll
      for (int step = device::kWarpThreads / 2; step > 0; step /= 2)
        if (__shfl_sync(0xffffffffu, end, ef + step - 1) <= static_cast<int32_t>(f)) ef += step;
    }
    const int32_t begin = __shfl_sync(0xffffffffu, end, ef > 0 ? ef - 1 : 0);
    const uint32_t skipped = __shfl_sync(0xffffffffu, before, ef);
    RowAt rf = rows.locate(ef, skipped + f - (ef > 0 ? begin : 0));
    rf.valid = first + group_in_warp < total;
    group_quant_item<T, kVec, kLanes, kPerLane, kRounding, kNormalEps>(rf, gf, in, q, scales, group_stride, d, eps);
  }
#endif
}

// The amax fold over values as gated() returns them (packed 16-bit pairs, or values of T).
template <typename T, int kVec, int kM, typename Op>
__device__ __forceinline__ float fold_gated(const Gated<T, kVec> (&y)[kM], const Op& op, float acc) {
  if constexpr (quant::kIsPacked16<std::remove_cvref_t<decltype(y[0][0])>>) {
    return quant::fold_pairs(y, op, acc);
  } else {
#pragma unroll
    for (int k = 0; k < kM; ++k) acc = device::norm::VecMath<T, kVec>::fold(y[k], op, acc);
    return acc;
  }
}

// One computed row quantized by `group`'s threads (device::norm's groups): s = scale_for(amax of the row's
// products, kDefaultScaleEps), q = y / s, the row's scale = s. kRegVecs vectors of products per thread stay in
// registers (kFit); a wider row's remainder is computed again from its input (L2) for each pass.
template <typename T, int kVec, RowFit kFit, int kRegVecs, typename Group>
__device__ __forceinline__ void token_quant_row(const Group& group, const RowAt& r, const T* in, uint8_t* q, float* scales, int64_t d) {
  constexpr bool kWider = kFit == RowFit::kWider;
  const int nvec = static_cast<int>(d / kVec), rank = group.rank(), size = group.size();
  const auto held = [&](int k) { return kFit == RowFit::kExact || k * size + rank < nvec; };
  const T* src = in + r.in;
  uint8_t* dst = q + r.out;
  const auto product = [&](int i) {
    AlignedVector<T, kVec> gate, up;
    gate.load(src + i * kVec);
    up.load(src + d + i * kVec);
    return gated<Silu>(gate, up);
  };
  AlignedVector<T, kVec> gate[kRegVecs], up[kRegVecs];
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    if (held(k)) {
      gate[k].load(src + (k * size + rank) * kVec);
      up[k].load(src + d + (k * size + rank) * kVec);
    } else {
      gate[k].fill(device::cast<T>(0.0f)), up[k].fill(device::cast<T>(0.0f));  // products of 0: no part of the amax
    }
  }
  Gated<T, kVec> y[kRegVecs];
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) y[k] = gated<Silu>(gate[k], up[k]);
  const auto fold = [&](auto op) {
    float acc = fold_gated<T, kVec>(y, op, 0.0f);
    for (int i = kRegVecs * size + rank; kWider && i < nvec; i += size) {
      const Gated<T, kVec> z[1] = {product(i)};
      acc = fold_gated<T, kVec>(z, op, acc);
    }
    return acc;
  };
  bool finite;  // the group's reduce_max gives each of its threads the same amax: no vote needed
  const float amax = quant::dynamic_amax(fold, [&](float v) { return group.reduce_max(v); }, [](bool b) { return b; }, finite);
  const quant::Divider s = quant::normal_dynamic_divider<fp8_e4m3_t>(amax, quant::kDefaultScaleEps, finite);
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k)
    if (held(k)) quant::store_quantized<fp8_e4m3_t, false>(dst + (k * size + rank) * kVec, y[k], s);
  for (int i = kRegVecs * size + rank; kWider && i < nvec; i += size) quant::store_quantized<fp8_e4m3_t, false>(dst + i * kVec, product(i), s);
  if (rank == 0) scales[r.scale] = s.s;
}

// A computed row per CTA and turn (token_quant_row over the CTA's threads, kRowRegVecs vectors each).
template <typename Rows, typename T, int kVec, RowFit kFit>
__global__ void __launch_bounds__(kRowThreadsBound)
    silu_and_mul_token_quant_rows_kernel(const __grid_constant__ Rows rows, const T* in, uint8_t* q, float* scales, int64_t d,
                                         bool trigger_at_start) {
#ifdef __CUDACC__
  if (trigger_at_start) device::pdl_trigger_secondary();
  const device::norm::CtaGroup<false> group;
  const auto state = rows.visit(WaitPrimary{trigger_at_start});
  for (int64_t f = blockIdx.x; f < state.rows; f += gridDim.x) {
    const RowAt r = rows.at(state, f);  // the same for every thread: the CTA skips or computes the row
    if (r.valid) token_quant_row<T, kVec, kFit, kRowRegVecs>(group, r, in, q, scales, d);
  }
#endif
}

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only

// A persistent grid of `kernel`: enough CTAs for `items` (the capacity's) at `per_cta` each, at most
// `per_sm` CTAs an SM (0: as many as the occupancy API fits; k > 0: k, or fewer where fewer fit; kOneTurn:
// no limit, one turn per CTA; kThriceResident: as 0, but three times the resident CTAs where the items need
// more than that, whose shorter runs the hardware spreads over the SMs as they free up).
constexpr int kOneTurn = -2;
constexpr int kThriceResident = -3;
template <typename Kernel>
unsigned persistent_grid(Kernel kernel, int64_t items, int64_t per_cta, int threads, int per_sm, DLDevice device) {
  const int64_t needed = host::div_ceil(items, per_cta);
  int64_t grid = needed;
  if (per_sm != kOneTurn) {
    int64_t ctas = host::runtime::resident_ctas_per_sm(kernel, threads, 0, device.device_id);
    if (per_sm > 0 && per_sm < ctas) ctas = per_sm;
    const int64_t resident = int64_t{host::runtime::get_sm_count(device.device_id)} * ctas;
    grid = per_sm == kThriceResident && needed > 3 * resident ? 3 * resident : host::min(needed, resident);
  }
  host::RuntimeCheck(grid <= 0x7fffffff, "the input is too large for one launch (", grid, " CTAs)");
  return static_cast<unsigned>(grid);
}

// How the kernels are launched: the fastest of the schedules measured side by side (docs/benchmarks/moe_act.md,
// benchmarks/bench_moe_act.py --schedules, whose alternatives are built from these kernels). The number of
// CTAs matters at decode sizes: a grid that does not fit the GPU at once runs its count scan in two waves.
// The sorted layout by chunks where its capacity holds a chunk an SM (a CTA each: a persistent grid's CTAs
// end unevenly, chunks holding 0 to 8 computed rows), the group form four vectors a lane; per row below that.
// The sorted group form a warp a row (kRowWarps a CTA, one turn) where the capacity holds four chunks an SM
// (sorted_warp_rows: H200, 256 experts, top-8, d = 2048, against the chunks, exact / sglang rounding: T = 64
// 1.03x / 1.23x, 256 1.18x / 1.35x, 1024 1.11x / 1.13x, 4096 1.01x / 1.04x, 16384 1.02x / 1.02x; at T = 16,
// 2048 rows, the warps lost 11% exact), under the exact rounding with eps >= kNormalScaleEps (its scale without
// the divisions' range tests: 1.06x at T = 256, 1.01x at 4096, 1.02x at 16384).
// The sorted per-token form a CTA a row on persistent_grid's kThriceResident: a persistent CTA's rows, the grid
// apart, fall on the same place in each expert's block, so some SMs take mostly computed rows (H200, 256
// experts, top-8, d = 2048, against the resident grid: T = 256 1.49x, 1024 1.20x, 4096 1.04x, 16384 1.03x,
// T <= 64 the same grid). The masked layout (up to 32 experts): silu_and_mul by turns where its
// rows fit one turn of the grid, else by chunks of up to 8 rows of an expert in a grid of kMaskedChunkCtas an
// SM; the group form by silu_and_mul_group_quant_interleaved_kernel where MoeActOps::interleaved takes the
// layout, in CTAs of kInterleavedThreads, kInterleavedCtas an SM, its warps spread over the CTAs (H200, 32
// experts, d = 2048, against SGLang 0.5.23's kernel, exact / sglang rounding, d3f0a55: T = 1 1.29x / 1.48x,
// 16 1.23x / 1.36x, 64 1.23x / 1.33x, 128 1.02x / 1.11x, 256 1.05x / 1.15x, 4096 1.01x / 1.01x, T = 64 all
// in one expert 1.07x / 1.20x; 10 CTAs of 128 threads an SM, the warps in CTA order: 0.87x / 0.85x at T = 1,
// 0.84x exact with one expert: at decode sizes a launch's CTAs cost time to start and retire, and a few rows
// must spread over every CTA, whatever SM each runs on), else (offsets past 32 bits; the exact rounding with
// eps below kNormalScaleEps) by silu_and_mul_group_quant_masked_kernel; the fp8 forms, and more experts, by
// turns over the computed rows.
constexpr int kMaskedChunkCtas = 2;

template <typename T>
struct MoeActOps {
  // input [P, 2d] -> out [P, d] for the computed rows of the sorted layout.
  static void silu_and_mul_sorted(jitkern::TensorView input, jitkern::TensorView sorted_token_ids, jitkern::TensorView num_tokens_post_pad,
                                  int64_t num_ids, jitkern::TensorView out) {
    const Sorted s = sorted_act(input, sorted_token_ids, num_tokens_post_pad, num_ids, out);
    elementwise(s.rows, s.op);
  }
  // ... -> output_q [P, d] (fp8 e4m3), output_s fp32 [P] (any stride): one dynamic scale per computed row.
  static void silu_and_mul_sorted_per_token_quant_fp8(jitkern::TensorView input, jitkern::TensorView sorted_token_ids,
                                                      jitkern::TensorView num_tokens_post_pad, int64_t num_ids, jitkern::TensorView output_q,
                                                      jitkern::TensorView output_s) {
    const Sorted s = sorted_token(input, sorted_token_ids, num_tokens_post_pad, num_ids, output_q, output_s);
    token_quant<kThriceResident>(s.rows, s.op);
  }
  // ... -> output_q [P, d] (fp8 e4m3), output_s fp32 [P, d / 128] (any strides): a dynamic scale per group of
  // group_size (128) outputs of a computed row, max(amax, eps) / 448 by kRounding's arithmetic (quant::Rounding).
  template <quant::Rounding kRounding>
  static void silu_and_mul_sorted_per_token_group_quant_fp8(jitkern::TensorView input, jitkern::TensorView sorted_token_ids,
                                                            jitkern::TensorView num_tokens_post_pad, int64_t num_ids,
                                                            jitkern::TensorView output_q, jitkern::TensorView output_s, int64_t group_size,
                                                            double eps) {
    const Sorted s = sorted_group(input, sorted_token_ids, num_tokens_post_pad, num_ids, output_q, output_s, group_size, eps);
    group_quant<kRounding>(s.rows, s.op);
  }

  // input [E, M, 2d] -> out [E, M, d] for rows m < masked_m[e] of each expert e.
  static void silu_and_mul_masked(jitkern::TensorView input, jitkern::TensorView masked_m, jitkern::TensorView out) {
    const Masked m = masked_act(input, masked_m, out);
    masked_rows(m.rows, [&](const auto& rows) { elementwise(rows, m.op); });
  }
  // ... -> output_q [E, M, d] (fp8 e4m3), output_s fp32 [E, M] (any strides).
  static void silu_and_mul_masked_per_token_quant_fp8(jitkern::TensorView input, jitkern::TensorView masked_m, jitkern::TensorView output_q,
                                                      jitkern::TensorView output_s) {
    const Masked m = masked_token(input, masked_m, output_q, output_s);
    masked_rows(m.rows, [&](const auto& rows) { token_quant(rows, m.op); });
  }
  // ... -> output_q [E, M, d] (fp8 e4m3), output_s fp32 [E, M, d / 128] (any strides: row-major, or
  // column-major per expert, an [E, d / 128, M] buffer transposed), by kRounding's arithmetic.
  template <quant::Rounding kRounding>
  static void silu_and_mul_masked_per_token_group_quant_fp8(jitkern::TensorView input, jitkern::TensorView masked_m,
                                                            jitkern::TensorView output_q, jitkern::TensorView output_s, int64_t group_size,
                                                            double eps) {
    const Masked m = masked_group(input, masked_m, output_q, output_s, group_size, eps);
    InterleavedRows rows;
    if (interleaved<kRounding>(m, rows)) return group_quant_interleaved<kRounding>(rows, m.op);
    masked_rows(m.rows, [&](const auto& rows) { group_quant<kRounding>(rows, m.op); });
  }

  // The pieces of the entry points above, public for the alternatives of bench_moe_act.py --schedules.

  // What every launch needs, whatever the layout: the input, the output, the scales (the fp8 forms).
  struct Operands {
    const T* in;
    void* out;
    int64_t capacity, d;
    int vec;  // elements per access: kVec16<T> where every pointer and stride allows, else 1
    DLDevice device;
    float* scales;
    int64_t group_stride;  // the group form's: between a row's scales
    float eps;             // the group form's
  };
  struct Sorted {
    SortedRows rows;
    Operands op;
  };
  struct Masked {
    MaskedLayout rows;
    Operands op;
    int64_t experts, m_max;
  };

  // The entry points' arguments, checked (each names the bad one).
  static Sorted sorted_act(jitkern::TensorView input, jitkern::TensorView ids, jitkern::TensorView post_pad, int64_t num_ids,
                           jitkern::TensorView out) {
    auto device = host::SymbolicDevice{};
    return sorted(input, ids, post_pad, num_ids, out, "out", host::DTypeList<T>{}, nullptr, device);
  }
  static Sorted sorted_token(jitkern::TensorView input, jitkern::TensorView ids, jitkern::TensorView post_pad, int64_t num_ids,
                             jitkern::TensorView output_q, jitkern::TensorView output_s) {
    auto device = host::SymbolicDevice{};
    Sorted s = sorted(input, ids, post_pad, num_ids, output_q, "output_q", FP8{}, nullptr, device);
    auto stride = host::SymbolicSize{"output_s_stride"};
    host::TensorMatcher({s.op.capacity}).with_strides({stride}).with_dtype<float>().with_device(host::device_v<kDLCUDA>, device).verify(
        output_s, "output_s");
    s.rows.scale_stride = stride.has_value() ? stride.unwrap() : 0;
    host::check_disjoint(host::Extents{s.op.capacity}, host::Extents{s.rows.scale_stride}, "output_s");
    s.op.scales = static_cast<float*>(output_s.data_ptr());
    return s;
  }
  static Sorted sorted_group(jitkern::TensorView input, jitkern::TensorView ids, jitkern::TensorView post_pad, int64_t num_ids,
                             jitkern::TensorView output_q, jitkern::TensorView output_s, int64_t group_size, double eps) {
    auto device = host::SymbolicDevice{};
    Sorted s = sorted(input, ids, post_pad, num_ids, output_q, "output_q", FP8{}, &group_size, device);
    auto row = host::SymbolicSize{"output_s_row_stride"}, group = host::SymbolicSize{"output_s_group_stride"};
    host::TensorMatcher({s.op.capacity, s.op.d / kActGroupSize}).with_strides({row, group}).with_dtype<float>().with_device(
        host::device_v<kDLCUDA>, device).verify(output_s, "output_s");
    s.rows.scale_stride = row.has_value() ? row.unwrap() : 0;
    with_group_scales(s.op, output_s, group, eps);
    host::check_disjoint(host::Extents{s.op.capacity, s.op.d / kActGroupSize}, host::Extents{s.rows.scale_stride, s.op.group_stride}, "output_s");
    return s;
  }
  static Masked masked_act(jitkern::TensorView input, jitkern::TensorView masked_m, jitkern::TensorView out) {
    auto device = host::SymbolicDevice{};
    return masked(input, masked_m, out, "out", host::DTypeList<T>{}, nullptr, device);
  }
  static Masked masked_token(jitkern::TensorView input, jitkern::TensorView masked_m, jitkern::TensorView output_q, jitkern::TensorView output_s) {
    auto device = host::SymbolicDevice{};
    Masked m = masked(input, masked_m, output_q, "output_q", FP8{}, nullptr, device);
    auto se = host::SymbolicSize{"output_s_expert_stride"}, sm = host::SymbolicSize{"output_s_row_stride"};
    host::TensorMatcher({m.experts, m.m_max}).with_strides({se, sm}).with_dtype<float>().with_device(host::device_v<kDLCUDA>, device).verify(
        output_s, "output_s");
    m.rows.scale_expert = se.has_value() ? se.unwrap() : 0, m.rows.scale_row = sm.has_value() ? sm.unwrap() : 0;
    host::check_disjoint(host::Extents{m.experts, m.m_max}, host::Extents{m.rows.scale_expert, m.rows.scale_row}, "output_s");
    m.op.scales = static_cast<float*>(output_s.data_ptr());
    return m;
  }
  static Masked masked_group(jitkern::TensorView input, jitkern::TensorView masked_m, jitkern::TensorView output_q, jitkern::TensorView output_s,
                             int64_t group_size, double eps) {
    auto device = host::SymbolicDevice{};
    Masked m = masked(input, masked_m, output_q, "output_q", FP8{}, &group_size, device);
    auto se = host::SymbolicSize{"output_s_expert_stride"}, sm = host::SymbolicSize{"output_s_row_stride"};
    auto sg = host::SymbolicSize{"output_s_group_stride"};
    host::TensorMatcher({m.experts, m.m_max, m.op.d / kActGroupSize}).with_strides({se, sm, sg}).with_dtype<float>().with_device(
        host::device_v<kDLCUDA>, device).verify(output_s, "output_s");
    m.rows.scale_expert = se.has_value() ? se.unwrap() : 0, m.rows.scale_row = sm.has_value() ? sm.unwrap() : 0;
    with_group_scales(m.op, output_s, sg, eps);
    host::check_disjoint(host::Extents{m.experts, m.m_max, m.op.d / kActGroupSize},
                         host::Extents{m.rows.scale_expert, m.rows.scale_row, m.op.group_stride}, "output_s");
    return m;
  }

  // The masked layout's rows type for `layout`, passed to f: each warp scans the counts where they fit it.
  template <typename F>
  static void masked_rows(const MaskedLayout& layout, F&& f) {
    if (layout.experts <= MaskedRowsWarp::kMaxWarpExperts) {
      f(MaskedRowsWarp{layout});
    } else {
      f(MaskedRows{layout});
    }
  }

  // The launches: Rows' kernel `kernel` on `grid` CTAs, silu_and_mul's, the group form's, the per-token form's.
  template <typename Rows, typename Kernel>
  static void launch_act(Kernel kernel, unsigned grid, const Rows& rows, const Operands& op) {
    host::LaunchKernel(grid, kActThreads, op.device).enable_pdl()(kernel, rows, op.in, static_cast<T*>(op.out), op.d, host::pdl_early_trigger(grid));
  }
  template <typename Rows, typename Kernel>
  static void launch_group(Kernel kernel, unsigned grid, const Rows& rows, const Operands& op, int threads = kActGroupThreads) {
    host::LaunchKernel(grid, threads, op.device)
        .enable_pdl()(kernel, rows, op.in, static_cast<uint8_t*>(op.out), op.scales, op.group_stride, op.d, op.eps, host::pdl_early_trigger(grid));
  }
  template <typename Rows, typename Kernel>
  static void launch_token(Kernel kernel, unsigned grid, int threads, const Rows& rows, const Operands& op) {
    host::LaunchKernel(grid, threads, op.device).enable_pdl()(kernel, rows, op.in, static_cast<uint8_t*>(op.out), op.scales, op.d,
                                                              host::pdl_early_trigger(grid));
  }

  // launch(std::integral_constant<int, kVec>{}) with op's elements per access.
  template <typename Launch>
  static void with_vec(const Operands& op, const Launch& launch) {
    if (op.vec == device::kVec16<T>) {
      launch(std::integral_constant<int, device::kVec16<T>>{});
    } else {
      launch(std::integral_constant<int, 1>{});
    }
  }

  // silu_and_mul over Rows' computed rows.
  template <typename Rows>
  static void elementwise(const Rows& rows, const Operands& op) {
    using namespace host;
    if (op.capacity * op.d == 0) return;
    const auto launch = [&](auto vec_tag) {
      constexpr int kVec = decltype(vec_tag)::value;
      if constexpr (std::is_same_v<Rows, MaskedRowsWarp>) {
        constexpr auto kernel = silu_and_mul_chunks_kernel<Rows, T, kVec>;
        launch_act(kernel, persistent_grid(kernel, chunks_in(rows), 1, kActThreads, kMaskedChunkCtas, op.device), rows, op);
      } else {
        if constexpr (std::is_same_v<Rows, SortedRows>) {
          if (sorted_chunks(op)) {
            constexpr auto kernel = silu_and_mul_chunks_kernel<Rows, T, kVec>;
            return launch_act(kernel, persistent_grid(kernel, chunks_in(rows), 1, kActThreads, kOneTurn, op.device), rows, op);
          }
        }
        constexpr int kItems = std::is_same_v<Rows, SortedRows> ? kSortedVecs : kMaskedVecs;
        constexpr auto kernel = silu_and_mul_rows_kernel<Rows, T, kVec, kItems>;
        launch_act(kernel, persistent_grid(kernel, op.capacity * (op.d / kVec), int64_t{kActThreads} * kItems, kActThreads, 0, op.device), rows, op);
      }
    };
    with_vec(op, launch);
  }

  // The group form over Rows' computed rows: the turns kernel (kTurnLanes lanes a group; for at most a warp's
  // width of experts, its masked form) or, for the sorted layout's chunks, kChunkLanes.
  template <int kVec>
  static constexpr int kTurnLanes = kVec == 1 ? device::kWarpThreads : kActGroupSize / kVec / 2;
  template <int kVec>
  static constexpr int kChunkLanes = kVec == 1 ? device::kWarpThreads : kActGroupSize / kVec / 4;
  template <quant::Rounding kRounding, typename Rows>
  static void group_quant(const Rows& rows, const Operands& op) {
    using namespace host;
    if (op.capacity * op.d == 0) return;
    const int64_t groups = op.capacity * (op.d / kActGroupSize);
    const auto launch = [&](auto vec_tag) {
      constexpr int kVec = decltype(vec_tag)::value;
      constexpr int kLanes = kTurnLanes<kVec>, kPerLane = kActGroupSize / kVec / kLanes;
      if constexpr (std::is_same_v<Rows, MaskedRowsWarp>) {
        RuntimeCheck(groups < (int64_t{1} << 31), "at most 2^31 - 1 groups (num_experts * max_rows_per_expert * d / ", kActGroupSize,
                     ") are supported, got ", groups);
        constexpr auto kernel = silu_and_mul_group_quant_masked_kernel<Rows, T, kVec, kLanes, kPerLane, kRounding>;
        const unsigned grid = persistent_grid(kernel, groups, kActGroupThreads / kLanes, kActGroupThreads, 0, op.device);
        LaunchKernel(grid, kActGroupThreads, op.device)
            .enable_pdl()(kernel, rows, op.in, static_cast<uint8_t*>(op.out), op.scales, op.group_stride, op.d, op.eps,
                          host::kv_cache::divisor<uint32_t>(op.d / kActGroupSize), host::pdl_early_trigger(grid));
      } else {
        if constexpr (std::is_same_v<Rows, SortedRows>) {
          if (sorted_warp_rows<kRounding>(op)) {
            constexpr int kRowLanes = kChunkLanes<kVec>, kThreads = kRowWarps * device::kWarpThreads;
            constexpr auto kernel = silu_and_mul_group_quant_warps_kernel<SortedRows, T, kVec, kRowLanes, kActGroupSize / kVec / kRowLanes, kRounding,
                                                                          kRounding == quant::Rounding::kExact>;
            return launch_group(kernel, persistent_grid(kernel, op.capacity, kRowWarps, kThreads, kOneTurn, op.device), rows, op, kThreads);
          }
          if (sorted_chunks(op)) {
            constexpr int kChunk = kChunkLanes<kVec>;
            constexpr auto kernel = silu_and_mul_group_quant_chunks_kernel<T, kVec, kChunk, kActGroupSize / kVec / kChunk, kRounding>;
            return launch_group(kernel, persistent_grid(kernel, chunks_in(rows), 1, kActGroupThreads, kOneTurn, op.device), rows, op);
          }
        }
        constexpr auto kernel = silu_and_mul_group_quant_rows_kernel<Rows, T, kVec, kLanes, kPerLane, kRounding>;
        launch_group(kernel, persistent_grid(kernel, groups, kActGroupThreads / kLanes, kActGroupThreads, 0, op.device), rows, op);
      }
    };
    with_vec(op, launch);
  }

  // The masked group form's layout as InterleavedRows (`rows`) where silu_and_mul_group_quant_interleaved_kernel
  // takes it: at most 32 experts, every offset below 2^32, fewer than 2^31 groups, and under the exact rounding
  // eps >= kNormalScaleEps (the scale's arithmetic without the divisions' range tests); false elsewhere.
  template <quant::Rounding kRounding>
  static bool interleaved(const Masked& m, InterleavedRows& rows) {
    const MaskedLayout& l = m.rows;
    const int64_t groups = m.op.capacity * (m.op.d / kActGroupSize);
    const auto end = [&](int64_t se, int64_t sm, int64_t row) { return (m.experts - 1) * se + (m.m_max - 1) * sm + row; };
    if (groups == 0 || m.experts > MaskedRowsWarp::kMaxWarpExperts || groups >= (int64_t{1} << 31) ||
        end(l.in_expert, l.in_row, 2 * m.op.d) > UINT32_MAX || end(l.out_expert, l.out_row, m.op.d) > UINT32_MAX ||
        end(l.scale_expert, l.scale_row, 1) > UINT32_MAX ||
        !quant::normal_eps_holds<kRounding>(m.op.eps))
      return false;
    const auto narrow = [](int64_t v) { return static_cast<uint32_t>(v); };
    rows = {l.masked_m,
            l.m_max,
            narrow(m.experts),
            narrow(l.in_expert),
            narrow(l.in_row),
            narrow(l.out_expert),
            narrow(l.out_row),
            narrow(l.scale_expert),
            narrow(l.scale_row),
            host::kv_cache::divisor<uint32_t>(m.experts),
            host::kv_cache::divisor<uint32_t>(m.op.d / kActGroupSize)};
    return true;
  }
  // The group form over InterleavedRows (kTurnLanes lanes a group), kNormalEps under the exact rounding.
  template <quant::Rounding kRounding, int kThreads = kInterleavedThreads, int kCtas = kInterleavedCtas, bool kSpread = kInterleavedSpread>
  static void group_quant_interleaved(const InterleavedRows& rows, const Operands& op) {
    const int64_t groups = op.capacity * (op.d / kActGroupSize);
    with_vec(op, [&](auto vec_tag) {
      constexpr int kVec = decltype(vec_tag)::value, kLanes = kTurnLanes<kVec>;
      constexpr auto kernel = silu_and_mul_group_quant_interleaved_kernel<T, kVec, kLanes, kActGroupSize / kVec / kLanes, kRounding,
                                                                          kRounding == quant::Rounding::kExact, kThreads, kCtas, kSpread>;
      const unsigned grid = persistent_grid(kernel, groups, kThreads / kLanes, kThreads, 0, op.device);
      host::LaunchKernel(grid, kThreads, op.device)
          .enable_pdl()(kernel, rows, op.in, static_cast<uint8_t*>(op.out), op.scales, op.group_stride, op.d, op.eps,
                        host::pdl_early_trigger(grid));
    });
  }

  // The per-token form over Rows' computed rows: a CTA a row, as wide as the row's vectors want; the grid by
  // persistent_grid's kPerSm.
  template <int kPerSm = 0, typename Rows>
  static void token_quant(const Rows& rows, const Operands& op) {
    using namespace host;
    if (op.capacity * op.d == 0) return;
    RuntimeCheck(op.d <= INT32_MAX, "d must be below 2^31, got ", op.d);
    const auto launch = [&](auto vec_tag) {
      constexpr int kVec = decltype(vec_tag)::value;
      const int64_t nvec = op.d / kVec;
      const int threads = host::norm::wide_threads(nvec, kRowRegVecs, row_policy(op.device).row_threads);
      const auto run = [&](auto fit_tag) {
        constexpr auto kernel = silu_and_mul_token_quant_rows_kernel<Rows, T, kVec, decltype(fit_tag)::value>;
        launch_token(kernel, persistent_grid(kernel, op.capacity, 1, threads, kPerSm, op.device), threads, rows, op);
      };
      const RowFit fit = host::norm::row_fit(nvec, kRowRegVecs, threads);
      if (fit == RowFit::kExact) {
        run(std::integral_constant<RowFit, RowFit::kExact>{});
      } else if (fit == RowFit::kFits) {
        run(std::integral_constant<RowFit, RowFit::kFits>{});
      } else {
        run(std::integral_constant<RowFit, RowFit::kWider>{});
      }
    };
    with_vec(op, launch);
  }

  // The sorted layout by chunks of kChunkRows where its capacity holds a chunk an SM (at 128 rows the one
  // turn of per-row lookups is the shorter).
  static bool sorted_chunks(const Operands& op) {
    return op.capacity >= int64_t{kChunkRows} * host::runtime::get_sm_count(op.device.device_id);
  }
  // The sorted group form a warp a row (kRowWarps a CTA, one turn) where the capacity holds four chunks an SM,
  // and under the exact rounding eps >= kNormalScaleEps (its kernel skips the divisions' range tests).
  template <quant::Rounding kRounding>
  static bool sorted_warp_rows(const Operands& op) {
    return op.capacity >= int64_t{4 * kChunkRows} * host::runtime::get_sm_count(op.device.device_id) &&
           quant::normal_eps_holds<kRounding>(op.eps);
  }
  // The most chunks of kChunkRows rows the layout holds: a grid of a CTA each.
  static int64_t chunks_in(const SortedRows& rows) { return host::div_ceil(rows.capacity, int64_t{kChunkRows}); }
  static int64_t chunks_in(const MaskedLayout& rows) { return int64_t{rows.experts} * host::div_ceil(int64_t{rows.m_max}, int64_t{kChunkRows}); }

 private:
  using FP8 = host::DTypeList<uint8_t, fp8_e4m3_t>;

  static void with_group_scales(Operands& op, jitkern::TensorView output_s, const host::SymbolicSize& group, double eps) {
    host::RuntimeCheck(std::isfinite(eps) && eps > 0.0, "eps must be a finite positive number, got ", eps);
    op.scales = static_cast<float*>(output_s.data_ptr());
    op.group_stride = group.has_value() ? group.unwrap() : 0;
    op.eps = static_cast<float>(eps);
  }

  static int64_t stride_or_0(const host::SymbolicSize& s) { return s.has_value() ? s.unwrap() : 0; }

  // d from the input's width 2d; with group_size (the quantized-by-group forms), also its checks.
  static int64_t half_width(int64_t width, const int64_t* group_size) {
    using namespace host;
    RuntimeCheck(width % 2 == 0, "the last dimension of input must be even (2 * d), got ", width);
    const int64_t d = width / 2;
    if (group_size != nullptr) {
      RuntimeCheck(*group_size == kActGroupSize, "group_size must be ", kActGroupSize, ", got ", *group_size);
      RuntimeCheck(d % kActGroupSize == 0, "d, the last dimension of output_q (half of input's), must be a multiple of group_size (", kActGroupSize,
                   "), got ", d);
    }
    return d;
  }

  template <typename OutTypes>
  static Sorted sorted(jitkern::TensorView input, jitkern::TensorView ids, jitkern::TensorView post_pad, int64_t num_ids, jitkern::TensorView out,
                       const char* out_name, OutTypes out_types, const int64_t* group_size, host::SymbolicDevice& device) {
    using namespace host;
    auto P = SymbolicSize{"num_sorted_rows"}, W = SymbolicSize{"input_width"}, D = SymbolicSize{"d"};
    auto in_stride = SymbolicSize{"input_row_stride"}, out_stride = SymbolicSize{"out_row_stride"};
    TensorMatcher({P, W}).with_strides({in_stride, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(input, "input");
    D.set_value(half_width(W.unwrap(), group_size));
    TensorMatcher({P, D}).with_strides({out_stride, 1}).with_dtype(out_types).with_device(device_v<kDLCUDA>, device).verify(out, out_name);
    TensorMatcher({P}).with_dtype<int32_t>().with_device(device_v<kDLCUDA>, device).verify(ids, "sorted_token_ids");
    TensorMatcher({1}).with_dtype<int32_t>().with_device(device_v<kDLCUDA>, device).verify(post_pad, "num_tokens_post_pad");
    RuntimeCheck(num_ids >= 0 && num_ids <= INT32_MAX, "num_ids must be in [0, 2^31 - 1], got ", num_ids);
    const int64_t rows = P.unwrap(), d = D.unwrap(), is = stride_or_0(in_stride), os = stride_or_0(out_stride);
    check_rows_disjoint(rows, d, os, out_name);  // input is only read: its rows may overlap (a broadcast)
    const int out_bytes = (out.dtype().bits + 7) / 8;
    const int vec = host::vector_width(device::kVec16<T>, d, {static_cast<const T*>(input.data_ptr()), {out.data_ptr(), out_bytes}},
                                       {rows > 1 ? is : 0, rows > 1 ? os : 0});
    return {{static_cast<const int32_t*>(ids.data_ptr()), static_cast<const int32_t*>(post_pad.data_ptr()), rows, static_cast<uint32_t>(num_ids),
             is, os, 0},
            {static_cast<const T*>(input.data_ptr()), out.data_ptr(), rows, d, vec, device.unwrap()}};
  }

  template <typename OutTypes>
  static Masked masked(jitkern::TensorView input, jitkern::TensorView masked_m, jitkern::TensorView out, const char* out_name, OutTypes out_types,
                       const int64_t* group_size, host::SymbolicDevice& device) {
    using namespace host;
    auto E = SymbolicSize{"num_experts"}, M = SymbolicSize{"max_rows_per_expert"}, W = SymbolicSize{"input_width"}, D = SymbolicSize{"d"};
    auto ie = SymbolicSize{"input_expert_stride"}, im = SymbolicSize{"input_row_stride"};
    auto oe = SymbolicSize{"out_expert_stride"}, om = SymbolicSize{"out_row_stride"};
    TensorMatcher({E, M, W}).with_strides({ie, im, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(input, "input");
    D.set_value(half_width(W.unwrap(), group_size));
    TensorMatcher({E, M, D}).with_strides({oe, om, 1}).with_dtype(out_types).with_device(device_v<kDLCUDA>, device).verify(out, out_name);
    TensorMatcher({E}).with_dtype<int32_t>().with_device(device_v<kDLCUDA>, device).verify(masked_m, "masked_m");
    const int64_t experts = E.unwrap(), m_max = M.unwrap(), d = D.unwrap();
    RuntimeCheck(experts <= kMaxExperts, "at most ", kMaxExperts, " experts are supported, got ", experts);
    RuntimeCheck(experts * m_max <= INT32_MAX, "at most 2^31 - 1 rows (num_experts * max_rows_per_expert) are supported, got ", experts * m_max);
    const int64_t in_e = experts > 1 ? stride_or_0(ie) : 0, in_m = m_max > 1 ? stride_or_0(im) : 0;
    const int64_t out_e = experts > 1 ? stride_or_0(oe) : 0, out_m = m_max > 1 ? stride_or_0(om) : 0;
    host::check_disjoint(host::Extents{experts, m_max, d}, host::Extents{out_e, out_m, 1}, out_name);  // input is only read: it may overlap
    const int out_bytes = (out.dtype().bits + 7) / 8;
    const int vec = host::vector_width(device::kVec16<T>, d, {static_cast<const T*>(input.data_ptr()), {out.data_ptr(), out_bytes}},
                                       {in_e, in_m, out_e, out_m});
    return {{static_cast<const int32_t*>(masked_m.data_ptr()), static_cast<int>(experts), static_cast<int32_t>(m_max), in_e, in_m, out_e, out_m, 0, 0},
            {static_cast<const T*>(input.data_ptr()), out.data_ptr(), experts * m_max, d, vec, device.unwrap()},
            experts,
            m_max};
  }
};
#endif  // __CUDACC_RTC__

}  // namespace jitkern_moe_act
