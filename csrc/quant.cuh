// The 8-bit quantization family: per-tensor fp8 (static or dynamic scale), per-token fp8, per-token-group
// fp8/int8 with the scale layouts FP8 GEMMs read, and RMSNorm (optionally after a residual add) written
// straight to fp8 through the norm kernels' quantizing epilogue (<jitkern/impl/norm_launch.cuh>). Inputs fp16/bf16/fp32 [N, H] with
// strided rows; outputs are written as bytes (fp8 tensors travel as uint8: DLPack has no fp8 type in
// every torch/tvm-ffi pair). Rules of rounding, saturation, NaN and scales: include/jitkern/impl/quant.cuh.
#pragma once

#include <jitkern/cta.cuh>
#include <jitkern/impl/norm_launch.cuh>
#include <jitkern/impl/quant.cuh>
#include <jitkern/impl/rows.cuh>
#include <jitkern/policy.cuh>
#include <jitkern/ptx.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/tensor_alloc.h>
#include <jitkern/type.cuh>
#include <jitkern/utils.cuh>

#include <cstdint>
#include <utility>

namespace jitkern_quant {

using device::AlignedVector;
#ifndef __CUDACC_RTC__
using host::norm::TokenRows;  // the norm kernels' row operands and launch widths
using host::norm::wide_threads;
#endif
namespace quant = device::quant;

constexpr int kQuantThreads = host::kRowKernels.stream_threads;
// Elementwise kernels: vectors per thread, loaded together (more bytes in flight).
constexpr int kQuantItems = 2;
// Dynamic per-tensor at decode sizes, without the memset and atomic max of the large path: a tensor of
// at most kQuantOneCtaVecs vectors takes one CTA holding it in registers; one of at most a CTA per SM
// in the split shapes below takes two launches, an amax per CTA into a scratch array, then a quantize
// kernel that loads its input before its PDL wait (overlapping the first launch) and reduces the array
// in every warp. Measured at [T, 4096] bf16, graphs of 2000 launches (docs/benchmarks/design.md): T = 4 1.84 us on one CTA against 2.08-2.44 split; T = 8-64 2.28-2.43 split against
// 2.70-4.79 on one cluster of 8 or 16 CTAs agreeing through distributed shared memory.
constexpr int kQuantOneCtaThreads = host::kRowKernels.max_cta_threads;
constexpr int kQuantOneCtaRegVecs = host::kRowKernels.tensor_quant_reg_vecs;
constexpr int kQuantOneCtaVecs = kQuantOneCtaThreads * kQuantOneCtaRegVecs;
// Split shapes: CTAs of kQuantSplitThreads holding one vector each while that needs at most a CTA per
// SM, then kQuantSplitWideThreads holding kQuantSplitWideVecs (T = 128: 2.82 us against 3.04 at 256 x 1)
// up to as many CTAs per SM as it holds (T = 512 / 1024: 5.4 / 7.3 us against 7.3 / 8.7 at one CTA per
// SM); larger tensors take the memset, atomic-max and quantize launches.
constexpr int kQuantSplitThreads = 256;
constexpr int kQuantSplitWideThreads = 512;
constexpr int kQuantSplitWideVecs = 2;
// Per-group kernels: CTAs of kQuantGroupThreads threads, one group per kLanes lanes, two vectors per
// lane (fewer shuffles and reciprocals per element than one; measured 98.6% against 76% of the pattern
// ceiling for 512-thread CTAs of one vector per lane).
constexpr int kQuantGroupThreads = host::kRowKernels.group_threads;
// ... and twice as wide where the grid is one wave of more than 256 threads per SM (host::pdl_late_trigger's
// grids): half the CTAs to schedule ([256, 7168] bf16 on an H200, bench_schedules: 2.11 us against 2.53).
constexpr int kQuantGroupWideThreads = 2 * kQuantGroupThreads;
// per_group_lean_kernel's lanes: kQuantGroupLeanLaneVecs contiguous 16-byte vectors each (bf16 [T, 7168] on an
// H200, bench_schedules quant: strided lanes the same; four a lane 0.04 us ahead at 256 tokens, 0.55 behind at 1024).
constexpr int kQuantGroupLeanLaneVecs = 2;
// rounding="sglang" (a multiply a value: the memory latency leads): grids between a few CTAs and this many threads an
// SM take CTAs of kQuantGroupThreads triggering after the wait ([T, 7168] bf16, H200, bench_schedules quant_sglang:
// T = 16-256, 54-869 threads an SM, 0.84 / 1.00 / 1.21 / 1.62 us against 0.87 / 1.16 / 1.33 / 1.66 for the exact
// rounding's rule there; at 1738, T = 512, 2.56 against 2.29 in wide CTAs triggering after their stores). Above, CTAs
// of kQuantGroupWideThreads trigger after their loads (bench_schedules quant_sglang_wave, H200, us, against after their
// stores: T = 512 / 1024 / 4096 2.05 / 3.27 / 21.80 against 2.28 / 3.33 / 21.83; [1024, 4096] 2.23 / 2.43, [4096,
// 2048] 3.59 / 3.69, [4096, 4096] 11.72 / 11.72; CTAs of 512 or 1024 2.14-2.15 at T = 512).
constexpr int64_t kQuantGroupSglangWaitThreadsPerSm = 1024;
// Per-token rows: one CTA per row, two vectors per thread held in registers; from kQuantManyRowsPerSm rows
// an SM on, four (half the threads a row: [4096, 4096] bf16 on an H200, bench_schedules.py, 11.84 us against
// 12.65; a warp a row, 16 vectors a lane, 14.60; the reference's warp reading its row twice, 13.51).
constexpr int kQuantRowRegVecs = host::kRowKernels.token_quant_reg_vecs;
constexpr int kQuantManyRowsRegVecs = 2 * kQuantRowRegVecs;
constexpr int64_t kQuantManyRowsPerSm = 4;
constexpr int kQuantRowThreads = host::kRowKernels.max_cta_threads;  // the launch bound; at launch host::RowPolicy::row_threads

// An [N, H] operand with strided rows, seen as vectors of kVec elements: vector v of row r is at
// base + r * row_stride + v * kVec. Contiguous inputs are passed as one row (no division per vector).
template <typename T>
struct Rows {
  T* base;
  int64_t row_stride;
};

struct Shape2D {
  int64_t row_vecs;    // vectors per row
  int64_t total_vecs;  // rows * row_vecs
};

template <bool kOneRow>
__device__ __forceinline__ void split(int64_t v, const Shape2D& shape, int64_t& row, int64_t& col) {
  row = kOneRow ? 0 : v / shape.row_vecs;
  col = v - row * shape.row_vecs;
}

// q = x / *scale for every element (static per-tensor; the second pass of dynamic per-tensor), kItems
// vectors per thread in CTAs of kThreads; kEarly: the next launch may start at once, else after the wait.
// kLastFirst: CTAs take the tensor from its end, which the amax pass read last and L2 may still hold.
template <typename T, typename Q, int kVec, bool kOneRow, bool kLastFirst, int kThreads = kQuantThreads, int kItems = kQuantItems,
          bool kEarly = true>
__global__ void __launch_bounds__(kThreads)
    quantize_tensor_kernel(Rows<const T> in, Rows<uint8_t> q, Shape2D shape, const float* scale) {
#ifdef __CUDACC__
  if constexpr (kEarly) device::pdl_trigger_secondary();
  const unsigned block = kLastFirst ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int64_t first = int64_t{block} * kThreads * kItems + threadIdx.x;
  int64_t rows[kItems], cols[kItems];
#pragma unroll
  for (int k = 0; k < kItems; ++k) split<kOneRow>(first + k * kThreads, shape, rows[k], cols[k]);
  device::pdl_wait_primary();
  if constexpr (!kEarly) device::pdl_trigger_secondary();
  AlignedVector<T, kVec> x[kItems];
#pragma unroll
  for (int k = 0; k < kItems; ++k)
    if (first + k * kThreads < shape.total_vecs) x[k].load(in.base + rows[k] * in.row_stride + cols[k] * kVec);
  const quant::Divider s(*scale);
#pragma unroll
  for (int k = 0; k < kItems; ++k)
    if (first + k * kThreads < shape.total_vecs) quant::store_quantized<Q>(q.base + rows[k] * q.row_stride + cols[k] * kVec, x[k], s);
#endif
}

// scale = max of scale_for<Q>(amax of each CTA's part): *scale must be 0 before the launch.
template <typename T, typename Q, int kVec, bool kOneRow>
__global__ void __launch_bounds__(kQuantThreads) tensor_scale_kernel(Rows<const T> in, Shape2D shape, float* scale, float eps) {
#ifdef __CUDACC__
  constexpr int kUnroll = 4;  // independent loads in flight per thread
  const int64_t step = int64_t{gridDim.x} * kQuantThreads;
  device::pdl_wait_primary();
  float amax = 0.0f;
  for (int64_t v0 = int64_t{blockIdx.x} * kQuantThreads + threadIdx.x; v0 < shape.total_vecs; v0 += kUnroll * step) {
    AlignedVector<T, kVec> x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = v0 + u * step;
      if (v < shape.total_vecs) {
        int64_t row, col;
        split<kOneRow>(v, shape, row, col);
        x[u].load(in.base + row * in.row_stride + col * kVec);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (v0 + u * step < shape.total_vecs) amax = quant::vector_amax(x[u], amax);
  }
  amax = device::cta::reduce_max_nonnegative_once(amax);
  device::pdl_trigger_secondary();
  // Positive floats order like their bits as ints.
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(scale), __float_as_int(quant::scale_for<Q>(amax, eps)));
#endif
}

// kVecs vectors of a Shape2D per thread, at first, first + step, ..., held in registers.
template <typename T, int kVec, int kVecs, bool kOneRow>
struct HeldVectors {
  AlignedVector<T, kVec> x[kVecs];
  int64_t rows[kVecs], cols[kVecs];
  int64_t first, step, total;
  __device__ __forceinline__ HeldVectors(int64_t first_, int64_t step_, const Shape2D& shape) : first(first_), step(step_), total(shape.total_vecs) {
#pragma unroll
    for (int k = 0; k < kVecs; ++k) split<kOneRow>(first + k * step, shape, rows[k], cols[k]);
  }
  __device__ __forceinline__ bool held(int k) const { return first + k * step < total; }
  __device__ __forceinline__ void load(const Rows<const T>& in) {
#pragma unroll
    for (int k = 0; k < kVecs; ++k)
      if (held(k)) x[k].load(in.base + rows[k] * in.row_stride + cols[k] * kVec);
  }
  // op(acc, v) over the held values from 0, vector by vector and combined (see dynamic_amax).
  template <typename Op>
  __device__ __forceinline__ float fold(const Op& op) const {
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < kVecs; ++k)
      if (held(k)) acc = op(acc, device::norm::VecMath<T, kVec>::fold(x[k], op, 0.0f));
    return acc;
  }
  // The finite amax over the whole CTA's held values (dynamic_amax; `finite`: none was +-inf).
  __device__ __forceinline__ float cta_amax(bool& finite) const {
    const device::norm::CtaGroup<true> cta;
    return quant::dynamic_amax([&](auto op) { return fold(op); }, [&](float a) { return cta.reduce_max(a); }, [](bool b) { return b; },
                               finite);
  }
  template <typename Q, bool kMaySlow>
  __device__ __forceinline__ void store(const Rows<uint8_t>& q, const quant::Divider& s) const {
#pragma unroll
    for (int k = 0; k < kVecs; ++k)
      if (held(k)) quant::store_quantized<Q, kMaySlow>(q.base + rows[k] * q.row_stride + cols[k] * kVec, x[k], s);
  }
};

