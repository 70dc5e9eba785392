// The RMSNorm kernels and their launches, shared by the families that normalise rows: the norm family
// (csrc/norm.cuh, device::norm::StoreOutput epilogue) and the quantization family (its quantizing
// epilogue, device::quant::QuantizeRows). Building blocks: <jitkern/impl/norm.cuh>.
//
// Every op is one or two "row problems" (tokens x heads rows, each normalised over `hidden` elements
// with one weight vector). Narrow rows (<= 32 vectors) take a group of lanes of a warp each; wider
// rows take one CTA each. 16-byte vectors are used whenever every pointer and stride allows.
#pragma once

#include <jitkern/impl/norm.cuh>
#include <jitkern/policy.cuh>
#include <jitkern/type.cuh>
#include <jitkern/utils.cuh>
#include <jitkern/vec.cuh>
#ifndef __CUDACC_RTC__
#include <jitkern/tensor.h>

#include <utility>
#endif

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace device::norm {

// Narrow rows (at most 32 vectors) take a group of lanes of a warp each, one vector per lane, in
// CTAs of kNormNarrowThreads; wider rows take one CTA each, of at most the device's
// host::RowPolicy::row_threads threads holding up to norm_reg_vecs vectors each (fused_add_rmsnorm: kNormFusedRegVecs; rows wider
// than that re-read their remainder from L2).
constexpr int kNormNarrowThreads = host::kRowKernels.narrow_threads;
// Small narrow-row grids (kNormNarrowSmallMinCtas to kNormNarrowSmallMaxCtas CTAs of kNormNarrowThreads)
// take CTAs of kNormNarrowSmallThreads instead, four times as many: qknorm (32 + 8 heads of 128, bf16) at
// 2-32 tokens 1.06-1.14 us against 1.14-1.22; at 1 token (3 CTAs) 1.25 against 1.15.
constexpr int kNormNarrowSmallThreads = 64;
constexpr int64_t kNormNarrowSmallMinCtas = 4, kNormNarrowSmallMaxCtas = 80;
constexpr int kNormWideThreads = host::kRowKernels.max_cta_threads;  // the launch bound; at launch host::RowPolicy::row_threads
// Four vectors a thread (128 threads a row at bf16 [*, 4096]) against two: rmsnorm 2998 vs 2971 GB/s
// at [32768, 4096] and 0.02-0.18 us faster at 1-64 rows, rmsnorm_quant_fp8 dynamic 71.4 vs 78.5 us
// at [16384, 4096]; fused_add_rmsnorm, holding the residual as well, was 2.6x slower at four.
constexpr int kNormWideRegVecs = host::kRowKernels.wide_reg_vecs;
constexpr int kNormFusedRegVecs = host::kRowKernels.fused_reg_vecs;
// launch_norm_two_widths stays at two: at four the narrower problem's rows leave three quarters of
// the threads idle (qknorm across heads, q 4096 + k 1024, 1-64 tokens: 1.55-1.76 us against 1.35-1.50).
constexpr int kNormTwoWidthsRegVecs = host::kRowKernels.two_widths_reg_vecs;
// The vectors a thread holds of a wide row of `nvec` vectors without a residual: two where two fill whole warps and
// kNormWideRegVecs do not (bf16 1536 / 2560 / 3584: the row held exactly, in more threads; at four a thread the
// general kernel spilled 56 bytes under its 1024-thread bound), else kNormWideRegVecs. bf16 [64 / 256, 3584]
// gemma_rmsnorm 1.20 / 1.57 us against 1.45 / 1.83, [64, 2560] 1.17 against 1.43; at [4096, 3584] rmsnorm 15.50
// against the spilling kernel's 20.25 (docs/benchmarks/norm.md).
constexpr int kNormHalfRegVecs = 2;
constexpr int norm_reg_vecs(int64_t nvec) {
  return nvec % (kNormWideRegVecs * kWarpThreads) != 0 && nvec % (kNormHalfRegVecs * kWarpThreads) == 0 ? kNormHalfRegVecs : kNormWideRegVecs;
}
// Rows of `nvec` vectors held at kNormHalfRegVecs a thread that take norm_folded_kernel from kNormManyRowsPerSm rows an
// SM on: 448 (bf16 3584), where folding onto half the threads raises the CTAs an SM from 7 (40 registers, 224 threads)
// to 8 (64, 128): rmsnorm / gemma_rmsnorm [4096, 3584] 14.33 / 14.42 us against 15.39 / 15.59 unfolded (SGLang 15.16 /
// 15.46), rmsnorm [1024, 3584] 2.88 against 3.37 (docs/benchmarks/norm.md); at 320 and 192 (2560, 1536) it does not
// (10 and 16 either way; [4096, 2560] folded 8.74 against 8.61).
constexpr bool norm_folds(int64_t nvec) { return nvec == 448; }
// Narrow rows: groups take host::RowPolicy::rows_per_group rows each once one-row groups would fill
// this many CTAs per SM.
constexpr int kNormNarrowRowsPerGroupThreshold = 16;
// "Many rows": from this many rows per SM on, the launches below switch to their streaming variants.
constexpr int kNormManyRowsPerSm = 4;
// PDL trigger placement: narrow-row grids (and the quantization family's per-token and per-group
// grids) follow host::pdl_early_trigger (<jitkern/utils.cuh>). Wide rows of plain rmsnorm trigger at start up to kNormWideEarlyTriggerMaxCtas rows (bf16 [1-32, 4096]: 1.18-1.26 us against 1.40-1.43
// after the wait; [64, 4096]: 2.34 against 1.45); the fused and quantizing epilogues always after it
// (fused_add_rmsnorm [8-16, 4096]: 1.63-1.91 us at start against 1.50-1.51; rmsnorm_quant_fp8 static
// [1 / 4, 4096]: 1.66 / 1.76 against 1.47 / 1.45) (docs/benchmarks/design.md).
constexpr int64_t kNormWideEarlyTriggerMaxCtas = 32;
// Plain rmsnorm of 16-bit rows of these widths, fewer than kNormManyRowsPerSm per SM, takes a kernel built
// for the width (norm_static_kernel), in the layout of the kernel it replaces, so with the same bits: at
// [1 / 16 / 128, 4096] bf16 0.98 / 1.01 / 1.40 us against 1.20 / 1.32 / 1.55, [1, 2048] 0.96 against
// 1.09, [64, 8192] 1.51 against 1.61 (H200, bench_schedules.py, docs/benchmarks/vs_reference.md).
constexpr int kNormStaticWidths[] = {1024, 1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192};
// Its PDL trigger: at kernel start up to this many rows, after the last store above (bf16 [1 / 16, 4096]:
// 0.98 / 1.01 us at start against 1.14 / 1.19 at the end; [128, 4096]: 2.55 against 1.40).
constexpr int64_t kNormStaticEarlyTriggerMaxRows = 16;
// The device passes of a module built in several (host::in_device_part): the kernels built for a width,
// the narrow rows' lane groups, the wide rows' CTAs (about a dozen kernels each in an rmsnorm module).
constexpr int kNormStaticPart = 0, kNormNarrowPart = 1, kNormWidePart = 2;
// Rows are indexed with 32-bit integers on the device; the host splits larger problems.
constexpr int64_t kNormMaxRowsPerLaunch = int64_t{1} << 30;

// Row r of a problem is head (r % heads) of token (r / heads), at token * *_token + head * *_head
// elements from its base pointer.
template <typename T>
struct RowProblem {
  T* out;
  const T* in;
  T* residual;  // fused_add_rmsnorm only
  const T* weight;
  int64_t out_token, out_head, in_token, in_head, res_token, res_head;
  int32_t heads;
};

template <typename T>
struct NormParams {
  RowProblem<T> problem[2];
  int32_t rows0;            // rows of problem[0] (problem-major order)
  int32_t heads_per_token;  // rows of both problems per token (token-major order)
  int32_t total_rows;
  int64_t hidden;
  float eps;
  int64_t hidden1;  // problem[1]'s row width in a two-width launch (launch_norm_two_widths), else unused
  bool early_trigger;  // set by each launch: trigger the next launch at start, else after the wait
};


// How row numbers map to (problem, token, head):
//   kProblemMajor: every row of problem[0], then every row of problem[1];
//   kTokenMajor:   token by token, problem[0]'s heads then problem[1]'s: a fused qkv buffer in memory
//                  order; faster with many rows, slower on small grids, so only the many-row launch
//                  uses it (docs/benchmarks/design.md);
//   kTokenRows:    one problem with one row per token (rmsnorm, fused_add_rmsnorm): no problem select
//                  and no head division (see launch_norm_wide for where that pays).
enum class RowOrder { kProblemMajor, kTokenMajor, kTokenRows };

template <typename T>
__device__ __forceinline__ RowPointers<T> row_at(const RowProblem<T>& q, uint32_t token, uint32_t head) {
  return {q.out + token * q.out_token + head * q.out_head, q.in + token * q.in_token + head * q.in_head,
          q.residual + token * q.res_token + head * q.res_head, q.weight};
}

template <typename T, RowOrder kOrder>
__device__ __forceinline__ RowPointers<T> locate_row(const NormParams<T>& p, int32_t row) {
  const uint32_t r = static_cast<uint32_t>(row);
  if constexpr (kOrder == RowOrder::kTokenRows) {
    return row_at(p.problem[0], r, 0);
  } else if constexpr (kOrder == RowOrder::kTokenMajor) {
    const uint32_t heads = static_cast<uint32_t>(p.heads_per_token), heads0 = static_cast<uint32_t>(p.problem[0].heads);
    const uint32_t token = heads == 1 ? r : r / heads, head = r - token * heads;
    return head < heads0 ? row_at(p.problem[0], token, head) : row_at(p.problem[1], token, head - heads0);
  } else {
    const bool second = row >= p.rows0;
    const RowProblem<T>& q = p.problem[second ? 1 : 0];
    const uint32_t rq = second ? r - static_cast<uint32_t>(p.rows0) : r;
    const uint32_t heads = static_cast<uint32_t>(q.heads);
    const uint32_t token = heads == 1 ? rq : rq / heads;
    return row_at(q, token, rq - token * heads);
  }
}

// The rows of batch `batch` of narrow rows, groups of `width` lanes taking kRows rows each: the batch's
// k-th rows are contiguous across its groups (coalesced between groups).
template <typename T, int kVec, int kRows, typename Epi>
struct NarrowBatch {
  RowPointers<T> rows[kRows];
  typename Epi::template Row<T, kVec> epis[kRows];
  bool valid[kRows];

  template <RowOrder kOrder>
  __device__ __forceinline__ void locate(const NormParams<T>& p, const Epi& epi, int64_t batch, int groups, int width) {
    const int64_t first = batch * groups * kRows + threadIdx.x / width;
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      const int64_t row = first + int64_t{k} * groups;
      valid[k] = row < p.total_rows;
      const int32_t r = static_cast<int32_t>(valid[k] ? row : 0);
      rows[k] = locate_row<T, kOrder>(p, r);
      epis[k] = epi.template row<T, kVec>(rows[k], static_cast<uint32_t>(r));
    }
  }
};

