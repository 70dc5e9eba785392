// The gated activation family: out = act(x[:, :d]) * x[:, d:] for SiLU, GeLU (erf) and GeLU (tanh
// approximation), fp16/bf16/fp32 with fp32 math (SiLU for 16-bit types through the fast exponential
// and division) and the product rounded to the input's type, any d, strided rows; and SiLU-and-mul written straight to fp8 e4m3, with one static scale or with dynamic
// per-token-group scales (groups of 128) in per_token_group_quant_8bit's layouts. The fused forms
// round the product to T first and quantize it with quant's helpers (include/jitkern/impl/quant.cuh),
// so they are bit-equal to silu_and_mul followed by per_tensor_quant_fp8 (static) or
// per_token_group_quant_8bit (dynamic).
#pragma once

#include <jitkern/impl/act.cuh>
#include <jitkern/impl/quant.cuh>
#include <jitkern/impl/rows.cuh>
#include <jitkern/policy.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/type.cuh>
#include <jitkern/utils.cuh>
#include <jitkern/vec.cuh>
#include <jitkern/warp.cuh>

#include <cmath>
#include <cstdint>

namespace jitkern_act {

using device::AlignedVector;
using device::act::Gated;
using device::act::Gelu;
using device::act::GeluTanh;
using device::act::gated;
using device::act::Silu;
using device::act::kActGroupSize;
using device::act::kActGroupThreads;
using device::act::kActThreads;
namespace quant = device::quant;

// Elementwise kernels: one vector of the output per thread (a gate and an up load in flight), CTAs of
// kActThreads, one pass over the tensor. Against two vectors per thread and a grid-stride loop: 1.36
// against 2.0 us at T = 1, 30.4 against 31.2-35.7 at T = 1024, level from T = 4096 (d = 14336;
// docs/benchmarks/design.md).
// The fused group quantization: one group of kActGroupSize outputs per kLanes lanes, one or two
// vectors per lane (one while that takes at most kActGroupDecodeWaves CTAs per SM, or where two would
// fill most of one wave), CTAs of kActGroupThreads.
constexpr int kActGroupDecodeWaves = 4;
// Two vectors per lane would take more than the first and at most the second of these CTAs per SM (most
// of one wave at 10 resident): one vector per lane instead.
constexpr int kActGroupMostOfAWave[2] = {6, 11};

// The rows of an act-and-mul problem: input [rows, 2d] at in (row stride in elements), output [rows, d],
// seen as vectors of kVec elements (d a multiple of kVec).
template <typename T>
struct GatedInput {
  const T* in;
  int64_t in_stride, d, row_vecs, total_vecs;
};

// The elementwise kernels' outputs: act-and-mul's T rows, or fp8 bytes divided by a static scale.
template <typename T>
struct StoreGated {
  T* out;
  int64_t out_stride;
  struct Ready {};
  __device__ __forceinline__ Ready ready() const { return {}; }
  template <typename V, int kN>  // gated's result
  __device__ __forceinline__ void store(const Ready&, const AlignedVector<V, kN>& y, int64_t row, int64_t col) const {
    y.store(reinterpret_cast<V*>(out + row * out_stride + col));
  }
};

struct StoreStaticFp8 {
  uint8_t* q;
  int64_t q_stride;
  const float* scale;  // read after the kernel's PDL wait: a previous kernel may have written it
  __device__ __forceinline__ quant::Divider ready() const { return quant::Divider(*scale); }
  template <typename V, int kN>  // gated's result
  __device__ __forceinline__ void store(const quant::Divider& s, const AlignedVector<V, kN>& y, int64_t row, int64_t col) const {
    quant::store_quantized<fp8_e4m3_t>(q + row * q_stride + col, y, s);
  }
};

// Vector v of the output (row-major over [rows, d / kVec]) per thread, kActThreads consecutive ones per
// CTA (coalesced). Addresses are computed before the PDL wait.
template <typename Act, typename T, int kVec, typename Out>
__global__ void __launch_bounds__(kActThreads) act_and_mul_kernel(const GatedInput<T> p, const Out out, bool trigger_at_start) {
#ifdef __CUDACC__
  if (trigger_at_start) device::pdl_trigger_secondary();
  const int64_t v = int64_t{blockIdx.x} * kActThreads + threadIdx.x;
  const int64_t row = p.total_vecs <= UINT32_MAX ? int64_t{static_cast<uint32_t>(v) / static_cast<uint32_t>(p.row_vecs)} : v / p.row_vecs;
  const int64_t col = (v - row * p.row_vecs) * kVec;
  const T* at = p.in + row * p.in_stride + col;
  device::pdl_wait_primary();
  if (!trigger_at_start) device::pdl_trigger_secondary();
  if (v >= p.total_vecs) return;
  AlignedVector<T, kVec> gate, up;
  gate.load(at);
  up.load(at + p.d);
  out.store(out.ready(), gated<Act>(gate, up), row, col);
#endif
}

// SiLU-and-mul quantized per group of kActGroupSize outputs of a row: kLanes lanes per group, kPerLane
// vectors each (lane l holds vectors l, l + kLanes, ...). The scale comes from the group's amax and each
// code from its own value, so they are per_token_group_quant_8bit's bits whatever the lanes hold.
template <typename T, int kVec, int kLanes, int kPerLane, bool kUE8M0>
__global__ void __launch_bounds__(kActGroupThreads)
    silu_and_mul_group_quant_kernel(const GatedInput<T> p, uint8_t* q, int64_t q_stride, quant::GroupScales scales, int64_t groups_per_row,
                                    int64_t total_groups, float eps, bool trigger_at_start) {
#ifdef __CUDACC__
  static_assert(kLanes * kPerLane * kVec == kActGroupSize, "one group per kLanes lanes");
  if (trigger_at_start) device::pdl_trigger_secondary();
  const int lane = static_cast<int>(threadIdx.x % kLanes);
  const int64_t group = int64_t{blockIdx.x} * (kActGroupThreads / kLanes) + threadIdx.x / kLanes;
  const bool valid = group < total_groups;
  const int64_t row = quant::group_row(group, groups_per_row, total_groups), g = group - row * groups_per_row;
  const int64_t col = g * kActGroupSize + lane * kVec;
  const T* in = p.in + row * p.in_stride + col;
  uint8_t* out = q + row * q_stride + col;
  device::pdl_wait_primary();
  if (!trigger_at_start) device::pdl_trigger_secondary();
  AlignedVector<T, kVec> gate[kPerLane], up[kPerLane];
  Gated<T, kVec> y[kPerLane];  // the products as silu_and_mul rounds them
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    if (valid) {
      gate[j].load(in + j * kLanes * kVec);
      up[j].load(in + p.d + j * kLanes * kVec);
    }
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) y[j] = gated<Silu>(gate[j], up[j]);
  quant::quantize_group<fp8_e4m3_t, kLanes, kPerLane, kUE8M0>(y, valid, out, eps, scales, group, groups_per_row, total_groups);
#endif
}

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
inline unsigned act_grid(int64_t blocks) {
  host::RuntimeCheck(blocks <= 0x7fffffff, "the input is too large for one launch (", blocks, " blocks)");
  return static_cast<unsigned>(blocks);
}