// Dynamic per-tensor of at most kQuantOneCtaVecs vectors: one CTA.
template <typename T, typename Q, int kVec, bool kOneRow>
__global__ void __launch_bounds__(kQuantOneCtaThreads)
    tensor_quant_one_cta_kernel(Rows<const T> in, Rows<uint8_t> q, Shape2D shape, float* scale, float eps) {
#ifdef __CUDACC__
  HeldVectors<T, kVec, kQuantOneCtaRegVecs, kOneRow> v(threadIdx.x, blockDim.x, shape);
  device::pdl_wait_primary();
  v.load(in);
  bool finite;
  const float amax = v.cta_amax(finite);
  device::pdl_trigger_secondary();
  const quant::Divider s(quant::scale_for<Q>(amax, eps), finite);
  if (threadIdx.x == 0) *scale = s.s;
  v.template store<Q, false>(q, s);
#endif
}

// The split path's scratch entries: a CTA's finite amax a, stored as a, or as -1 - a where the CTA saw
// +-inf (its quotients then need Divider's inf guard); part_amax / part_finite read one back.
__device__ __forceinline__ float amax_part(float amax, bool finite) { return finite ? amax : -1.0f - amax; }
__device__ __forceinline__ float part_amax(float part) { return part >= 0.0f ? part : -1.0f - part; }
__device__ __forceinline__ bool part_finite(float part) { return part >= 0.0f; }

// Dynamic per-tensor, split, first launch: parts[CTA] = amax_part of the CTA's vectors (HeldVectors
// layout over the grid). It lets the quantize kernel launch only after its own wait: that kernel reads
// the input before waiting, which is safe once this kernel's predecessor has finished.
template <typename T, int kVec, int kVecs, bool kOneRow>
__global__ void __launch_bounds__(kQuantSplitWideThreads) tensor_amax_parts_kernel(Rows<const T> in, Shape2D shape, float* parts) {
#ifdef __CUDACC__
  HeldVectors<T, kVec, kVecs, kOneRow> v(int64_t{blockIdx.x} * blockDim.x + threadIdx.x, int64_t{gridDim.x} * blockDim.x, shape);
  device::pdl_wait_primary();
  device::pdl_trigger_secondary();
  v.load(in);
  bool finite;
  const float amax = v.cta_amax(finite);
  if (threadIdx.x == 0) parts[blockIdx.x] = amax_part(amax, finite);
#endif
}

// Dynamic per-tensor, split, second launch (same grid and layout): loads its vectors, waits for
// tensor_amax_parts_kernel, reduces its gridDim.x parts in every warp (no barrier), quantizes.
template <typename T, typename Q, int kVec, int kVecs, bool kOneRow>
__global__ void __launch_bounds__(kQuantSplitWideThreads)
    quantize_tensor_parts_kernel(Rows<const T> in, Rows<uint8_t> q, Shape2D shape, const float* parts, float* scale, float eps) {
#ifdef __CUDACC__
  device::pdl_trigger_secondary();
  HeldVectors<T, kVec, kVecs, kOneRow> v(int64_t{blockIdx.x} * blockDim.x + threadIdx.x, int64_t{gridDim.x} * blockDim.x, shape);
  v.load(in);
  device::pdl_wait_primary();
  float amax = 0.0f;
  bool finite = true;
  for (unsigned i = threadIdx.x % device::kWarpThreads; i < gridDim.x; i += device::kWarpThreads) {
    const float part = parts[i];
    finite = finite && part_finite(part);
    amax = fmaxf(amax, part_amax(part));
  }
  amax = device::warp::reduce_max_nonnegative(amax);
  finite = __all_sync(0xffffffffu, finite);
  const quant::Divider s(quant::scale_for<Q>(amax, eps), finite);
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale = s.s;
  v.template store<Q, false>(q, s);
#endif
}

// One row per CTA: s = scale_for<Q>(amax of the row), q = x / s, scales[row] = s. kRegVecs vectors per
// thread stay in registers (kFit: device::norm::RowFit); a wider row's remainder is read again (from L2)
// for each pass.
template <typename T, typename Q, int kVec, device::norm::RowFit kFit, int kRegVecs>
__global__ void __launch_bounds__(kQuantRowThreads)
    per_token_kernel(Rows<const T> in, Rows<uint8_t> q, float* scales, int64_t hidden, float eps, bool trigger_at_start) {
#ifdef __CUDACC__
  constexpr bool kWider = kFit == device::norm::RowFit::kWider;
  if (trigger_at_start) device::pdl_trigger_secondary();
  const T* src = in.base + int64_t{blockIdx.x} * in.row_stride;
  uint8_t* dst = q.base + int64_t{blockIdx.x} * q.row_stride;
  const int nvec = static_cast<int>(hidden / kVec), rank = threadIdx.x, size = blockDim.x;
  const auto held = [&](int r) { return kFit == device::norm::RowFit::kExact || r * size + rank < nvec; };
  AlignedVector<T, kVec> x[kRegVecs];
  device::pdl_wait_primary();
  if (!trigger_at_start) device::pdl_trigger_secondary();
#pragma unroll
  for (int r = 0; r < kRegVecs; ++r)
    if (held(r)) x[r].load(src + (r * size + rank) * kVec);
  const auto fold = [&](auto op) {
    float acc = 0.0f;
#pragma unroll
    for (int r = 0; r < kRegVecs; ++r)
      if (held(r)) acc = op(acc, device::norm::VecMath<T, kVec>::fold(x[r], op, 0.0f));
    for (int i = kRegVecs * size + rank; kWider && i < nvec; i += size) {
      AlignedVector<T, kVec> y;
      y.load(src + i * kVec);
      acc = device::norm::VecMath<T, kVec>::fold(y, op, acc);
    }
    return acc;
  };
  const device::norm::CtaGroup<true> cta;
  bool finite;
  const float amax = quant::dynamic_amax(fold, [&](float v) { return cta.reduce_max(v); }, [](bool b) { return b; }, finite);
  const quant::Divider s(quant::scale_for<Q>(amax, eps), finite);
#pragma unroll
  for (int r = 0; r < kRegVecs; ++r)
    if (held(r)) quant::store_quantized<Q, false>(dst + (r * size + rank) * kVec, x[r], s);
  for (int i = kRegVecs * size + rank; kWider && i < nvec; i += size) {
    AlignedVector<T, kVec> y;
    y.load(src + i * kVec);
    quant::store_quantized<Q, false>(dst + i * kVec, y, s);
  }
  if (rank == 0) scales[blockIdx.x] = s.s;
#endif
}

using quant::GroupScales;

// One group of kLanes * kPerLane * kVec elements per kLanes consecutive lanes (kLanes a power of two
// <= 32; lane l holds vectors l, l + kLanes, ...). kFlat: input and output rows are contiguous, so group
// G starts at element G * group size (no division by the groups per row on the load path). The next
// launch is triggered at start, after the wait, or (trigger_at_end) after the group's stores. kRounding: quant::Rounding.
template <typename T, typename Q, int kVec, int kLanes, int kPerLane, bool kUE8M0, bool kFlat, quant::Rounding kRounding>
__global__ void __launch_bounds__(kQuantGroupWideThreads) per_group_kernel(Rows<const T> in, Rows<uint8_t> q, GroupScales scales,
                                                                        int64_t groups_per_row, int64_t total_groups, float eps,
                                                                        bool trigger_at_start, bool trigger_at_end) {
#ifdef __CUDACC__
  constexpr int kGroup = kLanes * kPerLane * kVec;
  if (trigger_at_start) device::pdl_trigger_secondary();
  const int lane = static_cast<int>(threadIdx.x % kLanes);
  const int64_t group = int64_t{blockIdx.x} * (blockDim.x / kLanes) + threadIdx.x / kLanes;
  const bool valid = group < total_groups;
  int64_t in_at = group * kGroup + lane * kVec, q_at = in_at;
  if constexpr (!kFlat) {
    const int64_t row = quant::group_row(group, groups_per_row, total_groups), g = group - row * groups_per_row;
    in_at = row * in.row_stride + g * kGroup + lane * kVec;
    q_at = row * q.row_stride + g * kGroup + lane * kVec;
  }
  AlignedVector<T, kVec> x[kPerLane];
  device::pdl_wait_primary();
  if (!trigger_at_start && !trigger_at_end) device::pdl_trigger_secondary();
#pragma unroll
  for (int j = 0; j < kPerLane; ++j)
    if (valid) x[j].load(in.base + in_at + j * kLanes * kVec);
  if constexpr (sizeof(T) == 2 && kVec % 2 == 0) {
    // As packed pairs (the same registers): the amax by packed max and min, half an instruction a value.
    AlignedVector<device::packed_t<T>, kVec / 2> pairs[kPerLane];
    __builtin_memcpy(pairs, x, sizeof(x));
    quant::quantize_group<Q, kLanes, kPerLane, kUE8M0, false, kRounding>(pairs, valid, q.base + q_at, eps, scales, group, groups_per_row,
                                                                         total_groups);
  } else {
    quant::quantize_group<Q, kLanes, kPerLane, kUE8M0, false, kRounding>(x, valid, q.base + q_at, eps, scales, group, groups_per_row,
                                                                         total_groups);
  }
  if (trigger_at_end) device::pdl_trigger_secondary();
#endif
}

// A lane's packed 16-bit pairs and their fp8 codes (two words a 16-byte vector), by value: the rare paths of
// per_group_lean_kernel below are calls, which keep their code out of the common path's straight line.
template <typename P, int kPerLane>
struct LanePairs {
  AlignedVector<P, 4> v[kPerLane];
};
template <int kPerLane>
struct LaneCodes {
  uint32_t w[2 * kPerLane];
};

// The lane's codes x / s with division `divide` (a Divider's fast_finite or fast).
template <typename P, int kPerLane, typename Divide>
JITKERN_DEVICE LaneCodes<kPerLane> lane_codes(const LanePairs<P, kPerLane>& x, const Divide& divide) {
  LaneCodes<kPerLane> c;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j)
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const auto pair = [&](int k) {
        const fp32x2_t v = device::cast<fp32x2_t>(x.v[j][k]);
        return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(divide(v.x), divide(v.y)), __NV_SATFINITE, __NV_E4M3));
      };
      c.w[2 * j + w] = pair(2 * w) | (pair(2 * w + 1) << 16);
    }
  return c;
}
#ifdef __CUDACC__  // (__noinline__ is nvcc's)
// Out of line: a group holding +-inf (Divider::fast, inf-safe), and its amax without +-inf.
template <typename P, int kPerLane>
__device__ __noinline__ LaneCodes<kPerLane> lane_codes_inf_safe(LanePairs<P, kPerLane> x, quant::Divider s) {
  return lane_codes(x, [&](float v) { return s.fast(v); });
}
template <typename P, int kPerLane>
__device__ __noinline__ float lane_finite_amax(LanePairs<P, kPerLane> x) {
  return quant::fold_pairs(x.v, quant::FiniteAbsMax{}, 0.0f);
}

// The dynamic amax of a group of kLanes lanes from each lane's pairs x (quant::dynamic_amax; `finite`: no +-inf).
template <int kLanes, typename P, int kPerLane>
__device__ __forceinline__ float lane_group_amax(const LanePairs<P, kPerLane>& x, bool& finite) {
  const auto fold = [&](auto op) {
    if constexpr (std::is_same_v<decltype(op), quant::AbsMax>) {
      return quant::fold_pairs(x.v, op, 0.0f);
    } else {
      return lane_finite_amax(x);
    }
  };
  return quant::dynamic_amax(fold, [](float v) { return device::warp::reduce_max_nonnegative<kLanes>(v); },
                             [](bool b) { return __any_sync(0xffffffffu, b); }, finite);
}