// PDL: the next kernel may launch at once; its own pdl_wait_primary() still waits for this grid to
// finish and its memory to be visible, so triggering first only hides the next launch's latency.
template <typename T, int kVec, int kWidth, int kRows, bool kFusedAdd, typename Epi, RowOrder kOrder>
__global__ void __launch_bounds__(kNormNarrowThreads) norm_narrow_kernel(const __grid_constant__ NormParams<T> p,
                                                                         const __grid_constant__ Epi epi) {
#ifdef __CUDACC__
  const int groups = static_cast<int>(blockDim.x) / kWidth;  // CTAs of kNormNarrowThreads or kNormNarrowSmallThreads
  if (p.early_trigger) device::pdl_trigger_secondary();
  NarrowBatch<T, kVec, kRows, Epi> b;
  b.template locate<kOrder>(p, epi, blockIdx.x, groups, kWidth);
  device::pdl_wait_primary();
  if (!p.early_trigger) device::pdl_trigger_secondary();
  device::norm::rmsnorm_narrow_rows<T, kVec, kRows, kFusedAdd>(b.rows, b.epis, b.valid, p.hidden, p.eps, device::norm::WarpGroup<kWidth>{});
#endif
}

// Many rows normalised in place (out == in, no residual, StoreOutput: qknorm), as norm_narrow_kernel<...,
// kRows, ..., RowOrder::kTokenMajor> takes them (the same rows a group, the same bits), each row's one
// pointer found after the PDL wait with 32-bit row arithmetic. That kernel's general rows (out, in and
// residual pointers and the epilogue's, found before the wait) held 62 registers a thread, 4 CTAs of 256
// an SM; this one 40, 6 (qknorm 32 + 8 heads x 128 bf16 on an H200, bench_schedules.py: a kernel of this
// layout and register count 42.2 / 162.9 us at 8192 / 32768 tokens against 47.5 / 184.4,
// docs/benchmarks/vs_reference.md). The next launch is triggered after the wait.
template <typename T, int kVec, int kWidth, int kRows, bool kFullRows>
__global__ void __launch_bounds__(kNormNarrowThreads) norm_inplace_rows_kernel(const __grid_constant__ NormParams<T> p) {
#ifdef __CUDACC__
  constexpr uint32_t kGroups = kNormNarrowThreads / kWidth;
  const uint32_t group = threadIdx.x / kWidth, heads = static_cast<uint32_t>(p.heads_per_token);
  const uint32_t heads0 = static_cast<uint32_t>(p.problem[0].heads);
  device::pdl_wait_primary();
  device::pdl_trigger_secondary();
  using EpiRow = typename StoreOutput<T>::template Row<T, kVec>;
  RowPointers<T> rows[kRows];
  EpiRow epis[kRows];
  bool valid[kRows];
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    const uint32_t r = blockIdx.x * (kGroups * kRows) + k * kGroups + group;
    valid[k] = r < static_cast<uint32_t>(p.total_rows);
    const uint32_t token = valid[k] ? r / heads : 0, head = valid[k] ? r - token * heads : 0;
    const bool first = head < heads0;
    const RowProblem<T>& q0 = p.problem[0];
    const RowProblem<T>& q1 = p.problem[1];
    T* row = first ? q0.out + token * q0.out_token + head * q0.out_head : q1.out + token * q1.out_token + (head - heads0) * q1.out_head;
    rows[k] = {row, row, nullptr, first ? q0.weight : q1.weight};
    epis[k] = {row};
  }
  rmsnorm_narrow_rows<T, kVec, kRows, false, kWidth, EpiRow, kFullRows>(rows, epis, valid, p.hidden, p.eps, WarpGroup<kWidth>{});