template <typename T>
struct ActOps {
  // out [N, d] = act(input[:, :d]) * input[:, d:], input [N, 2d]; rows may be strided.
  static void silu_and_mul(jitkern::TensorView input, jitkern::TensorView out) { act_and_mul<Silu>(input, out); }
  static void gelu_and_mul(jitkern::TensorView input, jitkern::TensorView out) { act_and_mul<Gelu>(input, out); }
  static void gelu_tanh_and_mul(jitkern::TensorView input, jitkern::TensorView out) { act_and_mul<GeluTanh>(input, out); }

  // output_q [N, d] (fp8 e4m3) = fp8(silu_and_mul(input) / scale), scale: fp32 [1].
  static void silu_and_mul_quant(jitkern::TensorView input, jitkern::TensorView output_q, jitkern::TensorView scale) {
    using namespace host;
    auto device = SymbolicDevice{};
    const Operands ops = operands(input, output_q, "output_q", host::DTypeList<uint8_t, fp8_e4m3_t>{}, device);
    TensorMatcher({1}).with_dtype<float>().with_device(device_v<kDLCUDA>, device).verify(scale, "scale");
    const StoreStaticFp8 store{static_cast<uint8_t*>(output_q.data_ptr()), ops.out_stride, static_cast<const float*>(scale.data_ptr())};
    launch_elementwise<Silu>(ops, store, ops.vector_width(device::kVec16<T>));
  }