// rounding="sglang" (quant::sglang): the lane's codes c and its group's scale, the group's kLanes lanes' pairs x.
template <int kLanes, bool kUE8M0, typename P, int kPerLane>
__device__ __forceinline__ quant::sglang::GroupScale sglang_lane_codes(const LanePairs<P, kPerLane>& x, float eps, LaneCodes<kPerLane>& c) {
  const float amax = device::warp::reduce_max_nonnegative<kLanes>(quant::fold_pairs(x.v, quant::AbsMax{}, 0.0f));
  const quant::sglang::GroupScale g = quant::sglang::group_scale<fp8_e4m3_t, kUE8M0>(amax, eps);
#pragma unroll
  for (int j = 0; j < kPerLane; ++j)
#pragma unroll
    for (int w = 0; w < 2; ++w)
      c.w[2 * j + w] = quant::sglang::pair_codes<fp8_e4m3_t, kUE8M0>(x.v[j], 2 * w, g.k) |
                       (quant::sglang::pair_codes<fp8_e4m3_t, kUE8M0>(x.v[j], 2 * w + 1, g.k) << 16);
  return g;
}
#endif

// per_group_kernel's codes and scales for fp8 groups of contiguous 16-bit rows (eps >= kNormalScaleEps with the
// exact rounding), with what the host knows compiled in: 32-bit offsets (at most 2^32 elements), the trigger at
// start, after the wait, after the stores or after the loads (kTrigger 0 / 1 / 2 / 3), CTAs of kThreads, and the
// division chosen once a group (Divider::fast_finite for every value of a group without +-inf), so that the common
// path is straight-line code. kLanes lanes a group of kQuantGroupLeanLaneVecs contiguous 16-byte vectors each. The scale
// and its reciprocal by normal_scale_for and normal_reciprocal (the IEEE divisions' bits without their range
// tests). kRounding = kSglang: quant::sglang's scale and codes (one plain amax, no vote, eps anything).
template <typename T, int kLanes, bool kUE8M0, int kThreads, int kTrigger, quant::Rounding kRounding>
__global__ void __launch_bounds__(kThreads) per_group_lean_kernel(const T* in, uint8_t* q, GroupScales scales, uint32_t groups_per_row,
                                                                  uint32_t total_groups, float eps) {
#ifdef __CUDACC__
  static_assert(sizeof(T) == 2 && kThreads % kLanes == 0 && device::kWarpThreads % kLanes == 0);
  constexpr int kPerLane = kQuantGroupLeanLaneVecs, kVec = device::kVec16<T>, kGroup = kLanes * kPerLane * kVec;
  using P = device::packed_t<T>;
  if constexpr (kTrigger == 0) device::pdl_trigger_secondary();
  const uint32_t lane = threadIdx.x % kLanes, group = blockIdx.x * (kThreads / kLanes) + threadIdx.x / kLanes;
  const bool valid = group < total_groups;
  // Lanes past the last group read its vectors again and store nothing: no branch around the loads.
  const uint32_t at = min(group, total_groups - 1) * kGroup + lane * kPerLane * kVec;
  AlignedVector<T, kVec> raw[kPerLane];
  device::pdl_wait_primary();
  if constexpr (kTrigger == 1) device::pdl_trigger_secondary();
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) raw[j].load_global(in + at + j * kVec);
  if constexpr (kTrigger == 3) device::pdl_trigger_secondary();
  LanePairs<P, kPerLane> x;  // the same registers as packed pairs: the amax by packed max and min
  __builtin_memcpy(&x, raw, sizeof(x));
  LaneCodes<kPerLane> c;
  float scale;
  uint32_t exponent = 0;
  if constexpr (kRounding == quant::Rounding::kSglang) {
    const quant::sglang::GroupScale g = sglang_lane_codes<kLanes, kUE8M0>(x, eps, c);
    scale = g.scale, exponent = g.exponent;
  } else {
    bool finite;
    const float amax = lane_group_amax<kLanes>(x, finite);
    scale = quant::group_scale<fp8_e4m3_t, kUE8M0, true>(amax, eps, exponent);
    if constexpr (kUE8M0) {  // s a power of two: x * (1 / s) rounds the quotient itself, +-inf and NaN included
      const float inv = quant::normal_reciprocal(scale);
      c = lane_codes(x, [&](float v) { return v * inv; });
    } else {
      const quant::Divider s(scale, quant::normal_reciprocal(scale), finite);
      c = finite ? lane_codes(x, [&](float v) { return s.fast_finite(v); }) : lane_codes_inf_safe(x, s);
    }
  }
  if (valid) {
    static_assert(kPerLane == 2);  // the lane's 16 codes: one store
    AlignedVector<uint32_t, 4>{{c.w[0], c.w[1], c.w[2], c.w[3]}}.store_global(reinterpret_cast<uint32_t*>(q + at));
    if (lane == 0) scales.store<kUE8M0>(group, groups_per_row, total_groups, scale, exponent);
  }
  if constexpr (kTrigger == 2) device::pdl_trigger_secondary();
#endif
}

// How the norm + group ops take their rows (16-byte vectors, at most row_threads of them a row): through
// norm_group_rows_kernel, N vectors of one group a lane, so that a shuffle reduction and a scale serve N
// vectors. The product's: NormGroupSchedule; benchmarks/kernels/norm_group_schedules.cuh builds the ops under
// others, side by side and checked bit for bit against it (bench_quant.py `group`).
//   kLaneVecs, kFusedLaneVecs: N from kManyRowsPerSm rows an SM on (plain, fused add);
//   kFewLaneVecs, kFusedFewLaneVecs: N below it (0: the norm kernels' launch, one vector a thread);
//   kPairs: 16-bit rows widened and narrowed as packed pairs (PairMath);
//   kEarlyTriggerMaxRows, kFusedEarlyTriggerMaxRows: the next launch triggered at the kernel's start up to this
//     many rows, else after its wait;
//   kClusterMaxRows, kFusedClusterMaxRows: up to this many 16-bit rows of 513 to 1024 vectors (4096 to 8192 bf16)
//     are each split over a cluster of 8 CTAs of 128 threads (norm_group_cluster_kernel; 0: never);
//   kPinnedStores, kFusedPinnedStores: the rows and cluster kernels compute a row's code and scale addresses before
//     their wait (else the compiler puts them after the reduction, on the path to the stores);
//   kFewEarlyInvHidden: below kManyRowsPerSm rows an SM the rows kernel computes 1 / hidden before its wait (else
//     between the wait and the loads; from it on ptxas then issues the weights' loads after the sums of squares);
//   kManyBoundThreads, kManyMinBlocks, kManyBoundFrom: the plain op's many-row kernel (exact rounding, fp32 scales)
//     under __launch_bounds__(kManyBoundThreads, kManyMinBlocks) where its CTA is kManyBoundFrom to
//     kManyBoundThreads threads wide (224, 5: 56 registers, one CTA an SM more than at 64: 5 of 7168, 9 of 4096);
//   kFewRowsPerCta, kFewRowsFromThreads: the plain op's rows a CTA below kManyRowsPerSm rows an SM, where there are
//     more rows than SMs and the CTA is at least kFewRowsFromThreads threads wide;
// bf16, 1x128 groups, H200 (bench_quant.py `group schedules`, 56e1ccd, docs/benchmarks/quant.md): at [4096-32768,
// 7168 / 4096] pairs gave rmsnorm_group_quant_fp8 72.4-77.7% of its pattern ceiling against 70.7-74.9%, eight
// vectors a lane 50.9-53.4%, a persistent grid (next row copied ahead to shared memory) 58.6-72.9%; the fused add
// 93.6-98.4% of copy either way. Below 4 rows an SM, two vectors a lane (plain) and one (fused add) beat the norm
// kernels' launch: [1 / 256, 7168] 1.62 / 3.08 us against 1.83 / 3.50, fused add 1.88 / 3.61 against 2.14 / 4.01;
// two a lane triggering at start at 16 rows took 2.19 us (1.90 the norm kernels'), one a lane 2.11 (2.24). At
// 3e69915 (docs/benchmarks/quant.md): the fused add over a cluster at [1 / 16, 7168] 1.65 / 2.57 us against 1.88 /
// 2.16, [1, 4096] over 4 CTAs 1.58 against 1.54; the plain op 1.57 against 1.58 at [1, 7168]; split over CTAs that
// each add the whole row's sum of squares, 1.76 (CTAs of 128) and 1.57 (256) against 1.58. At 06e174b: the fused
// add over a cluster at [4, 7168] 1.69 us against 1.96; the plain op's one and four vectors a lane below 4 rows an
// SM 1.65 / 1.71 us at [1, 7168] against 1.58, 2.97 / 3.26 at 256 rows against 2.94. The addresses pinned (b3200c2):
// 1.47 / 1.51 / 2.91 us at [1 / 4 / 256, 7168] against 1.60 / 1.65 / 2.97, prefill 75.4 / 77.0 / 81.0% of the pattern
// ceiling against 70.5 / 73.5 / 77.3%. At dfc5a0b: the bounds 3.5-5.1% faster than without at [4096-32768, 4096-7168];
// 1 / hidden before the wait 0.01-0.09 us at decode sizes (at many rows ptxas then issued the weights' loads after the
// sums of squares: 72.3% of halve at [32768, 7168] in de1ee23's run against 78.1% here); two rows a CTA 2.82 / 3.94 us at
// [256 / 512, 7168] against 2.93 / 4.32, 2.61 / 2.49 / 2.30 at [256, 6144 / 5120 / 4096] against 2.48 / 2.34 / 2.15.
// The candidates that lost are in docs/benchmarks/quant.md.
struct NormGroupSchedule {
  static constexpr int kLaneVecs = 4, kFusedLaneVecs = 2, kFewLaneVecs = 2, kFusedFewLaneVecs = 1;
  static constexpr int64_t kManyRowsPerSm = device::norm::kNormManyRowsPerSm;
  static constexpr bool kPairs = true;
  static constexpr int64_t kEarlyTriggerMaxRows = 8, kFusedEarlyTriggerMaxRows = 16;
  static constexpr int64_t kClusterMaxRows = 0, kFusedClusterMaxRows = 4;
  static constexpr bool kPinnedStores = true, kFusedPinnedStores = true;
  static constexpr bool kFewEarlyInvHidden = true;
  static constexpr int kManyBoundThreads = 224, kManyMinBlocks = 5, kManyBoundFrom = 128;
  static constexpr int kFewRowsPerCta = 2, kFewRowsFromThreads = 385;
};

// The sum over 32 consecutive vectors of a row (one warp's, one vector a thread) of `part` (a lane's kPerLane per-vector sums in
// norm_group_rows_kernel's layout, groups of kGroupVecs vectors), added as the butterfly of one vector a
// thread adds it (lane offsets 16 to 1: across groups by shuffles, across a lane's vectors in registers,
// across a group's lanes by shuffles), so with its bits. Every lane of the warp calls it.
template <int kGroupVecs, int kPerLane>
JITKERN_DEVICE float one_vector_warp_sum(float (&part)[kPerLane]) {
  constexpr int kLanes = kGroupVecs / kPerLane;
#pragma unroll
  for (int offset = device::kWarpThreads / 2; offset >= 1; offset /= 2) {
    if (offset >= kGroupVecs) {
#pragma unroll
      for (int r = 0; r < kPerLane; ++r) part[r] += __shfl_xor_sync(0xffffffffu, part[r], offset / kGroupVecs * kLanes);
    } else if (offset >= kLanes) {
#pragma unroll
      for (int r = 0; r < kPerLane; ++r)
        if ((r & (offset / kLanes)) == 0) part[r] += part[r + offset / kLanes];
    } else {
      part[0] += __shfl_xor_sync(0xffffffffu, part[0], offset);
    }
  }
  return part[0];
}