#endif
}

// The row's addresses are computed before griddepcontrol.wait: they depend on the parameters only, and
// after the wait they sit on the critical path. The next kernel may launch once this one has passed
// its own wait (see host::pdl_early_trigger; docs/benchmarks/design.md).
// kTwoWidths: problem[1]'s rows are p.hidden1 wide (problem-major order only).
template <typename T, int kVec, int kRegVecs, bool kFusedAdd, RowFit kFit, typename Epi, RowOrder kOrder, bool kTwoWidths = false>
__global__ void __launch_bounds__(kNormWideThreads) norm_wide_kernel(const __grid_constant__ NormParams<T> p,
                                                                     const __grid_constant__ Epi epi) {
#ifdef __CUDACC__
  static_assert(!kTwoWidths || kOrder == RowOrder::kProblemMajor, "two widths: problem-major rows only");
  const RowPointers<T> row = locate_row<T, kOrder>(p, static_cast<int32_t>(blockIdx.x));
  const auto row_epi = epi.template row<T, kVec>(row, blockIdx.x);
  const int64_t hidden = kTwoWidths && static_cast<int32_t>(blockIdx.x) >= p.rows0 ? p.hidden1 : p.hidden;
  if (p.early_trigger) device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  if (!p.early_trigger) device::pdl_trigger_secondary();
  device::norm::rmsnorm_row<T, kVec, kRegVecs, kFusedAdd, kFit>(row_epi, row.in, row.residual, row.weight, hidden, p.eps,
                                                                     device::norm::CtaGroup<true>{});
#endif
}

