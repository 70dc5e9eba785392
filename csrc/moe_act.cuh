// The MoE gated-activation family: SiLU-and-mul over the layouts that MoE expert GEMMs write, computing only
// the rows that hold tokens, whose number is read on the device (no host sync: CUDA-graph safe):
//   sorted: input [P, 2d] in the order of moe_align_block_size's sorted_token_ids [P]; row r is computed
//           where r < *num_tokens_post_pad and sorted_token_ids[r] < num_ids (the padding id is num_ids);
//   masked: input [E, M, 2d], the per-expert buffers of low-latency expert-parallel dispatch; rows
//           m < masked_m[e] of expert e are computed (masked_m int32 [E], taken within [0, M]).
// Rows not computed are neither read nor written: their outputs and scales keep what they held. A computed
// row is written as silu_and_mul writes it (the product rounded to T), or quantized to fp8 e4m3 from that
// rounded product with one dynamic scale per row (per_token_quant_fp8's) or per group of 128 outputs
// (per_token_group_quant_8bit's, fp32 scales with any strides): the dense ops' bits on the computed rows.
//
// The kernels are persistent: a grid sized from the layout's capacity (P or E * M rows) and the GPU, each
// CTA striding over the rows it visits after its PDL wait (sorted: all P, each checked against its id and
// the count; masked: the computed rows, counted from masked_m).
#pragma once

#include <jitkern/cta.cuh>
#include <jitkern/impl/act.cuh>
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
// Experts of the masked layout: their row counts are scanned into shared memory by every CTA.
constexpr int kMaxExperts = 1024;

// Where row f of the computed-row order lives (element offsets of its input, output and scales), and
// whether it is computed.
struct RowAt {
  bool valid;
  int64_t in, out, scale;
};

// The rows a kernel visits, [0, rows), and the bound below which a row may be computed (`limit`).
struct Visit {
  int64_t rows, limit;
};

// The sorted layout: row f is row f of the [P, ...] tensors. Every one of the P rows is visited, so that
// the loop does not wait for *num_post_pad: its load and a row's id load are in flight together.
struct SortedRows {
  const int32_t* sorted_ids;
  const int32_t* num_post_pad;
  int64_t capacity;  // P
  uint32_t num_ids;
  int64_t in_stride, out_stride, scale_stride;
  struct Shared {};
  __device__ __forceinline__ Visit visit(Shared&) const { return {capacity, *num_post_pad}; }
  // Computed: below *num_post_pad, and an id in [0, num_ids) (negative ids compare as large unsigned ones).
  __device__ __forceinline__ RowAt at(const Shared&, int64_t f, int64_t limit) const {
    const bool id_valid = static_cast<uint32_t>(sorted_ids[f]) < num_ids;
    return {id_valid & (f < limit), f * in_stride, f * out_stride, f * scale_stride};
  }
};

// The masked layout: row f is row m of expert e, the experts' computed rows one after another.
struct MaskedRows {
  const int32_t* masked_m;
  int experts;
  int32_t m_max;
  int64_t in_expert, in_row, out_expert, out_row, scale_expert, scale_row;
  struct Shared {
    int32_t ends[kMaxExperts];  // expert e's rows end at ends[e] in the computed-row order
  };
  __device__ __forceinline__ int32_t rows_of(int e) const {
    const int32_t m = masked_m[e];
    return m <= 0 ? 0 : (m < m_max ? m : m_max);
  }
  // The computed rows, counted: every thread of the CTA takes part (a few consecutive experts each, one
  // prefix sum).
  __device__ __forceinline__ Visit visit(Shared& s) const {
    const int per = (experts + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
    const int first = static_cast<int>(threadIdx.x) * per;
    int32_t sum = 0;
    for (int k = 0; k < per; ++k)
      if (first + k < experts) sum += rows_of(first + k);
    int32_t total;
    int32_t end = device::cta::exclusive_sum_once(sum, total);
    for (int k = 0; k < per; ++k)
      if (first + k < experts) s.ends[first + k] = end += rows_of(first + k);  // masked_m again: an L1 hit
    __syncthreads();
    return {total, total};
  }
  __device__ __forceinline__ RowAt at(const Shared& s, int64_t f, int64_t) const {
    int lo = 0, hi = experts - 1;  // the first expert whose rows end after f
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (s.ends[mid] > f) hi = mid;
      else lo = mid + 1;
    }
    const int64_t m = f - (lo > 0 ? s.ends[lo - 1] : 0);
    return {true, lo * in_expert + m * in_row, lo * out_expert + m * out_row, lo * scale_expert + m * scale_row};
  }
};