// VecMath's arithmetic on 16-bit vectors held as packed pairs, in the same order (the same bits): a value
// widens in one instruction (VecMath's element casts take two for the high half of a pair) and a pair
// narrows in one.
template <typename T, int kVec>
struct PairMath {
  using P = device::packed_t<T>;
  using Pairs = AlignedVector<P, kVec / 2>;
  using Wide = float[kVec];
  static JITKERN_DEVICE Pairs of(const AlignedVector<T, kVec>& v) {
    Pairs p;
    __builtin_memcpy(&p, &v, sizeof(p));
    return p;
  }
  static JITKERN_DEVICE void widen(const AlignedVector<T, kVec>& v, Wide& out) {
    const Pairs p = of(v);
#pragma unroll
    for (int k = 0; k < kVec / 2; ++k) {
      const fp32x2_t f = device::cast<fp32x2_t>(p[k]);
      out[2 * k] = f.x, out[2 * k + 1] = f.y;
    }
  }
  static JITKERN_DEVICE void add(AlignedVector<T, kVec>& x, const AlignedVector<T, kVec>& r) {
    Pairs a = of(x);
    const Pairs b = of(r);
#pragma unroll
    for (int k = 0; k < kVec / 2; ++k) {
      const fp32x2_t u = device::cast<fp32x2_t>(a[k]), v = device::cast<fp32x2_t>(b[k]);
      a[k] = device::cast<P>(fp32x2_t{u.x + v.x, u.y + v.y});
    }
    __builtin_memcpy(&x, &a, sizeof(a));
  }
  static JITKERN_DEVICE float sum_squares(const Wide& x) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < kVec; ++j) s += x[j] * x[j];
    return s;
  }
  static JITKERN_DEVICE Pairs normalized(const Wide& x, const Wide& w, float scale) {
    Pairs y;
#pragma unroll
    for (int k = 0; k < kVec / 2; ++k) y[k] = device::cast<P>(fp32x2_t{x[2 * k] * scale * w[2 * k], x[2 * k + 1] * scale * w[2 * k + 1]});
    return y;
  }
};

// The scales of row `row` as a GroupScales whose row 0 it is (fp32 scales and UE8M0 words alike are 4 bytes).
JITKERN_DEVICE quant::GroupScales row_of_scales(const quant::GroupScales& scales, int64_t row) {
  quant::GroupScales at = scales;
  at.base = static_cast<uint32_t*>(at.base) + row * at.row_stride;
  return at;
}

// norm_group_rows_kernel's work on a row once a lane holds its vectors xs (rs: the residual's, kFusedAdd) and the
// weights', in two phases around the CTA's barrier. norm_group_row_sums: the residual added and stored, then the sums
// of squares of one vector a thread's warps into partial (kWarpThreads floats of shared memory).
template <typename T, int kVec, int kGroup, int kPerLane, bool kFusedAdd, bool kPairs>
JITKERN_DEVICE void norm_group_row_sums(AlignedVector<T, kVec> (&xs)[kPerLane], const AlignedVector<T, kVec> (&rs)[kFusedAdd ? kPerLane : 1],
                                        bool held, int first, T* residual, float* partial) {
  using namespace device::norm;
  using M = VecMath<T, kVec>;
  using PM = PairMath<T, kVec>;
  constexpr bool kAsPairs = kPairs && sizeof(T) == 2;
  constexpr int kGroupVecs = kGroup / kVec, kLanes = kGroupVecs / kPerLane;
  const auto at = [&](int r) { return (first + r * kLanes) * kVec; };
  float part[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    part[r] = 0.0f;
    if (held) {
      if constexpr (kAsPairs) {
        if constexpr (kFusedAdd) PM::add(xs[r], rs[r]), xs[r].store_global(residual + at(r));
        float x[kVec];
        PM::widen(xs[r], x);
        part[r] = PM::sum_squares(x);
      } else {
        if constexpr (kFusedAdd) M::add(xs[r], rs[r]), xs[r].store_global(residual + at(r));
        part[r] = M::sum_squares(xs[r]);
      }
    }
  }
  // The sums of 32 vectors each (one vector a thread's warps), then cta::reduce_sum_once's second round over them.
  const float warp_sum = one_vector_warp_sum<kGroupVecs, kPerLane>(part);
  constexpr int kOldWarpLanes = device::kWarpThreads / kPerLane;  // the lanes holding those 32 vectors
  if (threadIdx.x % kOldWarpLanes == 0) partial[threadIdx.x / kOldWarpLanes] = warp_sum;
}

// Once every thread has passed the barrier after norm_group_row_sums: the row's scale from partial, then the codes (q:
// the row's) and group scales (scales: at the row, row_of_scales).
template <typename T, int kVec, int kGroup, int kPerLane, bool kUE8M0, quant::Rounding kRounding, bool kPairs>
JITKERN_DEVICE void norm_group_row_codes(const AlignedVector<T, kVec> (&xs)[kPerLane], const AlignedVector<T, kVec> (&ws)[kPerLane], bool held,
                                         int first, int nvec, float inv_hidden, float eps, uint8_t* q, const quant::GroupScales& scales,
                                         const quant::QuantizeGroups<kGroup, kUE8M0, kRounding>& epi, const float* partial) {
  using namespace device::norm;
  using Vec = AlignedVector<T, kVec>;
  using M = VecMath<T, kVec>;
  using PM = PairMath<T, kVec>;
  constexpr bool kAsPairs = kPairs && sizeof(T) == 2;
  constexpr int kGroupVecs = kGroup / kVec, kLanes = kGroupVecs / kPerLane;
  const int g = first / kGroupVecs;
  const int lane = static_cast<int>(threadIdx.x % device::kWarpThreads);
  const float total = device::warp::reduce_sum(lane < (nvec + device::kWarpThreads - 1) / device::kWarpThreads ? partial[lane] : 0.0f);
  const float scale = rsqrtf(total * inv_hidden + eps);
  const auto store_scale = [&](float s, uint32_t e) { scales.template store_at<kUE8M0>(0, g, epi.groups_per_row, s, e); };
  if constexpr (sizeof(T) == 2) {  // as packed pairs: the amax by packed max and min (fold_pairs)
    AlignedVector<device::packed_t<T>, kVec / 2> x[kPerLane];
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      if constexpr (kAsPairs) {
        float xv[kVec], wv[kVec];
        PM::widen(xs[r], xv);
        PM::widen(ws[r], wv);
        x[r] = PM::normalized(xv, wv, scale);
      } else {
        const Vec y = M::normalized(xs[r], ws[r], scale);
#pragma unroll
        for (int k = 0; k < kVec / 2; ++k) x[r][k] = device::packed_t<T>(y[2 * k], y[2 * k + 1]);
      }
    }
    quant::quantize_group_with<fp8_e4m3_t, kLanes, kPerLane, kUE8M0, false, kRounding, true>(x, held, q + first * kVec, epi.eps, 0xffffffffu, store_scale);
  } else {
    Vec x[kPerLane];
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) x[r] = M::normalized(xs[r], ws[r], scale);
    quant::quantize_group_with<fp8_e4m3_t, kLanes, kPerLane, kUE8M0, false, kRounding, true>(x, held, q + first * kVec, epi.eps, 0xffffffffu, store_scale);
  }
}

// One row: norm_group_row_sums, the barrier, after_sync() (every thread has done with its loads' sources), then
// norm_group_row_codes.
template <typename T, int kVec, int kGroup, int kPerLane, bool kFusedAdd, bool kUE8M0, quant::Rounding kRounding, bool kPairs, typename AfterSync>
JITKERN_DEVICE void norm_group_row(AlignedVector<T, kVec> (&xs)[kPerLane], const AlignedVector<T, kVec> (&ws)[kPerLane],
                                   const AlignedVector<T, kVec> (&rs)[kFusedAdd ? kPerLane : 1], bool held, int first, int nvec, float inv_hidden,
                                   float eps, T* residual, uint8_t* q, const quant::GroupScales& scales,
                                   const quant::QuantizeGroups<kGroup, kUE8M0, kRounding>& epi, float* partial, const AfterSync& after_sync) {
  norm_group_row_sums<T, kVec, kGroup, kPerLane, kFusedAdd, kPairs>(xs, rs, held, first, residual, partial);
  __syncthreads();
  after_sync();
  norm_group_row_codes<T, kVec, kGroup, kPerLane, kUE8M0, kRounding, kPairs>(xs, ws, held, first, nvec, inv_hidden, eps, q, scales, epi, partial);
}

// Token rows of RMSNorm + group quantization, kRows rows a CTA of ceil(vectors / kPerLane) threads (whole warps),
// kPerLane vectors of one group a lane (the group's lanes hold vectors l, l + kLanes, ...: per_group_kernel's
// layout). The row's sum of squares is added as norm_wide_kernel<..., 1, ...> (one vector a thread) adds it,
// each normalised vector rounded to T as there: the same codes, scales and residual. kExact: every lane holds
// its vectors (no bounds checks). kPairs: PairMath for 16-bit T. p.early_trigger: the next launch is triggered
// at start, else after the wait. kPinnedStores: the rows' code and scale addresses computed before the wait;
// kEarlyInvHidden: 1 / hidden too (else after the wait, beside the loads). kBoundThreads, kMinBlocks:
// __launch_bounds__ (0: CTAs of up to 1024 / kPerLane threads, no minimum). kRows > 1: CTA c takes rows c * kRows
// to c * kRows + kRows - 1 (past the last row, the last row again: the same bits stored twice; the plain op only),
// their loads issued together, the weights loaded once, one barrier for their sums of squares.
template <typename T, int kVec, int kGroup, int kPerLane, bool kFusedAdd, bool kUE8M0, quant::Rounding kRounding, bool kExact, bool kPairs,
          bool kPinnedStores, bool kEarlyInvHidden = false, int kBoundThreads = 0, int kMinBlocks = 0, int kRows = 1>