// One token row of kHidden elements per CTA (norm_wide_kernel's layout for that width: kNormWideRegVecs
// vectors a thread, whole warps), the width and the CTA's size compile-time constants; rows `row_stride`
// elements apart.
template <typename T>
struct StaticRows {
  T* out;
  const T* in;
  const T* weight;
  int64_t out_stride, in_stride;
  float eps;
  bool early_trigger;  // trigger the next launch at start, else after the last store
};
template <typename T, int kHidden, int kRegVecs>
inline constexpr int kNormStaticThreads = (kHidden / kVec16<T> / kRegVecs + kWarpThreads - 1) / kWarpThreads * kWarpThreads;

template <typename T, int kHidden, int kRegVecs = norm_reg_vecs(kHidden / kVec16<T>)>
__global__ void __launch_bounds__(kNormStaticThreads<T, kHidden, kRegVecs>) norm_static_kernel(const __grid_constant__ StaticRows<T> p) {
#ifdef __CUDACC__
  constexpr int kVec = kVec16<T>, kThreads = kNormStaticThreads<T, kHidden, kRegVecs>;
  constexpr RowFit kFit = kHidden / kVec == kRegVecs * kThreads ? RowFit::kExact : RowFit::kFits;
  const int64_t row = blockIdx.x;
  const typename StoreOutput<T>::template Row<T, kVec> epi{p.out + row * p.out_stride};
  if (p.early_trigger) device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  rmsnorm_row<T, kVec, kRegVecs, false, kFit>(epi, p.in + row * p.in_stride, nullptr, p.weight, kHidden, p.eps,
                                              FixedCtaGroup<kThreads>{});
  if (!p.early_trigger) device::pdl_trigger_secondary();
#endif
}

// norm_static_kernel<T, kHidden, kNormHalfRegVecs>'s rows (kVirtual threads of two vectors, v and v + kVirtual, in
// warps of 32) folded onto half as many threads: a thread holds lanes i and i + 16 of a virtual warp (lane i of its
// half-warp, virtual warp 2 * warp + half), four vectors. The butterfly's step between lanes 16 apart is an add in
// registers (either order gives the same bits), its other steps shuffles within the half-warp, then
// add_warp_partials: that kernel's sums in its order, so its bits. The lanes of an idle half-warp (an odd number of
// virtual warps) read virtual warp 0's vectors and store nothing. The next launch is triggered after the last store.
template <typename T, int kHidden>
inline constexpr int kNormFoldedThreads = (kNormStaticThreads<T, kHidden, kNormHalfRegVecs> / kWarpThreads + 1) / 2 * kWarpThreads;
template <typename T, int kHidden>
__global__ void __launch_bounds__(kNormFoldedThreads<T, kHidden>) norm_folded_kernel(const __grid_constant__ StaticRows<T> p) {
#ifdef __CUDACC__
  constexpr int kVec = kVec16<T>, kVirtual = kNormStaticThreads<T, kHidden, kNormHalfRegVecs>, kVirtualWarps = kVirtual / kWarpThreads;
  static_assert(kHidden / kVec == kNormHalfRegVecs * kVirtual, "rows held exactly at two vectors a virtual thread");
  using Vec = AlignedVector<T, kVec>;
  using M = VecMath<T, kVec>;
  const int lane = static_cast<int>(threadIdx.x % kWarpThreads), i = lane % 16;
  const int warp = static_cast<int>(threadIdx.x / kWarpThreads) * 2 + lane / 16;  // the virtual warp
  const bool held = warp < kVirtualWarps;
  const int v0 = (held ? warp : 0) * kWarpThreads + i;  // virtual lanes v0 and v0 + 16
  const T* in = p.in + blockIdx.x * p.in_stride;
  T* out = p.out + blockIdx.x * p.out_stride;
  const auto at = [&](int h, int r) { return (v0 + 16 * h + r * kVirtual) * kVec; };  // vector r of virtual lane v0 + 16 h
  device::pdl_wait_primary();
  Vec xs[2][kNormHalfRegVecs], ws[2][kNormHalfRegVecs];  // every lane loads (no branch around the loads)
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int r = 0; r < kNormHalfRegVecs; ++r) xs[h][r].load_global(in + at(h, r)), ws[h][r].load_global(p.weight + at(h, r));
  float sums[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    sums[h] = 0.0f;  // rmsnorm_row's sum of a thread's vectors
#pragma unroll
    for (int r = 0; r < kNormHalfRegVecs; ++r) sums[h] += M::sum_squares(xs[h][r]);
  }
  float v = sums[0] + sums[1];
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  __shared__ float partial[kVirtualWarps];
  if (held && i == 0) partial[warp] = v;
  __syncthreads();
  const float scale = rsqrtf(add_warp_partials<kVirtualWarps>(partial) * (1.0f / static_cast<float>(kHidden)) + p.eps);
  if (held) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int r = 0; r < kNormHalfRegVecs; ++r) M::normalized(xs[h][r], ws[h][r], scale).store_global(out + at(h, r));
  }
  device::pdl_trigger_secondary();