  // output_q [N, d] (fp8 e4m3) = silu_and_mul(input) quantized per group of group_size (128) outputs of
  // a row, scale = max(amax, eps) / 448: output_s fp32 [N, d / 128] (any strides: row-major,
  // column-major, TMA-aligned column-major) or int32 [N, ceil(d / 128 / 4)] of packed UE8M0 exponents.
  static void silu_and_mul_group_quant(jitkern::TensorView input, jitkern::TensorView output_q, jitkern::TensorView output_s,
                                       int64_t group_size, double eps) {
    using namespace host;
    RuntimeCheck(group_size == kActGroupSize, "group_size must be ", kActGroupSize, ", got ", group_size);
    RuntimeCheck(std::isfinite(eps) && eps > 0.0, "eps must be a finite positive number, got ", eps);
    auto device = SymbolicDevice{};
    const Operands ops = operands(input, output_q, "output_q", host::DTypeList<uint8_t, fp8_e4m3_t>{}, device);
    RuntimeCheck(ops.width % kActGroupSize == 0, "d, the last dimension of output_q (half of input's), must be a multiple of group_size (",
                 kActGroupSize, "), got ", ops.width);
    const int64_t groups = ops.width / kActGroupSize;
    const host::quant::CheckedGroupScales checked = host::quant::verify_group_scales(output_s, ops.rows, groups, device);
    const quant::GroupScales scales = checked.scales;
    const bool ue8m0 = checked.ue8m0;
    if (ops.rows * groups == 0) return;
    const int64_t total_groups = ops.rows * groups;
    auto* q = static_cast<uint8_t*>(output_q.data_ptr());
    const auto launch = [&](auto vec_tag, auto lanes_tag, auto per_lane_tag) {
      constexpr int kVec = decltype(vec_tag)::value, kLanes = decltype(lanes_tag)::value, kPerLane = decltype(per_lane_tag)::value;
      const unsigned grid = act_grid(div_ceil(total_groups, kActGroupThreads / kLanes));
      const GatedInput<T> p{ops.in, ops.in_stride, ops.width, 0, 0};
      LaunchKernel run(grid, kActGroupThreads, ops.device);
      run.enable_pdl();
      const bool early = host::pdl_early_trigger(grid);
      const float e = static_cast<float>(eps);
      if (ue8m0) {
        run(silu_and_mul_group_quant_kernel<T, kVec, kLanes, kPerLane, true>, p, q, ops.out_stride, scales, groups, total_groups, e, early);
      } else {
        run(silu_and_mul_group_quant_kernel<T, kVec, kLanes, kPerLane, false>, p, q, ops.out_stride, scales, groups, total_groups, e, early);
      }
    };
    constexpr int kVec = device::kVec16<T>;
    if (ops.vector_width(kVec) == kVec) {
      // Decode sizes: a vector per lane, so more SMs share the loads (T = 1: 1.50 against 2.14 us);
      // beyond, two per lane, so fewer lanes reduce each group (T = 1024: 27.9 against 32.2 us), but
      // where two per lane would fill most of one wave (T = 128-192 at d = 14336: 3.50-4.08 against
      // 4.07-4.35 us; docs/benchmarks/design.md).
      const int sms = runtime::get_sm_count(ops.device.device_id);
      const int64_t one_per_lane = div_ceil(total_groups, kActGroupThreads / (kActGroupSize / kVec));
      const int64_t two_per_lane = div_ceil(total_groups, kActGroupThreads / (kActGroupSize / kVec / 2));
      if (one_per_lane <= int64_t{kActGroupDecodeWaves} * sms ||
          (two_per_lane > int64_t{kActGroupMostOfAWave[0]} * sms && two_per_lane <= int64_t{kActGroupMostOfAWave[1]} * sms)) {
        launch(std::integral_constant<int, kVec>{}, std::integral_constant<int, kActGroupSize / kVec>{}, std::integral_constant<int, 1>{});
      } else {
        launch(std::integral_constant<int, kVec>{}, std::integral_constant<int, kActGroupSize / kVec / 2>{}, std::integral_constant<int, 2>{});
      }
    } else {  // unaligned rows: a warp per group, element by element
      launch(std::integral_constant<int, 1>{}, std::integral_constant<int, 32>{}, std::integral_constant<int, kActGroupSize / 32>{});
    }
  }