__global__ void __launch_bounds__(kBoundThreads > 0 ? kBoundThreads : host::kRowKernels.max_cta_threads / kPerLane, kMinBlocks)
    norm_group_rows_kernel(const __grid_constant__ device::norm::NormParams<T> p,
                           const __grid_constant__ quant::QuantizeGroups<kGroup, kUE8M0, kRounding> epi) {
#ifdef __CUDACC__
  using namespace device::norm;
  using Vec = AlignedVector<T, kVec>;
  constexpr int kGroupVecs = kGroup / kVec, kLanes = kGroupVecs / kPerLane;
  static_assert(kLanes >= 1 && kGroupVecs <= device::kWarpThreads, "a group's vectors in one warp, at least a vector a lane");
  static_assert(kRows == 1 || !kFusedAdd, "a row stored twice would add the residual twice");
  const int nvec = static_cast<int>(p.hidden / kVec), g = static_cast<int>(threadIdx.x) / kLanes;
  const int first = g * kGroupVecs + static_cast<int>(threadIdx.x) % kLanes;  // vector r: first + r * kLanes
  const bool held = kExact || first < nvec;                                  // the group's lanes all or none
  const auto at = [&](int r) { return (first + r * kLanes) * kVec; };
  // The loads' addresses, pinned before the wait (the compiler would compute them after it, on the path from the
  // previous kernel's end to the first load).
  const T *in_at[kRows], *res_at[kRows], *w_at;
  T* residual[kRows];
  uint8_t* q[kRows];
  quant::GroupScales scales[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const uint32_t n = kRows == 1 ? blockIdx.x : static_cast<uint32_t>(min(static_cast<int32_t>(blockIdx.x) * kRows + i, p.total_rows - 1));
    const RowPointers<T> row = locate_row<T, RowOrder::kTokenRows>(p, static_cast<int32_t>(n));
    in_at[i] = row.in + at(0), res_at[i] = row.residual + at(0), residual[i] = row.residual, w_at = row.weight + at(0);
    asm volatile("" : "+l"(in_at[i]), "+l"(res_at[i]), "+l"(w_at));
    q[i] = epi.q + n * epi.q_row_stride;
    scales[i] = row_of_scales(epi.scales, epi.first_row + n);
    if constexpr (kPinnedStores) asm volatile("" : "+l"(q[i]), "+l"(scales[i].base));  // else computed after the reduction
  }
  float early_inv_hidden = 1.0f / static_cast<float>(p.hidden);
  if constexpr (kEarlyInvHidden) asm volatile("" : "+f"(early_inv_hidden));
  if (p.early_trigger) device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  if (!p.early_trigger) device::pdl_trigger_secondary();
  Vec xs[kRows][kPerLane], ws[kPerLane], rs[kRows][kFusedAdd ? kPerLane : 1];
  const float inv_hidden = kEarlyInvHidden ? early_inv_hidden : 1.0f / static_cast<float>(p.hidden);
  if (held) {
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        xs[i][r].load_global(in_at[i] + r * kLanes * kVec);
        if constexpr (kFusedAdd) rs[i][r].load_global(res_at[i] + r * kLanes * kVec);
      }
      ws[r].load_global(w_at + r * kLanes * kVec);
    }
  }
  __shared__ float partial[kRows][device::kWarpThreads];
#pragma unroll
  for (int i = 0; i < kRows; ++i)
    norm_group_row_sums<T, kVec, kGroup, kPerLane, kFusedAdd, kPairs>(xs[i], rs[i], held, first, residual[i], partial[i]);
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kRows; ++i)
    norm_group_row_codes<T, kVec, kGroup, kPerLane, kUE8M0, kRounding, kPairs>(xs[i], ws, held, first, nvec, inv_hidden, p.eps, q[i], scales[i],
                                                                              epi, partial[i]);
#endif
}

// Clusters are sm_90's: below it norm_group_cluster_kernel is built without its cluster and never launched.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define JITKERN_QUANT_CLUSTER_OF(n) __cluster_dims__(n, 1, 1)
#else
#define JITKERN_QUANT_CLUSTER_OF(n)
#endif

// A few token rows of RMSNorm (optionally after the residual add) + group quantization, each split over a cluster of
// kCtas CTAs of kThreads threads (blockIdx.x: the CTA's slice, blockIdx.y: the row), one vector a thread: vector
// c * kThreads + t of the row is thread t's of CTA c, so each warp adds the sum of squares of one vector a thread's
// warp, which it stores into every CTA's shared memory; after a cluster barrier each CTA adds those as
// norm_group_rows_kernel does (the same bits), then normalises and quantizes its own vectors. A CTA reads and
// writes its own slice of the residual only. CTAs past the row's end only take part in the barriers. kPinnedStores: as
// norm_group_rows_kernel's.
template <typename T, int kVec, int kGroup, int kThreads, int kCtas, bool kFusedAdd, bool kUE8M0, quant::Rounding kRounding, bool kPinnedStores>
__global__ void JITKERN_QUANT_CLUSTER_OF(kCtas) __launch_bounds__(kThreads)
    norm_group_cluster_kernel(const __grid_constant__ device::norm::NormParams<T> p,
                              const __grid_constant__ quant::QuantizeGroups<kGroup, kUE8M0, kRounding> epi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using namespace device::norm;
  using Vec = AlignedVector<T, kVec>;
  using PM = PairMath<T, kVec>;
  constexpr int kWarps = kThreads / device::kWarpThreads, kGroupVecs = kGroup / kVec;
  static_assert(sizeof(T) == 2 && kThreads % device::kWarpThreads == 0 && kCtas * kWarps <= device::kWarpThreads && kGroupVecs <= device::kWarpThreads);
  const RowPointers<T> row = locate_row<T, RowOrder::kTokenRows>(p, static_cast<int32_t>(blockIdx.y));
  const int t = static_cast<int>(threadIdx.x), nvec = static_cast<int>(p.hidden / kVec);
  const int own = static_cast<int>(blockIdx.x) * kThreads + t, warp = t / device::kWarpThreads, lane = t % device::kWarpThreads;
  const bool held = own < nvec;  // a group's lanes all or none
  const T *in_at = row.in + own * kVec, *w_at = row.weight + own * kVec;
  T* res_at = row.residual + own * kVec;
  asm volatile("" : "+l"(in_at), "+l"(res_at), "+l"(w_at));  // as norm_group_rows_kernel
  uint8_t* q = epi.q + blockIdx.y * epi.q_row_stride + own * kVec;
  quant::GroupScales scales = row_of_scales(epi.scales, epi.first_row + blockIdx.y);
  if constexpr (kPinnedStores) asm volatile("" : "+l"(q), "+l"(scales.base));
  device::ptx::cluster_arrive_relaxed();  // this CTA has started: the others may store into its shared memory once all have
  if (p.early_trigger) device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  if (!p.early_trigger) device::pdl_trigger_secondary();
  Vec x, w, r;
  if (held) {
    x.load_global(in_at);
    if constexpr (kFusedAdd) r.load_global(res_at);
    w.load_global(w_at);
  }
  float part = 0.0f;
  if (held) {
    if constexpr (kFusedAdd) PM::add(x, r);
    float f[kVec];
    PM::widen(x, f);
    part = PM::sum_squares(f);
  }
  part = device::warp::reduce_sum(part);  // the butterfly of one vector a thread's warp
  __shared__ float partial[device::kWarpThreads];
  const int old_warp = static_cast<int>(blockIdx.x) * kWarps + warp, old_warps = (nvec + device::kWarpThreads - 1) / device::kWarpThreads;
  device::ptx::cluster_wait();
  if (lane < kCtas && old_warp < old_warps) device::ptx::st_shared_cluster_f32(&partial[old_warp], static_cast<uint32_t>(lane), part);
  device::ptx::cluster_arrive();
  device::ptx::cluster_wait();
  // The new residual stored after the barrier, whose release would otherwise wait for the store to reach L2.
  if (kFusedAdd && held) x.store_global(res_at);
  const float inv_hidden = 1.0f / static_cast<float>(p.hidden);
  const float total = device::warp::reduce_sum(lane < old_warps ? partial[lane] : 0.0f);
  const float scale = rsqrtf(total * inv_hidden + p.eps);
  AlignedVector<device::packed_t<T>, kVec / 2> y[1];
  float xv[kVec], wv[kVec];
  PM::widen(x, xv);
  PM::widen(w, wv);
  y[0] = PM::normalized(xv, wv, scale);
  const int g = own / kGroupVecs;
  const auto store_scale = [&](float s, uint32_t e) { scales.template store_at<kUE8M0>(0, g, epi.groups_per_row, s, e); };
  quant::quantize_group_with<fp8_e4m3_t, kGroupVecs, 1, kUE8M0, false, kRounding, true>(y, held, q, epi.eps, 0xffffffffu, store_scale);
#endif
}

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
inline void zero_float_async(float* ptr, DLDevice device) {
  const host::DeviceGuard guard(device.device_id);
  host::RuntimeDeviceCheck(cudaMemsetAsync(ptr, 0, sizeof(float), host::LaunchKernel::resolve_device(device)));
}

// S: how the norm + group ops take their rows (NormGroupSchedule).
template <typename T, typename S = NormGroupSchedule>
struct QuantOps {
  // The 8-bit output formats: fp8 e4m3 (its tensor, or its bytes as uint8) or int8.
  using QDTypes = host::DTypeList<uint8_t, fp8_e4m3_t, int8_t>;

  // input [N, H] -> output_q [N, H] (fp8), output_s [1] (fp32): read (static) or written (dynamic, whatever
  // it held before). Static and dynamic are separate exports (modules), so that a call compiles only its own.
  static void per_tensor_quant_static(jitkern::TensorView input, jitkern::TensorView output_q, jitkern::TensorView output_s) {
    per_tensor_quant<true>(input, output_q, output_s);
  }
  static void per_tensor_quant_dynamic(jitkern::TensorView input, jitkern::TensorView output_q, jitkern::TensorView output_s) {
    per_tensor_quant<false>(input, output_q, output_s);
  }

  template <bool kStatic>
  static void per_tensor_quant(jitkern::TensorView input, jitkern::TensorView output_q, jitkern::TensorView output_s) {
    using namespace host;
    auto device = SymbolicDevice{};
    Operands ops = operands(input, output_q, device);
    TensorMatcher({1}).with_dtype<float>().with_device(device_v<kDLCUDA>, device).verify(output_s, "output_s");
    RuntimeCheck(!is_type<int8_t>(output_q.dtype()), "per_tensor_quant: output_q must be float8_e4m3fn, got int8");
    auto* scale = static_cast<float*>(output_s.data_ptr());
    if (ops.rows * ops.width == 0) {
      if (!kStatic) zero_float_async(scale, ops.device);  // the amax of nothing
      return;
    }
    dispatch_vec(ops, [&](auto vec_tag, auto one_row_tag) {
      constexpr int kVec = decltype(vec_tag)::value;
      constexpr bool kOneRow = decltype(one_row_tag)::value;
      const Shape2D shape = shape_of(ops, kVec, kOneRow);
      const Rows<const T> in{ops.in, ops.in_stride};
      const Rows<uint8_t> q{static_cast<uint8_t*>(ops.out), ops.out_stride};
      if constexpr (kStatic) {
        static_launch<kVec, kOneRow>(in, q, shape, scale, ops.device);
      } else {
        const int64_t sms = runtime::get_sm_count(ops.device.device_id);
        const int64_t threads_per_sm = row_policy(ops.device).threads_per_sm;
        // Unaligned rows (kVec == 1) are rare: they take the general launches only, which keeps the module small.
        if constexpr (kVec > 1) {
          if (shape.total_vecs <= kQuantOneCtaVecs) {
            const int64_t threads = div_ceil(div_ceil(shape.total_vecs, kQuantOneCtaRegVecs), 32) * 32;
            LaunchKernel(1, static_cast<unsigned>(threads), ops.device)
                .enable_pdl()(tensor_quant_one_cta_kernel<T, fp8_e4m3_t, kVec, kOneRow>, in, q, shape, scale, quant::kDefaultScaleEps);
            return;
          }
          const auto split = [&](auto vecs_tag, int threads) {
            constexpr int kVecs = decltype(vecs_tag)::value;
            const int64_t grid = div_ceil(shape.total_vecs, int64_t{threads} * kVecs);
            const jitkern::Tensor parts = jitkern::Tensor::empty({grid}, DLDataType{kDLFloat, 32, 1}, ops.device);
            auto* p = static_cast<float*>(parts.view().data_ptr());
            LaunchKernel(static_cast<unsigned>(grid), threads, ops.device)
                .enable_pdl()(tensor_amax_parts_kernel<T, kVec, kVecs, kOneRow>, in, shape, p);
            LaunchKernel(static_cast<unsigned>(grid), threads, ops.device)
                .enable_pdl()(quantize_tensor_parts_kernel<T, fp8_e4m3_t, kVec, kVecs, kOneRow>, in, q, shape, p, scale, quant::kDefaultScaleEps);
          };
          if (shape.total_vecs <= sms * kQuantSplitThreads) return split(std::integral_constant<int, 1>{}, kQuantSplitThreads);
          if (shape.total_vecs <= threads_per_sm / kQuantSplitWideThreads * sms * kQuantSplitWideThreads * kQuantSplitWideVecs)
            return split(std::integral_constant<int, kQuantSplitWideVecs>{}, kQuantSplitWideThreads);
        }
        zero_float_async(scale, ops.device);
        const int64_t grid = host::min<int64_t>(div_ceil(shape.total_vecs, kQuantThreads), sms * (threads_per_sm / kQuantThreads));
        LaunchKernel(static_cast<unsigned>(grid), kQuantThreads, ops.device)
            .enable_pdl()(tensor_scale_kernel<T, fp8_e4m3_t, kVec, kOneRow>, in, shape, scale, quant::kDefaultScaleEps);
        LaunchKernel(checked_grid(div_ceil(shape.total_vecs, kQuantThreads * kQuantItems)), kQuantThreads, ops.device)
            .enable_pdl()(quantize_tensor_kernel<T, fp8_e4m3_t, kVec, kOneRow, true>, in, q, shape, scale);
      }
    });
  }