// f = v / n and v - f * n, in 32 bits where both fit.
__device__ __forceinline__ int64_t quotient(int64_t v, int64_t n, bool narrow) {
  return narrow ? int64_t{static_cast<uint32_t>(v) / static_cast<uint32_t>(n)} : v / n;
}

// out[row] = silu(in[row, :d]) * in[row, d:] for the computed rows, a vector per thread and turn.
template <typename Rows, typename T, int kVec>
__global__ void __launch_bounds__(kActThreads)
    silu_and_mul_rows_kernel(const __grid_constant__ Rows rows, const T* in, T* out, int64_t d, bool trigger_at_start) {
#ifdef __CUDACC__
  __shared__ typename Rows::Shared shared;
  if (trigger_at_start) device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  if (!trigger_at_start) device::pdl_trigger_secondary();
  const Visit visit = rows.visit(shared);
  const int64_t row_vecs = d / kVec, total = visit.rows * row_vecs;
  const bool narrow = total <= UINT32_MAX;
  for (int64_t v = int64_t{blockIdx.x} * kActThreads + threadIdx.x; v < total; v += int64_t{gridDim.x} * kActThreads) {
    const int64_t f = quotient(v, row_vecs, narrow), col = (v - f * row_vecs) * kVec;
    const RowAt r = rows.at(shared, f, visit.limit);
    if (!r.valid) continue;
    AlignedVector<T, kVec> gate, up;
    gate.load(in + r.in + col);
    up.load(in + r.in + d + col);
    const Gated<T, kVec> y = gated<Silu>(gate, up);
    y.store(reinterpret_cast<std::remove_cvref_t<decltype(y[0])>*>(out + r.out + col));
  }
#endif
}