 private:
  using Operands = host::RowOperands<T>;  // width: d, the output's; in: the [rows, 2d] input

  // input [N, 2d] of T, out [N, d] of one of OutTypes; both with strided rows.
  template <typename OutTypes>
  static Operands operands(jitkern::TensorView input, jitkern::TensorView out, const char* out_name, OutTypes out_types,
                           host::SymbolicDevice& device) {
    using namespace host;
    auto N = SymbolicSize{"num_tokens"}, W = SymbolicSize{"input_width"}, D = SymbolicSize{"d"};
    auto in_stride = SymbolicSize{"input_row_stride"}, out_stride = SymbolicSize{"out_row_stride"};
    TensorMatcher({N, W}).with_strides({in_stride, 1}).with_dtype(dtype_v<T>).with_device(device_v<kDLCUDA>, device).verify(input, "input");
    RuntimeCheck(W.unwrap() % 2 == 0, "the last dimension of input must be even (2 * d), got ", W.unwrap());
    D.set_value(W.unwrap() / 2);
    TensorMatcher({N, D}).with_strides({out_stride, 1}).with_dtype(out_types).with_device(device_v<kDLCUDA>, device).verify(out, out_name);
    const int64_t rows = N.unwrap();
    const int64_t is = in_stride.has_value() ? in_stride.unwrap() : 0, os = out_stride.has_value() ? out_stride.unwrap() : 0;
    check_rows_disjoint(rows, D.unwrap(), os, out_name);  // input is only read: its rows may overlap (a broadcast)
    return {static_cast<const T*>(input.data_ptr()), out.data_ptr(), (out.dtype().bits + 7) / 8, rows, D.unwrap(), is, os, device.unwrap()};
  }

  template <typename Act>
  static void act_and_mul(jitkern::TensorView input, jitkern::TensorView out) {
    auto device = host::SymbolicDevice{};
    const Operands ops = operands(input, out, "out", host::DTypeList<T>{}, device);
    const StoreGated<T> store{static_cast<T*>(out.data_ptr()), ops.out_stride};
    launch_elementwise<Act>(ops, store, ops.vector_width(device::kVec16<T>));
  }

  template <typename Act, typename Out>
  static void launch_elementwise(const Operands& ops, const Out& out, int vec) {
    using namespace host;
    if (ops.rows * ops.width == 0) return;
    const auto launch = [&](auto vec_tag) {
      constexpr int kVec = decltype(vec_tag)::value;
      const GatedInput<T> p{ops.in, ops.in_stride, ops.width, ops.width / kVec, ops.rows * (ops.width / kVec)};
      const int64_t grid = div_ceil(p.total_vecs, int64_t{kActThreads});
      LaunchKernel(act_grid(grid), kActThreads, ops.device)
          .enable_pdl()(act_and_mul_kernel<Act, T, kVec, Out>, p, out, host::pdl_early_trigger(grid));
    };
    if (vec == device::kVec16<T>) {
      launch(std::integral_constant<int, device::kVec16<T>>{});
    } else {
      launch(std::integral_constant<int, 1>{});
    }
  }
};
#endif  // __CUDACC_RTC__

}  // namespace jitkern_act