  // input [N, H] -> output_q [N, H] (fp8), output_s [N] (fp32, one dynamic scale per row).
  static void per_token_quant(jitkern::TensorView input, jitkern::TensorView output_q, jitkern::TensorView output_s) {
    using namespace host;
    auto device = SymbolicDevice{};
    Operands ops = operands(input, output_q, device);
    RuntimeCheck(!is_type<int8_t>(output_q.dtype()), "per_token_quant: output_q must be float8_e4m3fn, got int8");
    auto s_stride = SymbolicSize{"output_s_stride"};
    TensorMatcher({ops.rows}).with_strides({s_stride}).with_dtype<float>().with_device(device_v<kDLCUDA>, device).verify(output_s, "output_s");
    RuntimeCheck(ops.rows <= 1 || s_stride.unwrap() == 1, "output_s must be contiguous, got stride ", ops.rows <= 1 ? 1 : s_stride.unwrap());
    if (ops.rows * ops.width == 0) return;
    RuntimeCheck(ops.rows <= 0x7fffffff, "at most 2^31 - 1 rows are supported, got ", ops.rows);
    host::norm::check_row_width(ops.width);
    auto* scales = static_cast<float*>(output_s.data_ptr());
    dispatch_vec(ops, [&](auto vec_tag, auto) {
      constexpr int kVec = decltype(vec_tag)::value;
      const int64_t nvec = ops.width / kVec;
      const Rows<const T> in{ops.in, ops.in_stride};
      const Rows<uint8_t> q{static_cast<uint8_t*>(ops.out), ops.out_stride};
      using device::norm::RowFit;
      const bool early = host::pdl_early_trigger(ops.rows);
      const int row_threads = row_policy(ops.device).row_threads;
      const auto launch = [&](auto regs_tag) {  // kRegs vectors a thread
        constexpr int kRegs = decltype(regs_tag)::value;
        const int threads = wide_threads(nvec, kRegs, row_threads);
        LaunchKernel go(static_cast<unsigned>(ops.rows), threads, ops.device);
        go.enable_pdl();
        const RowFit fit = host::norm::row_fit(nvec, kRegs, threads);
        if (fit == RowFit::kExact) {
          go(per_token_kernel<T, fp8_e4m3_t, kVec, RowFit::kExact, kRegs>, in, q, scales, ops.width, quant::kDefaultScaleEps, early);
        } else if (fit == RowFit::kFits) {
          go(per_token_kernel<T, fp8_e4m3_t, kVec, RowFit::kFits, kRegs>, in, q, scales, ops.width, quant::kDefaultScaleEps, early);
        } else if constexpr (kRegs == kQuantRowRegVecs) {
          go(per_token_kernel<T, fp8_e4m3_t, kVec, RowFit::kWider, kRegs>, in, q, scales, ops.width, quant::kDefaultScaleEps, early);
        }
      };
      // Many rows of 16-byte vectors that the threads hold: kQuantManyRowsRegVecs a thread.
      if constexpr (kVec == device::kVec16<T>) {
        if (ops.rows >= kQuantManyRowsPerSm * runtime::get_sm_count(ops.device.device_id) &&
            nvec <= int64_t{kQuantManyRowsRegVecs} * row_threads)
          return launch(std::integral_constant<int, kQuantManyRowsRegVecs>{});
      }
      launch(std::integral_constant<int, kQuantRowRegVecs>{});
    }, /*flatten=*/false);
  }

  // input [N, H] -> output_q [N, H] (fp8 or int8), one scale per group of group_size elements of a row:
  // output_s fp32 [N, H / group_size] (any strides: row-major, column-major, TMA-aligned column-major),
  // or int32 [N, ceil(H / group_size / 4)] of packed UE8M0 exponents (fp8 only). One export per output
  // format and rounding policy (quant::Rounding), so that a first call compiles a sixth of the kernels: fp8
  // with fp32 scales, fp8 with UE8M0 scales, int8.
  template <quant::Rounding kRounding>
  static void per_token_group_quant(jitkern::TensorView input, jitkern::TensorView output_q, jitkern::TensorView output_s,
                                    int64_t group_size, double eps) {
    per_token_group_quant_as<GroupFormat::kFp8, kRounding>(input, output_q, output_s, group_size, eps);
  }
  template <quant::Rounding kRounding>
  static void per_token_group_quant_ue8m0(jitkern::TensorView input, jitkern::TensorView output_q, jitkern::TensorView output_s,
                                          int64_t group_size, double eps) {
    per_token_group_quant_as<GroupFormat::kFp8Ue8m0, kRounding>(input, output_q, output_s, group_size, eps);
  }
  template <quant::Rounding kRounding>
  static void per_token_group_quant_int8(jitkern::TensorView input, jitkern::TensorView output_q, jitkern::TensorView output_s,
                                         int64_t group_size, double eps) {
    per_token_group_quant_as<GroupFormat::kInt8, kRounding>(input, output_q, output_s, group_size, eps);
  }

  // per_token_group_quant's output formats (an export each) and its operands as checked (group_operands).
  enum class GroupFormat { kFp8, kFp8Ue8m0, kInt8 };
  struct GroupOperands {
    host::RowOperands<T> ops;  // out: the 8-bit output (its bytes)
    GroupScales scales;
    int64_t group_size, groups_per_row, total_groups;  // total_groups 0: nothing to write
    float eps;
  };

  // The operands of the kFormat export, checked.
  template <GroupFormat kFormat>
  static GroupOperands group_operands(jitkern::TensorView input, jitkern::TensorView output_q, jitkern::TensorView output_s,
                                      int64_t group_size, double eps) {
    using namespace host;
    RuntimeCheck(group_size == 32 || group_size == 64 || group_size == 128, "group_size must be 32, 64 or 128, got ", group_size);
    RuntimeCheck(std::isfinite(eps) && eps > 0.0, "eps must be a finite positive number, got ", eps);
    auto device = SymbolicDevice{};
    Operands ops = operands(input, output_q, device);
    RuntimeCheck(ops.width % group_size == 0, "the last dimension of input (", ops.width, ") must be a multiple of group_size (",
                 group_size, ")");
    const int64_t groups = ops.width / group_size;
    const bool to_int8 = is_type<int8_t>(output_q.dtype());
    const host::quant::CheckedGroupScales checked = host::quant::verify_group_scales(output_s, ops.rows, groups, device);
    const bool ue8m0 = checked.ue8m0;
    RuntimeCheck(!(ue8m0 && to_int8), "UE8M0 scales (int32 output_s) are for fp8 output only, got an int8 output_q");
    const GroupFormat format = to_int8 ? GroupFormat::kInt8 : ue8m0 ? GroupFormat::kFp8Ue8m0 : GroupFormat::kFp8;
    RuntimeCheck(format == kFormat, "output_q and output_s are for ", group_export(format), ", not ", group_export(kFormat));
    return {ops, checked.scales, group_size, groups, ops.rows * groups, static_cast<float>(eps)};
  }

  // Whether per_group_lean_kernel takes g's groups to fp8: contiguous 16-bit rows of 16-byte vectors, at most 2^32
  // elements, eps at least kNormalScaleEps (the exact rounding).
  template <quant::Rounding kRounding>
  static bool lean_applies(const GroupOperands& g) {
    constexpr int kVec = device::kVec16<T>;
    return sizeof(T) == 2 && g.ops.contiguous() && g.ops.vector_width(kVec) == kVec && g.ops.rows * g.ops.width <= int64_t{UINT32_MAX} &&
           quant::normal_eps_holds<kRounding>(g.eps);
  }

  // per_group_lean_kernel over g's groups (lean_applies) in CTAs of kThreads triggering at kTrigger.
  template <bool kUE8M0, quant::Rounding kRounding, int kThreads, int kTrigger>
  static void launch_lean(const GroupOperands& g) {
    using namespace host;
    const auto go = [&](auto group_tag) {
      constexpr int kLanes = decltype(group_tag)::value / (device::kVec16<T> * kQuantGroupLeanLaneVecs);
      LaunchKernel(checked_grid(div_ceil(g.total_groups, int64_t{kThreads / kLanes})), static_cast<unsigned>(kThreads), g.ops.device)
          .enable_pdl()(per_group_lean_kernel<T, kLanes, kUE8M0, kThreads, kTrigger, kRounding>, static_cast<const T*>(g.ops.in),
                        static_cast<uint8_t*>(g.ops.out), g.scales, static_cast<uint32_t>(g.groups_per_row),
                        static_cast<uint32_t>(g.total_groups), g.eps);
    };
    if (g.group_size == 32) return go(std::integral_constant<int, 32>{});
    if (g.group_size == 64) return go(std::integral_constant<int, 64>{});
    go(std::integral_constant<int, 128>{});
  }

  // per_group_kernel (every layout and format) over g's groups under its launch rule.
  template <GroupFormat kFormat, quant::Rounding kRounding>
  static void launch_group_general(const GroupOperands& g) {
    using namespace host;
    const Operands& ops = g.ops;
    const int64_t total_groups = g.total_groups;
    const auto by_format = [&](auto vec_tag, auto lanes_tag, auto per_lane_tag, auto flat_tag) {
      constexpr int kVec = decltype(vec_tag)::value, kLanes = decltype(lanes_tag)::value, kPerLane = decltype(per_lane_tag)::value;
      constexpr bool kFlat = decltype(flat_tag)::value;
      const int64_t narrow_grid_threads = div_ceil(total_groups, int64_t{kQuantGroupThreads / kLanes}) * kQuantGroupThreads;
      const bool late = host::pdl_late_trigger(narrow_grid_threads, runtime::get_sm_count(ops.device.device_id), row_policy(ops.device).threads_per_sm);
      const int threads = late ? kQuantGroupWideThreads : kQuantGroupThreads;
      const unsigned grid = checked_grid(div_ceil(total_groups, int64_t{threads / kLanes}));
      const bool early = host::pdl_early_trigger(grid);
      LaunchKernel launch(grid, static_cast<unsigned>(threads), ops.device);
      launch.enable_pdl();
      const Rows<const T> in{ops.in, ops.in_stride};
      const Rows<uint8_t> q{static_cast<uint8_t*>(ops.out), ops.out_stride};
      if constexpr (kFormat == GroupFormat::kInt8) {
        launch(per_group_kernel<T, int8_t, kVec, kLanes, kPerLane, false, kFlat, kRounding>, in, q, g.scales, g.groups_per_row, total_groups,
               g.eps, early, late);
      } else {
        constexpr bool kUE8M0 = kFormat == GroupFormat::kFp8Ue8m0;
        launch(per_group_kernel<T, fp8_e4m3_t, kVec, kLanes, kPerLane, kUE8M0, kFlat, kRounding>, in, q, g.scales, g.groups_per_row,
               total_groups, g.eps, early, late);
      }
    };
    const int64_t group_size = g.group_size;
    constexpr int kVec = device::kVec16<T>;
    using I = std::integral_constant<int, 1>;
    using Two = std::integral_constant<int, 2>;
    if (ops.vector_width(kVec) == kVec) {  // two vectors per lane
      using V = std::integral_constant<int, kVec>;
      const auto by_size = [&](auto flat) {
        if (group_size == 32) by_format(V{}, std::integral_constant<int, 32 / kVec / 2>{}, Two{}, flat);
        if (group_size == 64) by_format(V{}, std::integral_constant<int, 64 / kVec / 2>{}, Two{}, flat);
        if (group_size == 128) by_format(V{}, std::integral_constant<int, 128 / kVec / 2>{}, Two{}, flat);
      };
      if (ops.contiguous()) {
        by_size(std::true_type{});
      } else {
        by_size(std::false_type{});
      }
    } else {  // unaligned rows: a warp per group, element by element
      using W = std::integral_constant<int, 32>;
      if (group_size == 32) by_format(I{}, W{}, I{}, std::false_type{});
      if (group_size == 64) by_format(I{}, W{}, Two{}, std::false_type{});
      if (group_size == 128) by_format(I{}, W{}, std::integral_constant<int, 4>{}, std::false_type{});
    }
  }