#endif
}

}  // namespace device::norm

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
namespace host::norm {
using namespace device::norm;

// A row's elements, offsets within a row held in 32 bits by the row kernels (norms, per-token quantization).
inline void check_row_width(int64_t width) {
  host::RuntimeCheck(width <= kNormMaxRowsPerLaunch, "rows wider than ", kNormMaxRowsPerLaunch, " elements are not supported, got ", width);
}

// The plain norms' epilogue gets every launch variant. Other epilogues (quantization, whose rows are model
// widths) get fewer kernels, so that their modules compile sooner (a module compiles in about the time
// its kernels take): narrow rows one row per group at any count.
template <typename T, typename Epi>
inline constexpr bool kEveryNormVariant = std::is_same_v<Epi, device::norm::StoreOutput<T>>;

// Both problems' rows written in place (out == in, the same strides), `width` elements wide: what
// norm_inplace_rows_kernel<..., kFullRows = true> takes.
template <typename T>
bool in_place_full_rows(const NormParams<T>& p, int64_t width) {
  for (const RowProblem<T>& q : p.problem)
    if (q.heads > 0 && (q.out != q.in || q.out_token != q.in_token || q.out_head != q.in_head)) return false;
  return p.hidden == width;
}

template <typename T, int kVec, int kWidth, bool kFusedAdd, typename Epi>
void launch_norm_narrow(NormParams<T> p, const Epi& epi, DLDevice device, int sm_count) {
  constexpr int kGroups = kNormNarrowThreads / kWidth;
  // Many rows: rows_per_group rows per group (more bytes in flight per thread), taken in memory order.
  if (kEveryNormVariant<T, Epi> && host::div_ceil(int64_t{p.total_rows}, kGroups) >= int64_t{kNormNarrowRowsPerGroupThreshold} * sm_count) {
    constexpr int kRows = host::kRowKernels.rows_per_group;
    const int64_t grid = host::div_ceil(int64_t{p.total_rows}, kGroups * kRows);
    p.early_trigger = host::pdl_early_trigger(grid);
    host::LaunchKernel launch(static_cast<unsigned>(grid), kNormNarrowThreads, device);
    launch.enable_pdl();
    if constexpr (kEveryNormVariant<T, Epi> && !kFusedAdd) {
      if (!p.early_trigger && in_place_full_rows(p, kVec * kWidth)) return launch(norm_inplace_rows_kernel<T, kVec, kWidth, kRows, true>, p);
    }
    if constexpr (kEveryNormVariant<T, Epi>) launch(norm_narrow_kernel<T, kVec, kWidth, kRows, kFusedAdd, Epi, RowOrder::kTokenMajor>, p, epi);
  } else {
    int64_t grid = host::div_ceil(int64_t{p.total_rows}, kGroups);
    int threads = kNormNarrowThreads;
    if (grid >= kNormNarrowSmallMinCtas && grid <= kNormNarrowSmallMaxCtas)
      threads = kNormNarrowSmallThreads, grid = host::div_ceil(int64_t{p.total_rows}, kNormNarrowSmallThreads / kWidth);
    p.early_trigger = host::pdl_early_trigger(grid);
    host::LaunchKernel(static_cast<unsigned>(grid), threads, device)
        .enable_pdl()(norm_narrow_kernel<T, kVec, kWidth, 1, kFusedAdd, Epi, RowOrder::kProblemMajor>, p, epi);
  }
}

// token_rows: one problem, one row per token. That kernel needs fewer registers (five CTAs per SM
// instead of four for bf16 [*, 4096]): faster with many rows, slower on small grids for a reason not
// understood, so it is used for many rows only (docs/benchmarks/design.md).
// kFit: what the caller knows of how the row fits the threads' registers: kWider (nothing), kExact, or kFits (it
// fits: held exactly, RowFit::kExact, when its vectors divide evenly among whole warps).
// kManyTokenRows: the caller has found token rows, and many of them (the kTokenRows kernel alone is built).
template <typename T, int kVec, int kRegVecs, bool kFusedAdd, RowFit kFit, typename Epi, bool kManyTokenRows = false>
void launch_norm_wide(NormParams<T> p, const Epi& epi, DLDevice device, int row_threads, int sm_count, bool token_rows) {
  const int threads = wide_threads(p.hidden / kVec, kRegVecs, row_threads);
  p.early_trigger = !kFusedAdd && std::is_same_v<Epi, device::norm::StoreOutput<T>> && p.total_rows <= kNormWideEarlyTriggerMaxCtas;
  host::LaunchKernel launch(static_cast<unsigned>(p.total_rows), threads, device);
  launch.enable_pdl();
  const auto with_fit = [&](auto fit) {
    constexpr RowFit kHeld = decltype(fit)::value;
    if constexpr (kManyTokenRows) {
      launch(norm_wide_kernel<T, kVec, kRegVecs, kFusedAdd, kHeld, Epi, RowOrder::kTokenRows>, p, epi);
    } else if (token_rows && p.total_rows >= kNormManyRowsPerSm * sm_count) {
      launch(norm_wide_kernel<T, kVec, kRegVecs, kFusedAdd, kHeld, Epi, RowOrder::kTokenRows>, p, epi);
    } else {
      launch(norm_wide_kernel<T, kVec, kRegVecs, kFusedAdd, kHeld, Epi, RowOrder::kProblemMajor>, p, epi);
    }
  };
  if constexpr (kFit != RowFit::kFits) {
    with_fit(std::integral_constant<RowFit, kFit>{});
  } else if (host::norm::row_fit(p.hidden / kVec, kRegVecs, threads) == RowFit::kExact) {
    with_fit(std::integral_constant<RowFit, RowFit::kExact>{});
  } else {
    with_fit(std::integral_constant<RowFit, RowFit::kFits>{});
  }
}

// Epilogues whose rows must be read in 16-byte vectors declare kVectorsOnly = true; their callers check
// norm_vector_width first (launch_norm builds no element-by-element kernels for them).
template <typename Epi>
inline constexpr bool kVectorsOnly = requires { requires Epi::kVectorsOnly; };

// Epilogues that reduce across lanes at each vector's store declare kOneVectorPerThread = true: a thread's
// vectors would take their reductions in turn, so wide rows that fit one vector a thread take it (more
// warps a row), and wider ones the registers' share with the remainder re-read.
template <typename Epi>
inline constexpr bool kOneVectorPerThread = requires { requires Epi::kOneVectorPerThread; };

// Epilogues whose rows are never narrower than some width declare kMinRowElements (default 1): the narrow
// lane groups such rows can never take are not built.
template <typename Epi>
inline constexpr int64_t kMinRowElements = 1;
template <typename Epi>
  requires requires { Epi::kMinRowElements; }
inline constexpr int64_t kMinRowElements<Epi> = Epi::kMinRowElements;

template <typename T, int kVec, bool kFusedAdd, typename Epi>
void launch_norm_vec(const NormParams<T>& p, const Epi& epi, DLDevice device, bool token_rows) {
  using namespace host;
  const int sm_count = runtime::get_sm_count(device.device_id);
  const int row_threads = row_policy(device).row_threads;
  const int64_t nvec = p.hidden / kVec;
  if constexpr (kVec == 1) {  // unaligned rows are rare: one instantiation per path
    if (nvec <= 32) {
      if constexpr (host::in_device_part(kNormNarrowPart)) launch_norm_narrow<T, 1, 32, kFusedAdd>(p, epi, device, sm_count);
      return;
    }
    if constexpr (host::in_device_part(kNormWidePart))
      launch_norm_wide<T, 1, 2, kFusedAdd, RowFit::kWider>(p, epi, device, row_threads, sm_count, token_rows);
  } else if (nvec <= 32) {  // (if constexpr, so that nvcc's device pass builds no kernel the host code never launches)
    if constexpr (host::in_device_part(kNormNarrowPart)) {
      // The narrowest power-of-two group that gives every lane one vector (at least 4 lanes).
      const int64_t width = host::max<int64_t>(4, std::bit_ceil(static_cast<uint64_t>(nvec)));
      // Rows of at least kMinRowElements<Epi> never take a group narrower than kMinWidth: none is built.
      constexpr uint64_t kMinWidth = std::bit_ceil(static_cast<uint64_t>(host::max<int64_t>(1, kMinRowElements<Epi> / kVec)));
      if constexpr (kMinWidth <= 4) if (width == 4) return launch_norm_narrow<T, kVec, 4, kFusedAdd>(p, epi, device, sm_count);
      if constexpr (kMinWidth <= 8) if (width == 8) return launch_norm_narrow<T, kVec, 8, kFusedAdd>(p, epi, device, sm_count);
      if constexpr (kMinWidth <= 16) if (width == 16) return launch_norm_narrow<T, kVec, 16, kFusedAdd>(p, epi, device, sm_count);
      launch_norm_narrow<T, kVec, 32, kFusedAdd>(p, epi, device, sm_count);
    }
  } else if constexpr (host::in_device_part(kNormWidePart)) {
    constexpr int kRegVecs = kFusedAdd ? kNormFusedRegVecs : kNormWideRegVecs;
    if constexpr (kOneVectorPerThread<Epi>) {
      if (nvec <= row_threads) return launch_norm_wide<T, kVec, 1, kFusedAdd, RowFit::kFits>(p, epi, device, row_threads, sm_count, token_rows);
      return launch_norm_wide<T, kVec, kRegVecs, kFusedAdd, RowFit::kWider>(p, epi, device, row_threads, sm_count, token_rows);
    } else if (kFusedAdd && token_rows && nvec <= row_threads && p.total_rows >= kNormManyRowsPerSm * sm_count) {
      // With many rows fused_add_rmsnorm streams best at one vector per thread (measured).
      if constexpr (kFusedAdd) launch_norm_wide<T, kVec, 1, kFusedAdd, RowFit::kFits, Epi, true>(p, epi, device, row_threads, sm_count, token_rows);
    } else if (!kFusedAdd && norm_reg_vecs(nvec) == kNormHalfRegVecs && nvec <= kNormHalfRegVecs * row_threads) {
      if constexpr (!kFusedAdd) launch_norm_wide<T, kVec, kNormHalfRegVecs, false, RowFit::kExact>(p, epi, device, row_threads, sm_count, token_rows);
    } else if (nvec <= kRegVecs * row_threads) {
      launch_norm_wide<T, kVec, kRegVecs, kFusedAdd, RowFit::kFits>(p, epi, device, row_threads, sm_count, token_rows);
    } else {
      launch_norm_wide<T, kVec, kRegVecs, kFusedAdd, RowFit::kWider>(p, epi, device, row_threads, sm_count, token_rows);
    }
  }
}

// The elements per access of launch_norm's kernels: device::kVec16<T> where every operand's base and
// row strides allow it, else 1.
template <typename T, typename Epi>
int norm_vector_width(const NormParams<T>& p, int num_problems, const Epi& epi) {
  int vec = device::kVec16<T>;
  for (int k = 0; k < num_problems; ++k) {
    const RowProblem<T>& q = p.problem[k];
    vec = host::min(vec, host::vector_width(device::kVec16<T>, p.hidden, host::VecOperands{q.out, q.in, q.residual, q.weight},
                                            host::RowStrides{q.out_token, q.out_head, q.in_token, q.in_head, q.res_token, q.res_head}));
  }
  return epi.allows_vector(vec) ? vec : 1;
}

// Normalises `tokens` tokens of one or two problems (problem[1] is ignored when num_problems is 1),
// in launches of at most kNormMaxRowsPerLaunch rows, handing each row to the epilogue `epi`
// (device::norm::StoreOutput: the problem's `out`).
template <typename T, bool kFusedAdd, typename Epi = device::norm::StoreOutput<T>>
void launch_norm(NormParams<T> p, int num_problems, int64_t tokens, DLDevice device, const Epi& epi = {}) {
  if (num_problems == 1) p.problem[1] = p.problem[0], p.problem[1].heads = 0;
  const int64_t heads0 = p.problem[0].heads, heads = heads0 + p.problem[1].heads;
  if (tokens == 0 || heads == 0 || p.hidden == 0) return;
  check_row_width(p.hidden);
  const int vec = norm_vector_width(p, num_problems, epi);
  host::RuntimeCheck(!kVectorsOnly<Epi> || vec == device::kVec16<T>, "this epilogue needs 16-byte aligned rows");
  const bool token_rows = num_problems == 1 && heads0 == 1;
  const int64_t chunk = host::max<int64_t>(1, kNormMaxRowsPerLaunch / heads);
  for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
    const int64_t n = host::min(chunk, tokens - t0);
    NormParams<T> c = p;
    for (RowProblem<T>& q : c.problem) {
      q.out += t0 * q.out_token;
      q.in += t0 * q.in_token;
      if (q.residual != nullptr) q.residual += t0 * q.res_token;
    }
    c.rows0 = static_cast<int32_t>(n * heads0);
    c.heads_per_token = static_cast<int32_t>(heads);
    c.total_rows = static_cast<int32_t>(n * heads);
    if (vec == device::kVec16<T>) {
      launch_norm_vec<T, device::kVec16<T>, kFusedAdd>(c, epi.shifted(t0), device, token_rows);
    } else if constexpr (!kVectorsOnly<Epi>) {
      launch_norm_vec<T, 1, kFusedAdd>(c, epi.shifted(t0), device, token_rows);
    }
  }
}