// The computed rows' products quantized per group of kActGroupSize outputs: kLanes lanes per group, kPerLane
// vectors each (lane l holds vectors l, l + kLanes, ...), scales[row's offset + g * group_stride]. Every
// CTA takes the same number of turns (the group's votes and shuffles need whole warps).
template <typename Rows, typename T, int kVec, int kLanes, int kPerLane>
__global__ void __launch_bounds__(kActGroupThreads)
    silu_and_mul_group_quant_rows_kernel(const __grid_constant__ Rows rows, const T* in, uint8_t* q, float* scales, int64_t group_stride,
                                         int64_t d, float eps, bool trigger_at_start) {
#ifdef __CUDACC__
  static_assert(kLanes * kPerLane * kVec == kActGroupSize, "one group per kLanes lanes");
  constexpr int kGroupsPerCta = kActGroupThreads / kLanes;
  __shared__ typename Rows::Shared shared;
  if (trigger_at_start) device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  if (!trigger_at_start) device::pdl_trigger_secondary();
  const Visit visit = rows.visit(shared);
  const int64_t groups_per_row = d / kActGroupSize, total = visit.rows * groups_per_row;
  const bool narrow = total <= UINT32_MAX;
  const int lane = static_cast<int>(threadIdx.x % kLanes);
  for (int64_t first = int64_t{blockIdx.x} * kGroupsPerCta; first < total; first += int64_t{gridDim.x} * kGroupsPerCta) {
    const int64_t group = first + threadIdx.x / kLanes;
    bool valid = group < total;
    const int64_t f = valid ? quotient(group, groups_per_row, narrow) : 0, g = group - f * groups_per_row;
    RowAt r{false, 0, 0, 0};
    if (valid) r = rows.at(shared, f, visit.limit);
    valid = valid && r.valid;
    const int64_t col = g * kActGroupSize + lane * kVec;
    AlignedVector<T, kVec> gate[kPerLane], up[kPerLane];
    Gated<T, kVec> y[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      if (valid) {
        gate[j].load(in + r.in + col + j * kLanes * kVec);
        up[j].load(in + r.in + d + col + j * kLanes * kVec);
      }
    }
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) y[j] = gated<Silu>(gate[j], up[j]);
    // The row's scales as a row of their own: group g of 1 row of groups_per_row.
    const quant::GroupScales row_scales{scales + r.scale, 0, group_stride, false};
    quant::quantize_group<fp8_e4m3_t, kLanes, kPerLane, false>(y, valid, q + r.out + col, eps, row_scales, g, groups_per_row, groups_per_row);
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

// A computed row per CTA and turn: s = scale_for(amax of the row's products, kDefaultScaleEps), q = y / s,
// the row's scale = s. kRowRegVecs vectors of products per thread stay in registers (kFit); a wider row's
// remainder is computed again from its input (L2) for each pass.
template <typename Rows, typename T, int kVec, RowFit kFit>
__global__ void __launch_bounds__(kRowThreadsBound)
    silu_and_mul_token_quant_rows_kernel(const __grid_constant__ Rows rows, const T* in, uint8_t* q, float* scales, int64_t d,
                                         bool trigger_at_start) {
#ifdef __CUDACC__
  constexpr bool kWider = kFit == RowFit::kWider;
  __shared__ typename Rows::Shared shared;
  if (trigger_at_start) device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  if (!trigger_at_start) device::pdl_trigger_secondary();
  const Visit visit = rows.visit(shared);
  const int nvec = static_cast<int>(d / kVec), rank = threadIdx.x, size = blockDim.x;
  const auto held = [&](int k) { return kFit == RowFit::kExact || k * size + rank < nvec; };
  const device::norm::CtaGroup<false> cta;
  for (int64_t f = blockIdx.x; f < visit.rows; f += gridDim.x) {
    const RowAt r = rows.at(shared, f, visit.limit);  // the same for every thread: the CTA skips or computes the row
    if (!r.valid) continue;
    const T* src = in + r.in;
    uint8_t* dst = q + r.out;
    const auto product = [&](int i) {
      AlignedVector<T, kVec> gate, up;
      gate.load(src + i * kVec);
      up.load(src + d + i * kVec);
      return gated<Silu>(gate, up);
    };
    AlignedVector<T, kVec> gate[kRowRegVecs], up[kRowRegVecs];
#pragma unroll
    for (int k = 0; k < kRowRegVecs; ++k) {
      if (held(k)) {
        gate[k].load(src + (k * size + rank) * kVec);
        up[k].load(src + d + (k * size + rank) * kVec);
      } else {
        gate[k].fill(device::cast<T>(0.0f)), up[k].fill(device::cast<T>(0.0f));  // products of 0: no part of the amax
      }
    }
    Gated<T, kVec> y[kRowRegVecs];
#pragma unroll
    for (int k = 0; k < kRowRegVecs; ++k) y[k] = gated<Silu>(gate[k], up[k]);
    const auto fold = [&](auto op) {
      float acc = fold_gated<T, kVec>(y, op, 0.0f);
      for (int i = kRowRegVecs * size + rank; kWider && i < nvec; i += size) {
        const Gated<T, kVec> z[1] = {product(i)};
        acc = fold_gated<T, kVec>(z, op, acc);
      }
      return acc;
    };
    bool finite;
    const float amax = quant::dynamic_amax(fold, [&](float v) { return cta.reduce_max(v); }, [](bool b) { return b; }, finite);
    const quant::Divider s(quant::scale_for<fp8_e4m3_t>(amax, quant::kDefaultScaleEps), finite);
#pragma unroll
    for (int k = 0; k < kRowRegVecs; ++k)
      if (held(k)) quant::store_quantized<fp8_e4m3_t, false>(dst + (k * size + rank) * kVec, y[k], s);
    for (int i = kRowRegVecs * size + rank; kWider && i < nvec; i += size) quant::store_quantized<fp8_e4m3_t, false>(dst + i * kVec, product(i), s);
    if (rank == 0) scales[r.scale] = s.s;
  }
#endif
}

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only

// A persistent grid: enough CTAs for `items` (the capacity's) at `per_cta` each, at most as many as the GPU
// holds at once.
inline unsigned persistent_grid(int64_t items, int64_t per_cta, int threads, DLDevice device) {
  const host::RowPolicy policy = host::row_policy(device);
  const int64_t resident = int64_t{host::runtime::get_sm_count(device.device_id)} * (policy.threads_per_sm / threads);
  const int64_t needed = host::div_ceil(items, per_cta);
  return static_cast<unsigned>(needed < resident ? needed : resident);
}

template <typename T>
struct MoeActOps {
  // input [P, 2d] -> out [P, d] for the computed rows of the sorted layout.
  static void silu_and_mul_sorted(jitkern::TensorView input, jitkern::TensorView sorted_token_ids, jitkern::TensorView num_tokens_post_pad,
                                  int64_t num_ids, jitkern::TensorView out) {
    auto device = host::SymbolicDevice{};
    const Sorted s = sorted(input, sorted_token_ids, num_tokens_post_pad, num_ids, out, "out", host::DTypeList<T>{}, nullptr, device);
    elementwise(s.rows, s.op);
  }
  // ... -> output_q [P, d] (fp8 e4m3), output_s fp32 [P] (any stride): one dynamic scale per computed row.
  static void silu_and_mul_sorted_per_token_quant_fp8(jitkern::TensorView input, jitkern::TensorView sorted_token_ids,
                                                      jitkern::TensorView num_tokens_post_pad, int64_t num_ids, jitkern::TensorView output_q,
                                                      jitkern::TensorView output_s) {
    auto device = host::SymbolicDevice{};
    Sorted s = sorted(input, sorted_token_ids, num_tokens_post_pad, num_ids, output_q, "output_q", FP8{}, nullptr, device);
    auto stride = host::SymbolicSize{"output_s_stride"};
    host::TensorMatcher({s.op.capacity}).with_strides({stride}).with_dtype<float>().with_device(host::device_v<kDLCUDA>, device).verify(
        output_s, "output_s");
    s.rows.scale_stride = stride.has_value() ? stride.unwrap() : 0;
    token_quant(s.rows, s.op, static_cast<float*>(output_s.data_ptr()));
  }
  // ... -> output_q [P, d] (fp8 e4m3), output_s fp32 [P, d / 128] (any strides): a dynamic scale per group of
  // group_size (128) outputs of a computed row, max(amax, eps) / 448.
  static void silu_and_mul_sorted_per_token_group_quant_fp8(jitkern::TensorView input, jitkern::TensorView sorted_token_ids,
                                                            jitkern::TensorView num_tokens_post_pad, int64_t num_ids,
                                                            jitkern::TensorView output_q, jitkern::TensorView output_s, int64_t group_size,
                                                            double eps) {
    auto device = host::SymbolicDevice{};
    Sorted s = sorted(input, sorted_token_ids, num_tokens_post_pad, num_ids, output_q, "output_q", FP8{}, &group_size, device);
    auto row = host::SymbolicSize{"output_s_row_stride"}, group = host::SymbolicSize{"output_s_group_stride"};
    host::TensorMatcher({s.op.capacity, s.op.d / kActGroupSize}).with_strides({row, group}).with_dtype<float>().with_device(
        host::device_v<kDLCUDA>, device).verify(output_s, "output_s");
    s.rows.scale_stride = row.has_value() ? row.unwrap() : 0;
    group_quant(s.rows, s.op, static_cast<float*>(output_s.data_ptr()), group.has_value() ? group.unwrap() : 0, eps);
  }

  // input [E, M, 2d] -> out [E, M, d] for rows m < masked_m[e] of each expert e.
  static void silu_and_mul_masked(jitkern::TensorView input, jitkern::TensorView masked_m, jitkern::TensorView out) {
    auto device = host::SymbolicDevice{};
    const Masked m = masked(input, masked_m, out, "out", host::DTypeList<T>{}, nullptr, device);
    elementwise(m.rows, m.op);
  }
  // ... -> output_q [E, M, d] (fp8 e4m3), output_s fp32 [E, M] (any strides).
  static void silu_and_mul_masked_per_token_quant_fp8(jitkern::TensorView input, jitkern::TensorView masked_m, jitkern::TensorView output_q,
                                                      jitkern::TensorView output_s) {
    auto device = host::SymbolicDevice{};
    Masked m = masked(input, masked_m, output_q, "output_q", FP8{}, nullptr, device);
    auto se = host::SymbolicSize{"output_s_expert_stride"}, sm = host::SymbolicSize{"output_s_row_stride"};
    host::TensorMatcher({m.experts, m.m_max}).with_strides({se, sm}).with_dtype<float>().with_device(host::device_v<kDLCUDA>, device).verify(
        output_s, "output_s");
    m.rows.scale_expert = se.has_value() ? se.unwrap() : 0, m.rows.scale_row = sm.has_value() ? sm.unwrap() : 0;
    token_quant(m.rows, m.op, static_cast<float*>(output_s.data_ptr()));
  }
  // ... -> output_q [E, M, d] (fp8 e4m3), output_s fp32 [E, M, d / 128] (any strides: row-major, or
  // column-major per expert, an [E, d / 128, M] buffer transposed).
  static void silu_and_mul_masked_per_token_group_quant_fp8(jitkern::TensorView input, jitkern::TensorView masked_m,
                                                            jitkern::TensorView output_q, jitkern::TensorView output_s, int64_t group_size,
                                                            double eps) {
    auto device = host::SymbolicDevice{};
    Masked m = masked(input, masked_m, output_q, "output_q", FP8{}, &group_size, device);
    auto se = host::SymbolicSize{"output_s_expert_stride"}, sm = host::SymbolicSize{"output_s_row_stride"};
    auto sg = host::SymbolicSize{"output_s_group_stride"};
    host::TensorMatcher({m.experts, m.m_max, m.op.d / kActGroupSize}).with_strides({se, sm, sg}).with_dtype<float>().with_device(
        host::device_v<kDLCUDA>, device).verify(output_s, "output_s");
    m.rows.scale_expert = se.has_value() ? se.unwrap() : 0, m.rows.scale_row = sm.has_value() ? sm.unwrap() : 0;
    group_quant(m.rows, m.op, static_cast<float*>(output_s.data_ptr()), sg.has_value() ? sg.unwrap() : 0, eps);
  }

 private:
  using FP8 = host::DTypeList<uint8_t, fp8_e4m3_t>;

  // What every launch needs, whatever the layout.
  struct Operands {
    const T* in;
    void* out;
    int64_t capacity, d;
    int vec;  // elements per access: kVec16<T> where every pointer and stride allows, else 1
    DLDevice device;
  };
  struct Sorted {
    SortedRows rows;
    Operands op;
  };
  struct Masked {
    MaskedRows rows;
    Operands op;
    int64_t experts, m_max;
  };

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
    if (rows > 1) {
      RuntimeCheck(is >= W.unwrap(), "input rows overlap: row stride ", is, " is smaller than the row width ", W.unwrap());
      RuntimeCheck(os >= d, out_name, " rows overlap: row stride ", os, " is smaller than the row width ", d);
    }
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
    if (m_max > 1) {
      RuntimeCheck(in_m >= W.unwrap(), "input rows overlap: row stride ", in_m, " is smaller than the row width ", W.unwrap());
      RuntimeCheck(out_m >= d, out_name, " rows overlap: row stride ", out_m, " is smaller than the row width ", d);
    }
    if (experts > 1) {
      RuntimeCheck(in_e >= m_max * std::max(in_m, W.unwrap()), "input experts overlap: expert stride ", in_e, " is smaller than ", m_max,
                   " rows");
      RuntimeCheck(out_e >= m_max * std::max(out_m, d), out_name, " experts overlap: expert stride ", out_e, " is smaller than ", m_max, " rows");
    }
    const int out_bytes = (out.dtype().bits + 7) / 8;
    const int vec = host::vector_width(device::kVec16<T>, d, {static_cast<const T*>(input.data_ptr()), {out.data_ptr(), out_bytes}},
                                       {in_e, in_m, out_e, out_m});
    return {{static_cast<const int32_t*>(masked_m.data_ptr()), static_cast<int>(experts), static_cast<int32_t>(m_max), in_e, in_m, out_e, out_m, 0, 0},
            {static_cast<const T*>(input.data_ptr()), out.data_ptr(), experts * m_max, d, vec, device.unwrap()},
            experts,
            m_max};
  }

  template <typename Rows>
  static void elementwise(const Rows& rows, const Operands& op) {
    using namespace host;
    if (op.capacity * op.d == 0) return;
    const auto launch = [&](auto vec_tag) {
      constexpr int kVec = decltype(vec_tag)::value;
      const unsigned grid = persistent_grid(op.capacity * (op.d / kVec), kActThreads, kActThreads, op.device);
      LaunchKernel(grid, kActThreads, op.device)
          .enable_pdl()(silu_and_mul_rows_kernel<Rows, T, kVec>, rows, op.in, static_cast<T*>(op.out), op.d, host::pdl_early_trigger(grid));
    };
    if (op.vec == device::kVec16<T>) {
      launch(std::integral_constant<int, device::kVec16<T>>{});
    } else {
      launch(std::integral_constant<int, 1>{});
    }
  }

  template <typename Rows>
  static void group_quant(const Rows& rows, const Operands& op, float* scales, int64_t group_stride, double eps) {
    using namespace host;
    RuntimeCheck(std::isfinite(eps) && eps > 0.0, "eps must be a finite positive number, got ", eps);
    if (op.capacity * op.d == 0) return;
    const auto launch = [&](auto vec_tag, auto lanes_tag) {
      constexpr int kVec = decltype(vec_tag)::value, kLanes = decltype(lanes_tag)::value, kPerLane = kActGroupSize / kLanes / kVec;
      const unsigned grid = persistent_grid(op.capacity * (op.d / kActGroupSize), kActGroupThreads / kLanes, kActGroupThreads, op.device);
      LaunchKernel(grid, kActGroupThreads, op.device)
          .enable_pdl()(silu_and_mul_group_quant_rows_kernel<Rows, T, kVec, kLanes, kPerLane>, rows, op.in, static_cast<uint8_t*>(op.out), scales,
                        group_stride, op.d, static_cast<float>(eps), host::pdl_early_trigger(grid));
    };
    constexpr int kVec = device::kVec16<T>;
    if (op.vec == kVec) {
      launch(std::integral_constant<int, kVec>{}, std::integral_constant<int, kActGroupSize / kVec / 2>{});  // two vectors per lane
    } else {  // unaligned rows: a warp per group, element by element
      launch(std::integral_constant<int, 1>{}, std::integral_constant<int, 32>{});
    }
  }

  template <typename Rows>
  static void token_quant(const Rows& rows, const Operands& op, float* scales) {
    using namespace host;
    if (op.capacity * op.d == 0) return;
    RuntimeCheck(op.d <= INT32_MAX, "d must be below 2^31, got ", op.d);
    const auto launch = [&](auto vec_tag) {
      constexpr int kVec = decltype(vec_tag)::value;
      const int64_t nvec = op.d / kVec;
      const int threads = host::norm::wide_threads(nvec, kRowRegVecs, row_policy(op.device).row_threads);
      const unsigned grid = persistent_grid(op.capacity, 1, threads, op.device);
      LaunchKernel run(grid, threads, op.device);
      run.enable_pdl();
      const bool early = host::pdl_early_trigger(grid);
      auto* q = static_cast<uint8_t*>(op.out);
      const RowFit fit = host::norm::row_fit(nvec, kRowRegVecs, threads);
      if (fit == RowFit::kExact) {
        run(silu_and_mul_token_quant_rows_kernel<Rows, T, kVec, RowFit::kExact>, rows, op.in, q, scales, op.d, early);
      } else if (fit == RowFit::kFits) {
        run(silu_and_mul_token_quant_rows_kernel<Rows, T, kVec, RowFit::kFits>, rows, op.in, q, scales, op.d, early);
      } else {
        run(silu_and_mul_token_quant_rows_kernel<Rows, T, kVec, RowFit::kWider>, rows, op.in, q, scales, op.d, early);
      }
    };
    if (op.vec == device::kVec16<T>) {
      launch(std::integral_constant<int, device::kVec16<T>>{});
    } else {
      launch(std::integral_constant<int, 1>{});
    }
  }
};
#endif  // __CUDACC_RTC__

}  // namespace jitkern_moe_act