 private:
  static constexpr const char* group_export(GroupFormat f) {
    return f == GroupFormat::kFp8 ? "per_token_group_quant (fp8 output, fp32 scales)"
           : f == GroupFormat::kFp8Ue8m0 ? "per_token_group_quant_ue8m0 (fp8 output, int32 UE8M0 scales)"
                                        : "per_token_group_quant_int8 (int8 output, fp32 scales)";
  }

  template <GroupFormat kFormat, quant::Rounding kRounding>
  static void per_token_group_quant_as(jitkern::TensorView input, jitkern::TensorView output_q, jitkern::TensorView output_s,
                                       int64_t group_size, double eps) {
    const GroupOperands g = group_operands<kFormat>(input, output_q, output_s, group_size, eps);
    if (g.total_groups == 0) return;
    if constexpr (kFormat != GroupFormat::kInt8 && sizeof(T) == 2) {
      if (launch_group_lean<kFormat == GroupFormat::kFp8Ue8m0, kRounding>(g)) return;
    }
    launch_group_general<kFormat, kRounding>(g);
  }

 public:

  // output_q = fp8(rmsnorm(input) * weight / s): static (scale [1], read) or dynamic per token (output_s [N],
  // written), one export each. The normalised values are rounded to T first, as rmsnorm writes them.
  static void rmsnorm_quant_static(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output_q,
                                   jitkern::TensorView scale, double eps) {
    norm_quant<false, false>(TokenRows<T>(input, weight, nullptr, nullptr, eps), output_q, scale);
  }
  static void rmsnorm_quant_dynamic(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output_q,
                                    jitkern::TensorView output_s, double eps) {
    norm_quant<false, true>(TokenRows<T>(input, weight, nullptr, nullptr, eps), output_q, output_s);
  }

  // output_q = fp8(rmsnorm(input) * weight) in groups of group_size elements of a row, each with its own dynamic
  // scale: per_token_group_quant's rule with rounding kRounding (quant::Rounding; kExact: max(finite amax, 1e-10)
  // / 448) and output_s layouts (host::quant::verify_group_scales), fp32 or (the _ue8m0 exports) int32 words of
  // packed UE8M0 exponents. The normalised values are rounded to T first, as rmsnorm writes them. One pass: the
  // row stays in registers (device::quant::QuantizeGroups). An instantiation per group size (group_size must
  // equal kGroupSize) and rounding, so that a module builds one group size's kernels.
  template <int kGroupSize, quant::Rounding kRounding = quant::Rounding::kExact>
  static void rmsnorm_group_quant(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output_q,
                                  jitkern::TensorView output_s, int64_t group_size, double eps) {
    norm_group_quant<kGroupSize, false, false, kRounding>(TokenRows<T>(input, weight, nullptr, nullptr, eps), output_q, output_s, group_size);
  }
  template <int kGroupSize, quant::Rounding kRounding = quant::Rounding::kExact>
  static void rmsnorm_group_quant_ue8m0(jitkern::TensorView input, jitkern::TensorView weight, jitkern::TensorView output_q,
                                        jitkern::TensorView output_s, int64_t group_size, double eps) {
    norm_group_quant<kGroupSize, false, true, kRounding>(TokenRows<T>(input, weight, nullptr, nullptr, eps), output_q, output_s, group_size);
  }
  // residual += input, then rmsnorm_group_quant of residual (input is left as it was).
  template <int kGroupSize, quant::Rounding kRounding = quant::Rounding::kExact>
  static void fused_add_rmsnorm_group_quant(jitkern::TensorView input, jitkern::TensorView residual, jitkern::TensorView weight,
                                            jitkern::TensorView output_q, jitkern::TensorView output_s, int64_t group_size, double eps) {
    norm_group_quant<kGroupSize, true, false, kRounding>(TokenRows<T>(input, weight, nullptr, &residual, eps), output_q, output_s, group_size);
  }
  template <int kGroupSize, quant::Rounding kRounding = quant::Rounding::kExact>
  static void fused_add_rmsnorm_group_quant_ue8m0(jitkern::TensorView input, jitkern::TensorView residual, jitkern::TensorView weight,
                                                  jitkern::TensorView output_q, jitkern::TensorView output_s, int64_t group_size, double eps) {
    norm_group_quant<kGroupSize, true, true, kRounding>(TokenRows<T>(input, weight, nullptr, &residual, eps), output_q, output_s, group_size);
  }

  // residual += input; output_q = fp8(rmsnorm(residual) * weight / s) (input is left as it was).
  static void fused_add_rmsnorm_quant_static(jitkern::TensorView input, jitkern::TensorView residual, jitkern::TensorView weight,
                                             jitkern::TensorView output_q, jitkern::TensorView scale, double eps) {
    norm_quant<true, false>(TokenRows<T>(input, weight, nullptr, &residual, eps), output_q, scale);
  }
  static void fused_add_rmsnorm_quant_dynamic(jitkern::TensorView input, jitkern::TensorView residual, jitkern::TensorView weight,
                                              jitkern::TensorView output_q, jitkern::TensorView output_s, double eps) {
    norm_quant<true, true>(TokenRows<T>(input, weight, nullptr, &residual, eps), output_q, output_s);
  }

 private:
  using Operands = host::RowOperands<T>;  // out: the 8-bit output (its bytes)

  static Shape2D shape_of(const Operands& ops, int vec, bool one_row) {
    const int64_t total = ops.rows * ops.width / vec;
    return {one_row ? total : ops.width / vec, total};
  }