inline float checked_eps(double eps) {
  host::RuntimeCheck(std::isfinite(eps) && eps >= 0.0, "eps must be a finite non-negative number, got ", eps);
  return static_cast<float>(eps);
}

// The row problem of rmsnorm-like ops (one row of `hidden` elements per token), with its arguments
// verified: input [N, H] and, where given, output (named output_name) and residual [N, H] (strided rows), weight [H].
template <typename T>
struct TokenRows {
  NormParams<T> params{};
  int64_t tokens = 0;
  DLDevice device{};

  TokenRows(jitkern::TensorView input, jitkern::TensorView weight, const jitkern::TensorView* output,
            const jitkern::TensorView* residual, double eps, const char* output_name = "output") {
    using namespace host;
    auto N = SymbolicSize{"num_tokens"};
    auto H = SymbolicSize{"hidden_size"};
    auto in_stride = SymbolicSize{"input_row_stride"};
    auto out_stride = SymbolicSize{"output_row_stride"};
    auto res_stride = SymbolicSize{"residual_row_stride"};
    auto dev = SymbolicDevice{};
    TensorMatcher({N, H}).with_strides({in_stride, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, dev).verify(input, "input");
    if (output != nullptr)
      TensorMatcher({N, H}).with_strides({out_stride, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, dev).verify(*output, output_name);
    if (residual != nullptr)
      TensorMatcher({N, H}).with_strides({res_stride, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, dev).verify(*residual, "residual");
    TensorMatcher({H}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, dev).verify(weight, "weight");
    if (output != nullptr) check_rows(N, H, out_stride, output_name);
    if (residual != nullptr) check_rows(N, H, res_stride, "residual");
    params.hidden = H.unwrap();
    params.eps = checked_eps(eps);
    auto* in = static_cast<T*>(input.data_ptr());
    T* out = residual != nullptr ? in : output != nullptr ? static_cast<T*>(output->data_ptr()) : nullptr;
    const int64_t out_rows = residual != nullptr ? stride_of(in_stride) : output != nullptr ? stride_of(out_stride) : 0;
    params.problem[0] = {out, in, residual != nullptr ? static_cast<T*>(residual->data_ptr()) : nullptr,
                         static_cast<const T*>(weight.data_ptr()), out_rows, 0, stride_of(in_stride), 0,
                         residual != nullptr ? stride_of(res_stride) : 0, 0, 1};
    tokens = N.unwrap();
    device = dev.unwrap();
  }

  // input is only read unless the launch writes the result into it (fused_add_rmsnorm): only then may its rows
  // not overlap (a broadcast input is read as it is).
  void check_input_written() const { host::check_rows_disjoint(tokens, params.hidden, params.problem[0].in_token, "input"); }

  // A size-1 dimension leaves its stride symbol unresolved when nothing else fixes it.
  static int64_t stride_of(const host::SymbolicSize& s) { return s.has_value() ? s.unwrap() : 0; }

  static void check_rows(int64_t rows, int64_t width, const host::SymbolicSize& stride, const char* name) {
    if (rows > 1) host::check_rows_disjoint(rows, width, stride.unwrap(), name);
  }
  static void check_rows(const host::SymbolicSize& rows, const host::SymbolicSize& width, const host::SymbolicSize& stride,
                         const char* name) {
    check_rows(rows.unwrap(), width.unwrap(), stride, name);
  }
};

// Plain rmsnorm of `rows` through norm_static_kernel where it applies (16-bit rows of a width in
// kNormStaticWidths, 16-byte vectors, fewer than kNormManyRowsPerSm rows per SM, or any number of rows held at
// kNormHalfRegVecs a thread: there the general kernel's registers left 5 CTAs of 224 threads an SM, rmsnorm /
// gemma_rmsnorm [4096, 3584] 16.11 / 16.68 us against the width kernel's 15.50 / 15.77, docs/benchmarks/norm.md), from
// kNormManyRowsPerSm rows per SM through norm_folded_kernel where norm_folds; false (nothing launched) elsewhere.
template <typename T>
bool launch_norm_static(const TokenRows<T>& rows) {
  if constexpr (sizeof(T) != 2) {
    return false;
  } else {
    constexpr int kVec = device::kVec16<T>;
    const NormParams<T>& p = rows.params;
    const RowProblem<T>& q = p.problem[0];
    // More than kNormMaxRowsPerLaunch rows go to launch_norm, which splits them into launches of that many.
    if (rows.tokens == 0 || rows.tokens > kNormMaxRowsPerLaunch ||
        host::vector_width(kVec, p.hidden, host::VecOperands{q.out, q.in, q.weight}, host::RowStrides{q.out_token, q.in_token}) != kVec)
      return false;
    const bool many = rows.tokens >= int64_t{kNormManyRowsPerSm} * host::runtime::get_sm_count(rows.device.device_id);
    if (norm_reg_vecs(p.hidden / kVec) != kNormHalfRegVecs && many) return false;
    const StaticRows<T> s{q.out, q.in, q.weight, q.out_token, q.in_token, p.eps, rows.tokens <= kNormStaticEarlyTriggerMaxRows};
    bool launched = false;
    const auto launch = [&]<std::size_t... kI>(std::index_sequence<kI...>) {
      const auto one = [&](auto width) {
        constexpr int kWidth = decltype(width)::value;
        const auto go = [&](auto kernel, int threads) {
          host::LaunchKernel(static_cast<unsigned>(rows.tokens), threads, rows.device).enable_pdl()(kernel, s);
        };
        launched = true;
        if constexpr (norm_folds(kWidth / kVec)) {
          if (many) return go(norm_folded_kernel<T, kWidth>, kNormFoldedThreads<T, kWidth>);
        }
        go(norm_static_kernel<T, kWidth>, kNormStaticThreads<T, kWidth, norm_reg_vecs(kWidth / kVec)>);
      };
      ((p.hidden == kNormStaticWidths[kI] ? one(std::integral_constant<int, kNormStaticWidths[kI]>{}) : void()), ...);
    };
    launch(std::make_index_sequence<sizeof(kNormStaticWidths) / sizeof(kNormStaticWidths[0])>{});
    return launched;
  }
}

// The launch rule of the out-of-place norms of token rows (rmsnorm and its variants): the kernel built for the
// width where launch_norm_static takes the rows, else launch_norm's.
template <typename T>
void launch_token_norm(const TokenRows<T>& rows) {
  if constexpr (host::in_device_part(kNormStaticPart)) {
    if (launch_norm_static(rows)) return;
  }
  launch_norm<T, false>(rows.params, 1, rows.tokens, rows.device);
}

}  // namespace host::norm
#endif  // __CUDACC_RTC__