  static Operands operands(jitkern::TensorView input, jitkern::TensorView output_q, host::SymbolicDevice& device) {
    using namespace host;
    const char* q_name = "output_q";
    auto N = SymbolicSize{"num_tokens"}, H = SymbolicSize{"hidden_size"};
    auto in_stride = SymbolicSize{"input_row_stride"}, q_stride = SymbolicSize{"output_q_row_stride"};
    TensorMatcher({N, H}).with_strides({in_stride, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(input, "input");
    TensorMatcher({N, H}).with_strides({q_stride, 1}).with_dtype(QDTypes{}).with_device(device_v<kDLCUDA>, device).verify(output_q, q_name);
    TokenRows<T>::check_rows(N, H, q_stride, q_name);  // input is only read: its rows may overlap (a broadcast)
    return {static_cast<const T*>(input.data_ptr()), output_q.data_ptr(), 1, N.unwrap(), H.unwrap(), TokenRows<T>::stride_of(in_stride),
            TokenRows<T>::stride_of(q_stride), device.unwrap()};
  }

  // per_group_lean_kernel where it applies (lean_applies); false (nothing launched) elsewhere. Grids of more than
  // 256 threads an SM (kSglang: kQuantGroupSglangWaitThreadsPerSm; one wave or several) take CTAs of
  // kQuantGroupWideThreads and trigger after their stores (kSglang: after their loads), grids of at most
  // kPdlEarlyTriggerMaxCtas CTAs of kQuantGroupThreads trigger at start, and the grids between take per_group_kernel
  // (false; kSglang: CTAs of kQuantGroupThreads triggering after the wait). The exact rounding, bf16 [T, 7168] on an
  // H200 (bench_schedules quant, docs/benchmarks/vs_reference.md), us, lean against per_group_kernel: T = 1 0.86 /
  // 1.05; T = 128-512 1.46-2.56 / 1.58-2.74; T = 1024 3.65 / 4.69 (which triggered after its wait); T = 64, between,
  // 1.38 / 1.19.
  template <bool kUE8M0, quant::Rounding kRounding>
  static bool launch_group_lean(const GroupOperands& g) {
    using namespace host;
    if (!lean_applies<kRounding>(g)) return false;
    constexpr bool kSglang = kRounding == quant::Rounding::kSglang;
    const int64_t lanes = g.group_size / (device::kVec16<T> * kQuantGroupLeanLaneVecs);
    const int64_t narrow_grid = div_ceil(g.total_groups, kQuantGroupThreads / lanes);
    const int64_t wide_from =
        (kSglang ? kQuantGroupSglangWaitThreadsPerSm : kPdlLateTriggerThreadsPerSm) * runtime::get_sm_count(g.ops.device.device_id);
    if (narrow_grid * kQuantGroupThreads > wide_from) {
      launch_lean<kUE8M0, kRounding, kQuantGroupWideThreads, kSglang ? 3 : 2>(g);
    } else if (pdl_early_trigger(narrow_grid)) {
      launch_lean<kUE8M0, kRounding, kQuantGroupThreads, 0>(g);
    } else if constexpr (kSglang) {
      launch_lean<kUE8M0, kRounding, kQuantGroupThreads, 1>(g);
    } else {
      return false;
    }
    return true;
  }

  // Static per-tensor of a contiguous tensor: the launch shape by size, in vectors per SM. Up to
  // kStaticSmallVecsPerSm 128-thread CTAs of two vectors per thread, triggering the next launch at once; up
  // to kStaticMidVecsPerSm 128-thread CTAs of one, triggering after their wait (many small CTAs queued
  // early crowd the SMs); up to kStaticLargeVecsPerSm 512 threads of one; up to kStaticHugeVecsPerSm 512
  // of two; beyond, 256 of one. bf16 [T, 4096] on an H100, graphs of back-to-back launches: T = 32-256
  // 0.94-1.53 us against 2.2-2.7 at 512 x 2; T = 16384 / 32768 66.2 / 130.9 us against 67.0 / 132.3.
  static constexpr int64_t kStaticSmallVecsPerSm = 128, kStaticMidVecsPerSm = 1024, kStaticLargeVecsPerSm = 2048,
                           kStaticHugeVecsPerSm = 16384;
  template <int kVec, bool kOneRow>
  static void static_launch(Rows<const T> in, Rows<uint8_t> q, Shape2D shape, const float* scale, DLDevice device) {
    using host::div_ceil;
    const auto go = [&](auto kernel, int threads, int items) {
      host::LaunchKernel(checked_grid(div_ceil(shape.total_vecs, int64_t{threads} * items)), threads, device).enable_pdl()(
          kernel, in, q, shape, scale);
    };
    const int64_t sms = host::runtime::get_sm_count(device.device_id);
    if constexpr (kOneRow && kVec > 1) {  // the common case; other layouts take the large shape
      if (shape.total_vecs <= kStaticSmallVecsPerSm * sms)
        return go(quantize_tensor_kernel<T, fp8_e4m3_t, kVec, true, false, 128, 2, true>, 128, 2);
      if (shape.total_vecs <= kStaticMidVecsPerSm * sms)
        return go(quantize_tensor_kernel<T, fp8_e4m3_t, kVec, true, false, 128, 1, false>, 128, 1);
      if (shape.total_vecs <= kStaticLargeVecsPerSm * sms)
        return go(quantize_tensor_kernel<T, fp8_e4m3_t, kVec, true, false, 512, 1, true>, 512, 1);
      if (shape.total_vecs > kStaticHugeVecsPerSm * sms)
        return go(quantize_tensor_kernel<T, fp8_e4m3_t, kVec, true, false, 256, 1, true>, 256, 1);
    }
    go(quantize_tensor_kernel<T, fp8_e4m3_t, kVec, kOneRow, false>, kQuantThreads, kQuantItems);
  }

  static unsigned checked_grid(int64_t blocks) {
    host::RuntimeCheck(blocks <= 0x7fffffff, "the input is too large for one launch (", blocks, " blocks)");
    return static_cast<unsigned>(blocks);
  }

  // Calls f(vector width, whether the operands are one contiguous row) as integral constants. With
  // flatten = false, rows are never merged (per-row ops).
  template <typename F>
  static void dispatch_vec(const Operands& ops, F&& f, bool flatten = true) {
    constexpr int kVec = device::kVec16<T>;
    using Wide = std::integral_constant<int, kVec>;
    using Scalar = std::integral_constant<int, 1>;
    const bool one_row = flatten && ops.contiguous();
    // A contiguous tensor whose width does not divide into vectors still does as one row.
    const int64_t width = one_row ? ops.rows * ops.width : ops.width;
    Operands as_vectors = ops;
    as_vectors.width = width, as_vectors.rows = one_row ? 1 : ops.rows;
    const bool wide = as_vectors.vector_width(kVec) == kVec;
    if (one_row) {
      if (wide) f(Wide{}, std::true_type{});
      else f(Scalar{}, std::true_type{});
    } else {
      if (wide) f(Wide{}, std::false_type{});
      else f(Scalar{}, std::false_type{});
    }
  }

  // The fp8 output of a norm + quantization op, [tokens, hidden] with strided rows on the rows' device: its
  // bytes and row stride (elements).
  static std::pair<uint8_t*, int64_t> norm_output_q(const TokenRows<T>& rows, jitkern::TensorView output_q, host::SymbolicDevice& device) {
    using namespace host;
    auto q_stride = SymbolicSize{"output_q_row_stride"};
    device.set_value(rows.device);
    TensorMatcher({rows.tokens, rows.params.hidden})
        .with_strides({q_stride, 1})
        .with_dtype<uint8_t, fp8_e4m3_t>()
        .with_device(device_v<kDLCUDA>, device)
        .verify(output_q, "output_q");
    TokenRows<T>::check_rows(rows.tokens, rows.params.hidden, q_stride, "output_q");
    return {static_cast<uint8_t*>(output_q.data_ptr()), TokenRows<T>::stride_of(q_stride)};
  }

  template <bool kFusedAdd, bool kDynamic>
  static void norm_quant(const TokenRows<T>& rows, jitkern::TensorView output_q, jitkern::TensorView scales) {
    using namespace host;
    auto device = SymbolicDevice{};
    const auto [q, qs] = norm_output_q(rows, output_q, device);
    auto s_stride = SymbolicSize{"scale_stride"};
    TensorMatcher({kDynamic ? rows.tokens : 1}).with_strides({s_stride}).with_dtype<float>().with_device(device_v<kDLCUDA>, device).verify(
        scales, kDynamic ? "output_s" : "scale");
    RuntimeCheck(!kDynamic || rows.tokens <= 1 || s_stride.unwrap() == 1, "output_s must be contiguous");
    auto* s = static_cast<float*>(scales.data_ptr());
    if constexpr (kDynamic) {
      host::norm::launch_norm<T, kFusedAdd>(rows.params, 1, rows.tokens, rows.device, quant::QuantizeRows<fp8_e4m3_t, true>{q, qs, s, nullptr, quant::kDefaultScaleEps});
    } else {
      host::norm::launch_norm<T, kFusedAdd>(rows.params, 1, rows.tokens, rows.device, quant::QuantizeRows<fp8_e4m3_t, false>{q, qs, nullptr, s, 0.0f});
    }
  }

  template <int kGroup, bool kFusedAdd, bool kUE8M0, quant::Rounding kRounding>
  static void norm_group_quant(const TokenRows<T>& rows, jitkern::TensorView output_q, jitkern::TensorView output_s, int64_t group_size) {
    using namespace host;
    RuntimeCheck(group_size == kGroup, "group_size must be ", kGroup, " for this export, got ", group_size);
    const int64_t hidden = rows.params.hidden;
    RuntimeCheck(hidden % kGroup == 0, "the last dimension of input (", hidden, ") must be a multiple of group_size (", kGroup, ")");
    auto device = SymbolicDevice{};
    const auto [q, qs] = norm_output_q(rows, output_q, device);
    const int64_t groups = hidden / kGroup;
    const host::quant::CheckedGroupScales checked = host::quant::verify_group_scales(output_s, rows.tokens, groups, device);
    RuntimeCheck(checked.ue8m0 == kUE8M0, "output_s must be ", kUE8M0 ? "int32 (packed UE8M0 exponents)" : "float32",
                 " for this export, got ", kUE8M0 ? "float32" : "int32");
    if (rows.tokens * hidden == 0) return;
    const quant::QuantizeGroups<kGroup, kUE8M0, kRounding> epi{q, qs, checked.scales, groups, 0, quant::kDefaultScaleEps};
    // Groups are reduced among the lanes holding their vectors: rows are read in 16-byte vectors only.
    constexpr int kVec = device::kVec16<T>;
    RuntimeCheck(host::norm::norm_vector_width(rows.params, 1, epi) == kVec, "a quantization in groups needs input, ",
                 kFusedAdd ? "residual, " : "", "weight at 16-byte aligned addresses, output_q at a multiple of ", kVec,
                 " bytes, and row strides of input, ", kFusedAdd ? "residual, " : "", "output_q that are multiples of ", kVec, " elements");
    if (launch_group_rows<kGroup, kFusedAdd>(rows, epi)) return;
    host::norm::launch_norm<T, kFusedAdd>(rows.params, 1, rows.tokens, rows.device, epi);
  }

  // Token rows of at most row_threads vectors through norm_group_rows_kernel, N vectors of a group a lane by
  // S (NormGroupSchedule); false (nothing launched) where S gives the norm kernels' launch, or elsewhere (the
  // operands are checked, 16-byte vectors).
  // The device passes of a module built in several (host::in_device_part), beside launch_norm's (its narrow rows in
  // pass 1, its wide rows in pass 2): the group kernels of few rows an SM, of many, and the cluster kernel.
  static constexpr int kFewRowsPart = 0, kManyRowsPart = 1, kClusterPart = 2;

  template <int kGroup, bool kFusedAdd, bool kUE8M0, quant::Rounding kRounding>
  static bool launch_group_rows(const TokenRows<T>& rows, const quant::QuantizeGroups<kGroup, kUE8M0, kRounding>& epi) {
    using namespace host;
    constexpr int kVec = device::kVec16<T>;
    const int64_t nvec = rows.params.hidden / kVec;
    const int row_threads = row_policy(rows.device).row_threads;
    if (nvec > row_threads || rows.tokens > device::norm::kNormMaxRowsPerLaunch) return false;
    device::norm::NormParams<T> p = rows.params;
    p.total_rows = static_cast<int32_t>(rows.tokens);
    p.early_trigger = rows.tokens <= (kFusedAdd ? S::kFusedEarlyTriggerMaxRows : S::kEarlyTriggerMaxRows);
    const int64_t sm_count = runtime::get_sm_count(rows.device.device_id);
    constexpr bool kPinned = kFusedAdd ? S::kFusedPinnedStores : S::kPinnedStores;
    if constexpr (sizeof(T) == 2 && in_device_part(kClusterPart)) {
      constexpr int kThreads = 128, kCtas = 8;
      if (nvec > (kCtas / 2) * kThreads && rows.tokens <= (kFusedAdd ? S::kFusedClusterMaxRows : S::kClusterMaxRows) &&
          row_policy(rows.device).arch >= 90) {
        LaunchKernel launch(dim3(kCtas, static_cast<unsigned>(rows.tokens)), kThreads, rows.device);
        launch.enable_pdl();
        launch(norm_group_cluster_kernel<T, kVec, kGroup, kThreads, kCtas, kFusedAdd, kUE8M0, kRounding, kPinned>, p, epi);
        return true;
      }
    }
    // kFew: below kManyRowsPerSm rows an SM.
    const auto go = [&](auto lanes_tag, auto few_tag) {
      constexpr int kLaneVecs = decltype(lanes_tag)::value;
      constexpr bool kFew = decltype(few_tag)::value;
      if constexpr (kLaneVecs < 1 || kLaneVecs > kGroup / kVec || !in_device_part(kFew ? kFewRowsPart : kManyRowsPart)) {
        return false;
      } else {
        const int threads = wide_threads(nvec, kLaneVecs, row_threads);
        const bool exact = nvec == int64_t{kLaneVecs} * threads;
        const auto with = [&](auto bound_tag, auto rows_tag) {
          constexpr bool kBound = decltype(bound_tag)::value;
          constexpr int kRows = decltype(rows_tag)::value;
          LaunchKernel launch(static_cast<unsigned>((rows.tokens + kRows - 1) / kRows), threads, rows.device);
          launch.enable_pdl();
          const auto as = [&](auto exact_tag) {
            launch(norm_group_rows_kernel<T, kVec, kGroup, kLaneVecs, kFusedAdd, kUE8M0, kRounding, decltype(exact_tag)::value, S::kPairs, kPinned,
                                          kFew && S::kFewEarlyInvHidden, kBound ? S::kManyBoundThreads : 0, kBound ? S::kManyMinBlocks : 0, kRows>,
                   p, epi);
          };
          if (exact) as(std::true_type{});
          else as(std::false_type{});
          return true;
        };
        using One = std::integral_constant<int, 1>;
        if constexpr (!kFew && !kFusedAdd && !kUE8M0 && kRounding == quant::Rounding::kExact && S::kManyBoundThreads > 0) {
          if (threads >= S::kManyBoundFrom && threads <= S::kManyBoundThreads) return with(std::true_type{}, One{});
        }
        if constexpr (kFew && !kFusedAdd && S::kFewRowsPerCta > 1) {
          if (rows.tokens > sm_count && threads >= S::kFewRowsFromThreads) return with(std::false_type{}, std::integral_constant<int, S::kFewRowsPerCta>{});
        }
        return with(std::false_type{}, One{});
      }
    };
    if (rows.tokens >= S::kManyRowsPerSm * sm_count) return go(std::integral_constant<int, kFusedAdd ? S::kFusedLaneVecs : S::kLaneVecs>{}, std::false_type{});
    return go(std::integral_constant<int, kFusedAdd ? S::kFusedFewLaneVecs : S::kFewLaneVecs>{}, std::true_type{});
  }
};
#endif  // __CUDACC_RTC__

}  // namespace jitkern_quant
