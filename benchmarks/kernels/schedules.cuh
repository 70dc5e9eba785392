// Launch schedules of the norm, quantization (per group, per token), KV-store and MLA concatenation kernels
// side by side (bench_schedules.py): the product's building blocks and kernels (rmsnorm_row, per_token_group_quant's kernels,
// per_token_kernel, concat_rows_kernel) under other CTA shapes, row layouts, memory accesses and PDL trigger
// placements, to find which schedule a shape wants before the launch rules change.
//   trigger: 0 at kernel start, 1 right after the PDL wait, 2 after the last store.
#pragma once

#include <kv_rows.cuh>  // csrc/: the product's concatenation and per-token quantization kernels
#include <quant.cuh>
#include <jitkern/impl/kv_cache.cuh>
#include <jitkern/impl/norm_launch.cuh>
#include <jitkern/impl/quant.cuh>
#include <jitkern/runtime.cuh>
#ifndef __CUDACC_RTC__
#include <jitkern/tensor.h>
#endif
#include <jitkern/utils.cuh>
#include <jitkern/utils.h>

#include <algorithm>
#include <cstdint>

// A named namespace: a host_without_nvcc module launches its kernels by their symbols, which an anonymous
// namespace would keep out of its device image.
namespace bench_schedules {

using namespace device::norm;
using device::AlignedVector;
using bf16 = bf16_t;
constexpr int kV = 8;  // bf16 elements of a 16-byte vector

#ifndef __CUDACC_RTC__
// f(std::integral_constant<int, k>{}) for the k of kValues equal to v (nothing where none is).
template <int... kValues, typename F>
void with_constant(int64_t v, F&& f) {
  ((v == kValues ? f(std::integral_constant<int, kValues>{}) : void()), ...);
}
#endif  // __CUDACC_RTC__

template <int kTrigger>
__device__ __forceinline__ void wait_and_trigger() {
  if constexpr (kTrigger == 0) device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  if constexpr (kTrigger == 1) device::pdl_trigger_secondary();
}

// One row per CTA, kRegVecs vectors a thread, the row held exactly.
template <int kRegVecs, int kTrigger, RowOrder kOrder>
__global__ void __launch_bounds__(1024) wide_schedule_kernel(const __grid_constant__ NormParams<bf16> p) {
#ifdef __CUDACC__
  const RowPointers<bf16> row = locate_row<bf16, kOrder>(p, static_cast<int32_t>(blockIdx.x));
  const auto epi = StoreOutput<bf16>{}.template row<bf16, kV>(row, blockIdx.x);
  wait_and_trigger<kTrigger>();
  rmsnorm_row<bf16, kV, kRegVecs, false, RowFit::kExact>(epi, row.in, nullptr, row.weight, p.hidden, p.eps, CtaGroup<true>{});
  if constexpr (kTrigger == 2) device::pdl_trigger_secondary();
#endif
}

// The same with the row's pointers as the only parameters (the reference's parameter block is 48 bytes,
// NormParams over 200).
template <int kRegVecs, int kTrigger>
__global__ void __launch_bounds__(1024) slim_schedule_kernel(const bf16* in, const bf16* weight, bf16* out, int64_t hidden, float eps) {
#ifdef __CUDACC__
  const int64_t row = blockIdx.x;
  const auto epi = StoreOutput<bf16>{}.template row<bf16, kV>(RowPointers<bf16>{out + row * hidden, nullptr, nullptr, nullptr}, blockIdx.x);
  wait_and_trigger<kTrigger>();
  rmsnorm_row<bf16, kV, kRegVecs, false, RowFit::kExact>(epi, in + row * hidden, nullptr, weight, hidden, eps, CtaGroup<true>{});
  if constexpr (kTrigger == 2) device::pdl_trigger_secondary();
#endif
}

#ifndef __CUDACC_RTC__
// rmsnorm of x [N, H] (bf16, contiguous, H a multiple of 256 * reg_vecs... held exactly) into out.
void rmsnorm_schedule(jitkern::TensorView x, jitkern::TensorView w, jitkern::TensorView out, int64_t reg_vecs, int64_t trigger,
                      int64_t token_rows) {
  using namespace host;
  const host::norm::TokenRows<bf16> rows(x, w, &out, nullptr, 1e-6);
  NormParams<bf16> p = rows.params;
  p.problem[1] = p.problem[0], p.problem[1].heads = 0;
  p.rows0 = p.total_rows = static_cast<int32_t>(rows.tokens);
  p.heads_per_token = 1;
  const int64_t nvec = p.hidden / kV;
  RuntimeCheck(nvec % (32 * reg_vecs) == 0 && nvec / reg_vecs <= 1024, "rmsnorm_schedule: the row must fill whole warps exactly");
  LaunchKernel launch(static_cast<unsigned>(rows.tokens), static_cast<unsigned>(nvec / reg_vecs), rows.device);
  launch.enable_pdl();
  const auto by_order = [&](auto r, auto t) {
    constexpr int kR = decltype(r)::value, kT = decltype(t)::value;
    if (token_rows == 2) {  // contiguous rows, the slim kernel
      launch(slim_schedule_kernel<kR, kT>, static_cast<const bf16*>(x.data_ptr()), static_cast<const bf16*>(w.data_ptr()),
             static_cast<bf16*>(out.data_ptr()), p.hidden, p.eps);
    } else if (token_rows) {
      launch(wide_schedule_kernel<kR, kT, RowOrder::kTokenRows>, p);
    } else {
      launch(wide_schedule_kernel<kR, kT, RowOrder::kProblemMajor>, p);
    }
  };
  with_constant<1, 2, 4>(reg_vecs, [&](auto r) { with_constant<0, 1, 2>(trigger, [&](auto t) { by_order(r, t); }); });
}
#endif  // __CUDACC_RTC__

// One row per CTA, the row's width a compile-time constant (kHidden bf16, kHidden / 8 / kRegVecs threads,
// the row held exactly; the product's norm_static_kernel at kRegVecs = kNormWideRegVecs), the row's
// pointers as the only parameters.
template <int kHidden, int kRegVecs, int kTrigger>
__global__ void __launch_bounds__(kHidden / kV / kRegVecs) static_schedule_kernel(const bf16* in, const bf16* weight, bf16* out,
                                                                                   int64_t in_stride, int64_t out_stride, float eps) {
#ifdef __CUDACC__
  const auto epi = StoreOutput<bf16>::Row<bf16, kV>{out + blockIdx.x * out_stride};
  wait_and_trigger<kTrigger>();
  rmsnorm_row<bf16, kV, kRegVecs, false, RowFit::kExact>(epi, in + blockIdx.x * in_stride, nullptr, weight, kHidden, eps,
                                                         FixedCtaGroup<kHidden / kV / kRegVecs>{});
  if constexpr (kTrigger == 2) device::pdl_trigger_secondary();
#endif
}

#ifndef __CUDACC_RTC__
// rmsnorm of x [N, H] (bf16, rows contiguous, H 2048 / 4096 / 8192) into out, the static kernel.
void rmsnorm_static(jitkern::TensorView x, jitkern::TensorView w, jitkern::TensorView out, int64_t reg_vecs, int64_t trigger) {
  using namespace host;
  const host::norm::TokenRows<bf16> rows(x, w, &out, nullptr, 1e-6);
  const int64_t hidden = rows.params.hidden;
  RuntimeCheck((hidden == 2048 || hidden == 4096 || hidden == 8192) && (reg_vecs == 1 || reg_vecs == 2 || reg_vecs == 4) &&
                   (trigger == 0 || trigger == 2),
               "rmsnorm_static: hidden 2048 / 4096 / 8192, reg_vecs 1 / 2 / 4, trigger 0 / 2");
  RuntimeCheck(hidden / kV / reg_vecs <= 1024, "rmsnorm_static: at most 1024 threads");
  const auto& q = rows.params.problem[0];
  const auto go = [&](auto h, auto r, auto t) {
    constexpr int kH = decltype(h)::value, kR = decltype(r)::value, kT = decltype(t)::value;
    if constexpr (kH / kV / kR <= 1024)
      LaunchKernel(static_cast<unsigned>(rows.tokens), kH / kV / kR, rows.device)
          .enable_pdl()(static_schedule_kernel<kH, kR, kT>, q.in, q.weight, q.out, q.in_token, q.out_token, rows.params.eps);
  };
  with_constant<2048, 4096, 8192>(hidden, [&](auto h) {
    with_constant<1, 2, 4>(reg_vecs, [&](auto r) { with_constant<0, 2>(trigger, [&](auto t) { go(h, r, t); }); });
  });
}
#endif  // __CUDACC_RTC__

// store_cache of k, v [N, kRowBytes] (contiguous) into k_cache, v_cache [slots, kRowBytes] at loc[i] (int64):
// a thread per 16-byte vector of each row; trigger 0 at start, 1 after the wait, 3 after the loads (before
// the stores), 2 after the stores. kLayout: the slot's row through the product's CacheLayout (bounds check,
// the page divisor), else slot * row bytes.
template <int kRowBytes, int kTrigger, bool kLayout>
__global__ void __launch_bounds__(256) store_schedule_kernel(const char* k, const char* v, device::kv_cache::CacheLayout kc,
                                                             device::kv_cache::CacheLayout vc, const int64_t* loc, int64_t rows) {
#ifdef __CUDACC__
  constexpr int kLanes = kRowBytes / 16;
  const int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t r = t / kLanes;
  const int lane = static_cast<int>(t % kLanes);
  if (r >= rows) return;
  if constexpr (kTrigger == 0) device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  if constexpr (kTrigger == 1) device::pdl_trigger_secondary();
  const int64_t slot = loc[r];
  const int4 a = reinterpret_cast<const int4*>(k + r * kRowBytes)[lane];
  const int4 b = reinterpret_cast<const int4*>(v + r * kRowBytes)[lane];
  if constexpr (kTrigger == 3) device::pdl_trigger_secondary();
  if constexpr (kLayout) {
    if (!kc.holds(slot)) return;
    reinterpret_cast<int4*>(kc.row(slot))[lane] = a;
    reinterpret_cast<int4*>(vc.row(slot))[lane] = b;
  } else {
    reinterpret_cast<int4*>(kc.base + slot * kRowBytes)[lane] = a;
    reinterpret_cast<int4*>(vc.base + slot * kRowBytes)[lane] = b;
  }
  if constexpr (kTrigger == 2) device::pdl_trigger_secondary();
#endif
}

#ifndef __CUDACC_RTC__
// k, v [N, 8, 128] bf16 into k_cache, v_cache [slots, 8, 128] at loc (int64 [N]); CTAs as the product's rule.
void store_schedule(jitkern::TensorView k, jitkern::TensorView v, jitkern::TensorView kc, jitkern::TensorView vc, jitkern::TensorView loc,
                    int64_t trigger, int64_t layout) {
  using namespace host;
  constexpr int kRowBytes = 8 * 128 * 2;
  RuntimeCheck(k.size(1) * k.size(2) * 2 == kRowBytes && is_type<int64_t>(loc.dtype()), "store_schedule: rows of 8 x 128 bf16, int64 loc");
  const int64_t rows = k.size(0), threads = rows * (kRowBytes / 16), warps = div_ceil(threads, 32);
  const int64_t sms = runtime::get_sm_count(k.device().device_id);
  int64_t cta = 256;
  for (int64_t w = 1; w * 32 < 256; w *= 2)
    if (warps <= sms * w) {
      cta = w * 32;
      break;
    }
  const auto layout_of = [&](jitkern::TensorView c) {
    return host::kv_cache::cache_layout(c, 8 * 128, k.device().device_id, "cache");
  };
  const auto kl = layout_of(kc), vl = layout_of(vc);
  LaunchKernel launch(static_cast<unsigned>(div_ceil(threads, cta)), static_cast<unsigned>(cta), k.device());
  launch.enable_pdl();
  const auto go = [&](auto t, auto l) {
    constexpr int kT = decltype(t)::value;
    constexpr bool kL = decltype(l)::value != 0;
    launch(store_schedule_kernel<kRowBytes, kT, kL>, static_cast<const char*>(k.data_ptr()), static_cast<const char*>(v.data_ptr()), kl, vl,
           static_cast<const int64_t*>(loc.data_ptr()), rows);
  };
  with_constant<0, 1, 2, 3>(trigger, [&](auto t) { with_constant<0, 1>(layout, [&](auto l) { go(t, l); }); });
}
#endif  // __CUDACC_RTC__

// qknorm rows (head_dim 128, 16 lanes a row) in token-major order (a token's q heads, then its k heads),
// a 16-lane group taking kRows rows a pass (the pass's k-th rows contiguous across the CTA's groups), with
// kAccess 0: generic loads and stores (the pointers laundered so that nvcc cannot infer their space),
// 1: ld.global / st.global, 2: as 1 with the rows' loads L1::no_allocate and their stores .cs
// (streaming); persistent: the CTAs loop over the passes (grid-stride, as many CTAs as the SMs hold),
// else one pass a CTA. The product's arithmetic (VecMath, WarpGroup's reduction), so the same bits.
struct QkRows {
  bf16* q;
  bf16* k;
  const bf16* qw;
  const bf16* kw;
  int64_t q_stride, k_stride;  // elements from one token to the next
  uint32_t q_heads, heads, rows;
  float eps;
};

template <int kAccess>
__device__ __forceinline__ void qk_load(AlignedVector<bf16, kV>& x, const bf16* p) {
#ifdef __CUDACC__
  if constexpr (kAccess == 0) {
    asm("" : "+l"(p));  // opaque to nvcc: a generic load
    x.load(p);
  } else if constexpr (kAccess == 1) {
    x.load_global(p);
  } else {
    uint32_t w[4];
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "l"(__cvta_generic_to_global(p)));
    __builtin_memcpy(&x, w, sizeof(w));
  }
#endif
}

template <int kAccess>
__device__ __forceinline__ void qk_store(const AlignedVector<bf16, kV>& y, bf16* p) {
#ifdef __CUDACC__
  if constexpr (kAccess == 0) {
    asm("" : "+l"(p));
    y.store(p);
  } else if constexpr (kAccess == 1) {
    y.store_global(p);
  } else {
    uint32_t w[4];
    __builtin_memcpy(w, &y, sizeof(w));
    asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(p)), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
  }
#endif
}

template <int kRows, int kAccess, bool kPersistent, int kTrigger>
__global__ void __launch_bounds__(256) qknorm_access_kernel(const __grid_constant__ QkRows p) {
#ifdef __CUDACC__
  constexpr int kWidth = 16;
  using M = VecMath<bf16, kV>;
  const int lane = static_cast<int>(threadIdx.x % kWidth);
  const uint32_t groups = blockDim.x / kWidth, group = threadIdx.x / kWidth, per_pass = groups * kRows;
  const uint32_t passes = (p.rows + per_pass - 1) / per_pass;
  const float inv_hidden = 1.0f / 128.0f;
  wait_and_trigger<kTrigger>();
  for (uint32_t b = blockIdx.x; b < passes; b += kPersistent ? gridDim.x : passes) {
    bf16* row[kRows];
    const bf16* w[kRows];
    bool valid[kRows];
    AlignedVector<bf16, kV> x[kRows], wv[kRows];
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      const uint32_t r = b * per_pass + k * groups + group;
      valid[k] = r < p.rows;
      const uint32_t rr = valid[k] ? r : p.rows - 1;  // a missing row recomputes the last one, unstored
      const uint32_t token = rr / p.heads, head = rr - token * p.heads;
      const bool is_q = head < p.q_heads;
      row[k] = (is_q ? p.q + token * p.q_stride + head * 128 : p.k + token * p.k_stride + (head - p.q_heads) * 128) + lane * kV;
      w[k] = (is_q ? p.qw : p.kw) + lane * kV;
    }
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      qk_load<kAccess>(x[k], row[k]);
      qk_load<kAccess == 0 ? 0 : 1>(wv[k], w[k]);
    }
    float s[kRows];
#pragma unroll
    for (int k = 0; k < kRows; ++k) s[k] = WarpGroup<kWidth>{}.reduce_sum(M::sum_squares(x[k]));
#pragma unroll
    for (int k = 0; k < kRows; ++k)
      if (valid[k]) qk_store<kAccess>(M::normalized(x[k], wv[k], rsqrtf(s[k] * inv_hidden + p.eps)), row[k]);
  }
  if constexpr (kTrigger == 2) device::pdl_trigger_secondary();
#endif
}

#ifndef __CUDACC_RTC__
// qknorm of q [N, Hq, 128], k [N, Hk, 128] (bf16, contiguous) in place, eps 1e-6.
void qknorm_schedule(jitkern::TensorView q, jitkern::TensorView k, jitkern::TensorView qw, jitkern::TensorView kw, int64_t rows_per_group,
                     int64_t threads, int64_t persistent, int64_t trigger, int64_t access) {
  using namespace host;
  RuntimeCheck(q.dim() == 3 && k.dim() == 3 && q.size(2) == 128 && k.size(2) == 128, "qknorm_schedule: [N, H, 128]");
  const int64_t n = q.size(0), hq = q.size(1), hk = k.size(1);
  const QkRows p{static_cast<bf16*>(q.data_ptr()), static_cast<bf16*>(k.data_ptr()), static_cast<const bf16*>(qw.data_ptr()),
                 static_cast<const bf16*>(kw.data_ptr()), hq * 128, hk * 128, static_cast<uint32_t>(hq), static_cast<uint32_t>(hq + hk),
                 static_cast<uint32_t>(n * (hq + hk)), 1e-6f};
  const DLDevice device = q.device();
  const int64_t passes = div_ceil(int64_t{p.rows}, threads / 16 * rows_per_group);
  const auto go = [&](auto r, auto t, auto pers, auto a) {
    constexpr int kR = decltype(r)::value, kT = decltype(t)::value, kA = decltype(a)::value;
    constexpr bool kP = decltype(pers)::value != 0;
    const auto kernel = qknorm_access_kernel<kR, kA, kP, kT>;
    int64_t grid = passes;
    if (kP) grid = std::min<int64_t>(grid, int64_t{runtime::get_sm_count(device.device_id)} * runtime::get_blocks_per_sm(kernel, threads));
    LaunchKernel(static_cast<unsigned>(grid), static_cast<unsigned>(threads), device).enable_pdl()(kernel, p);
  };
  // The combinations bench_schedules.py runs (each one a kernel built).
  const auto variant = [&](int r, int t, int pers, int a) { return rows_per_group == r && trigger == t && persistent == pers && access == a; };
  using I = std::integral_constant<int, 0>;
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  if (variant(1, 2, 1, 0)) return go(One{}, Two{}, One{}, I{});
  if (variant(1, 2, 1, 1)) return go(One{}, Two{}, One{}, One{});
  if (variant(1, 2, 1, 2)) return go(One{}, Two{}, One{}, Two{});
  if (variant(1, 1, 0, 1)) return go(One{}, One{}, I{}, One{});
  if (variant(2, 1, 0, 0)) return go(Two{}, One{}, I{}, I{});
  if (variant(2, 1, 0, 1)) return go(Two{}, One{}, I{}, One{});
  if (variant(2, 1, 0, 2)) return go(Two{}, One{}, I{}, Two{});
  if (variant(2, 2, 1, 1)) return go(Two{}, Two{}, One{}, One{});
  RuntimeCheck(false, "qknorm_schedule: no such variant");
}
#endif  // __CUDACC_RTC__

// per_group_lean_kernel's group (fp8, fp32 or kUE8M0 scales) under other shapes: kPerLane 16-byte vectors a lane,
// contiguous (lane l holds vectors kPerLane l, ...) or strided (l, l + kLanes, ...), CTAs of kThreads, trigger
// kTrigger (3: after the loads), kNormalMath (false: IEEE divisions for the scale and its reciprocal, not
// normal_scale_for and normal_reciprocal), and kFlags: kAllLanesStoreScale (every lane of a group stores its scale,
// no branch), kExitPastEnd (warps past the last group return before the wait, as the reference's do),
// kDivideByScale (UE8M0: the exact rounding's division with its two corrections, not the multiply by 1 / s). The
// product's pieces (LanePairs, lane_codes, quant's scales), so the same bits.
constexpr int kAllLanesStoreScale = 1, kExitPastEnd = 2, kDivideByScale = 4;

template <typename T, int kLanes, int kPerLane, bool kContiguous, bool kUE8M0, int kThreads, int kTrigger, bool kNormalMath,
          device::quant::Rounding kRounding, int kFlags>
__global__ void __launch_bounds__(kThreads) group_lean_schedule_kernel(const T* in, uint8_t* q, device::quant::GroupScales scales,
                                                                       uint32_t groups_per_row, uint32_t total_groups, float eps) {
#ifdef __CUDACC__
  namespace quant = device::quant;
  using namespace jitkern_quant;
  constexpr int kVec = device::kVec16<T>, kGroup = kLanes * kPerLane * kVec;
  constexpr uint32_t kStep = kContiguous ? kVec : kLanes * kVec;  // elements from one of a lane's vectors to the next
  using P = device::packed_t<T>;
  if constexpr (kTrigger == 0) device::pdl_trigger_secondary();
  const uint32_t lane = threadIdx.x % kLanes, group = blockIdx.x * (kThreads / kLanes) + threadIdx.x / kLanes;
  if constexpr ((kFlags & kExitPastEnd) != 0) {
    if ((blockIdx.x * kThreads + threadIdx.x) / device::kWarpThreads * (device::kWarpThreads / kLanes) >= total_groups) return;
  }
  const bool valid = group < total_groups;
  const uint32_t at = min(group, total_groups - 1) * kGroup + lane * (kContiguous ? kPerLane * kVec : kVec);
  AlignedVector<T, kVec> raw[kPerLane];
  device::pdl_wait_primary();
  if constexpr (kTrigger == 1) device::pdl_trigger_secondary();
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) raw[j].load_global(in + at + j * kStep);
  if constexpr (kTrigger == 3) device::pdl_trigger_secondary();
  LanePairs<P, kPerLane> x;
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
    scale = quant::group_scale<fp8_e4m3_t, kUE8M0, kNormalMath>(amax, eps, exponent);
    const quant::Divider s = kNormalMath ? quant::Divider(scale, quant::normal_reciprocal(scale), finite) : quant::Divider(scale, finite);
    if constexpr (kUE8M0 && (kFlags & kDivideByScale) == 0) {
      c = lane_codes(x, [&](float v) { return v * s.inv; });
    } else {
      c = finite ? lane_codes(x, [&](float v) { return s.fast_finite(v); }) : lane_codes_inf_safe(x, s);
    }
  }
  if (valid) {
#pragma unroll
    for (int j = 0; j < kPerLane; j += kContiguous ? 2 : 1) {
      if constexpr (kContiguous) {  // 16 codes a store
        AlignedVector<uint32_t, 4>{{c.w[2 * j], c.w[2 * j + 1], c.w[2 * j + 2], c.w[2 * j + 3]}}.store_global(
            reinterpret_cast<uint32_t*>(q + at + j * kVec));
      } else {
        AlignedVector<uint32_t, 2>{{c.w[2 * j], c.w[2 * j + 1]}}.store_global(reinterpret_cast<uint32_t*>(q + at + j * kStep));
      }
    }
    if ((kFlags & kAllLanesStoreScale) != 0 || lane == 0) scales.store<kUE8M0>(group, groups_per_row, total_groups, scale, exponent);
  }
  if constexpr (kTrigger == 2) device::pdl_trigger_secondary();
#endif
}

#ifndef __CUDACC_RTC__
// per_token_group_quant_8bit of x (bf16, fp8 with fp32 or (ue8m0) UE8M0 scales, groups of 128) through the product's
// operand checks: per_lane 0: per_group_kernel under its launch rule (the product's general kernel); else
// group_lean_schedule_kernel with per_lane vectors a lane, contiguous, CTAs of `threads`, `trigger`, ieee (IEEE scale
// divisions), rounding sglang, flags; the combinations bench_schedules.py runs (each one a kernel built).
void group_quant_schedule(jitkern::TensorView x, jitkern::TensorView q, jitkern::TensorView s, int64_t ue8m0, int64_t per_lane,
                          int64_t contiguous, int64_t threads, int64_t trigger, int64_t ieee, int64_t sglang, int64_t flags) {
  using namespace host;
  using Ops = jitkern_quant::QuantOps<bf16>;
  using device::quant::Rounding;
  bool done = false;
  const auto variant = [&]<int kPerLane, bool kContiguous, int kThreads, int kTrigger, bool kNormalMath, Rounding kRounding, int kFlags = 0,
                           bool kUE8M0 = false>() {
    if (done || per_lane != kPerLane || (kPerLane > 0 && (contiguous != kContiguous || threads != kThreads || trigger != kTrigger ||
                                                          ieee != !kNormalMath || flags != kFlags)) ||
        sglang != (kRounding == Rounding::kSglang) || ue8m0 != kUE8M0)
      return;
    done = true;
    constexpr auto kFormat = kUE8M0 ? Ops::GroupFormat::kFp8Ue8m0 : Ops::GroupFormat::kFp8;
    const Ops::GroupOperands g = Ops::group_operands<kFormat>(x, q, s, 128, 1e-10);
    if (g.total_groups == 0) return;
    if constexpr (kPerLane == 0) {
      Ops::launch_group_general<kFormat, kRounding>(g);
    } else {
      RuntimeCheck(Ops::lean_applies<kRounding>(g), "group_quant_schedule: the lean kernel does not apply");
      constexpr int kLanes = 128 / (kV * kPerLane);
      LaunchKernel(static_cast<unsigned>(div_ceil(g.total_groups, int64_t{kThreads / kLanes})), kThreads, g.ops.device)
          .enable_pdl()(group_lean_schedule_kernel<bf16, kLanes, kPerLane, kContiguous, kUE8M0, kThreads, kTrigger, kNormalMath, kRounding, kFlags>,
                        static_cast<const bf16*>(g.ops.in), static_cast<uint8_t*>(g.ops.out), g.scales, static_cast<uint32_t>(g.groups_per_row),
                        static_cast<uint32_t>(g.total_groups), g.eps);
    }
  };
  constexpr Rounding kE = Rounding::kExact, kS = Rounding::kSglang;
  variant.template operator()<0, false, 0, 0, true, kE>();
  variant.template operator()<2, true, 256, 2, true, kE>();
  variant.template operator()<2, true, 256, 2, false, kE>();
  variant.template operator()<2, false, 256, 2, true, kE>();
  variant.template operator()<2, true, 128, 2, true, kE>();
  variant.template operator()<2, true, 128, 1, true, kE>();
  variant.template operator()<2, true, 64, 2, true, kE>();
  variant.template operator()<4, false, 256, 2, true, kE>();
  variant.template operator()<4, false, 128, 2, true, kE>();
  variant.template operator()<4, false, 128, 1, true, kE>();
  variant.template operator()<4, false, 64, 2, true, kE>();
  variant.template operator()<8, true, 256, 2, true, kE>();
  variant.template operator()<8, true, 128, 2, true, kE>();
  // rounding="sglang": the product's shapes, then candidates for one-wave grids of 256-thread CTAs.
  variant.template operator()<0, false, 0, 0, true, kS>();
  variant.template operator()<2, true, 256, 2, true, kS>();
  variant.template operator()<2, true, 256, 1, true, kS>();
  variant.template operator()<2, true, 128, 0, true, kS>();
  variant.template operator()<2, true, 128, 1, true, kS>();
  variant.template operator()<2, true, 256, 3, true, kS>();
  variant.template operator()<2, true, 512, 2, true, kS>();
  variant.template operator()<2, true, 1024, 2, true, kS>();
  variant.template operator()<2, true, 256, 2, true, kS, bench_schedules::kAllLanesStoreScale>();
  variant.template operator()<2, true, 256, 2, true, kS, bench_schedules::kExitPastEnd>();
  variant.template operator()<2, true, 256, 2, true, kS, bench_schedules::kAllLanesStoreScale | bench_schedules::kExitPastEnd>();
  variant.template operator()<4, true, 256, 2, true, kS>();
  // UE8M0 scales, the exact rounding: the product's lean shapes multiplying by 1 / s, and dividing (the product before).
  variant.template operator()<0, false, 0, 0, true, kE, 0, true>();
  variant.template operator()<2, true, 256, 2, true, kE, 0, true>();
  variant.template operator()<2, true, 256, 2, true, kE, bench_schedules::kDivideByScale, true>();
  variant.template operator()<2, true, 128, 0, true, kE, 0, true>();
  variant.template operator()<2, true, 128, 0, true, kE, bench_schedules::kDivideByScale, true>();
  RuntimeCheck(done, "group_quant_schedule: no such variant");
}
#endif  // __CUDACC_RTC__

// per_token_quant_fp8, a warp a row in CTAs of several, the row read twice as the reference reads it (for its
// amax, then for its codes, the second time from L1/L2), kUnroll vectors a lane in flight; the product's
// arithmetic (so the same codes and scales).
template <int kUnroll>
__global__ void __launch_bounds__(1024) token_quant_two_pass_kernel(const bf16* in, uint8_t* q, float* scales, int64_t rows, int64_t hidden,
                                                                    bool trigger_at_start) {
#ifdef __CUDACC__
  using Vec = AlignedVector<bf16, kV>;
  using M = VecMath<bf16, kV>;
  constexpr int kLanes = device::kWarpThreads;
  if (trigger_at_start) device::pdl_trigger_secondary();
  const int64_t row = int64_t{blockIdx.x} * (blockDim.x / kLanes) + threadIdx.x / kLanes;
  const int lane = static_cast<int>(threadIdx.x % kLanes), nvec = static_cast<int>(hidden / kV);
  if (row >= rows) return;  // a whole warp
  const bf16* src = in + row * hidden;
  uint8_t* dst = q + row * hidden;
  device::pdl_wait_primary();
  if (!trigger_at_start) device::pdl_trigger_secondary();
  const auto load = [&](int i, Vec (&x)[kUnroll]) {  // vectors i, i + 32, ... (kUnroll of them, in the row)
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i + u * kLanes < nvec) x[u].load_global(src + (i + u * kLanes) * kV);
  };
  const auto fold = [&](auto op) {
    float acc = 0.0f;
    for (int i = lane; i < nvec; i += kUnroll * kLanes) {
      Vec x[kUnroll];
      load(i, x);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (i + u * kLanes < nvec) acc = op(acc, M::fold(x[u], op, 0.0f));
    }
    return acc;
  };
  bool finite;
  const float amax = device::quant::dynamic_amax(fold, [](float v) { return device::warp::reduce_max_nonnegative<kLanes>(v); },
                                                 [](bool b) { return b; }, finite);
  const device::quant::Divider s(device::quant::scale_for<fp8_e4m3_t>(amax, device::quant::kDefaultScaleEps), finite);
  for (int i = lane; i < nvec; i += kUnroll * kLanes) {
    Vec x[kUnroll];
    load(i, x);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i + u * kLanes < nvec) device::quant::store_quantized<fp8_e4m3_t, false>(dst + (i + u * kLanes) * kV, x[u], s);
  }
  if (lane == 0) scales[row] = s.s;
#endif
}

#ifndef __CUDACC_RTC__
// per_token_quant_fp8 of x [N, H] (bf16, contiguous) into q [N, H] (bytes), s [N]: the product's kernel with
// reg_vecs vectors a thread, a CTA of H / 8 / reg_vecs threads a row (two_pass 0), or (two_pass 1) a warp a
// row read twice, token_quant_two_pass_kernel with reg_vecs vectors a lane in flight, in CTAs of `threads`;
// the PDL trigger after the wait (the product's choice at these sizes).
void token_quant_schedule(jitkern::TensorView x, jitkern::TensorView q, jitkern::TensorView s, int64_t reg_vecs, int64_t two_pass,
                          int64_t threads) {
  using namespace host;
  using device::norm::RowFit;
  RuntimeCheck(x.dim() == 2 && x.size(1) % 8 == 0, "token_quant_schedule: [N, H], H a multiple of 8");
  const int64_t rows = x.size(0), hidden = x.size(1), nvec = hidden / kV;
  const auto* in = static_cast<const bf16*>(x.data_ptr());
  auto* out = static_cast<uint8_t*>(q.data_ptr());
  auto* scales = static_cast<float*>(s.data_ptr());
  if (two_pass) {
    LaunchKernel launch(static_cast<unsigned>(div_ceil(rows, threads / 32)), static_cast<unsigned>(threads), x.device());
    launch.enable_pdl();
    with_constant<2, 4>(reg_vecs, [&](auto u) {
      launch(token_quant_two_pass_kernel<decltype(u)::value>, in, out, scales, rows, hidden, false);
    });
    return;
  }
  RuntimeCheck(nvec % reg_vecs == 0 && nvec / reg_vecs <= 1024, "token_quant_schedule: the row must fill its threads exactly");
  LaunchKernel launch(static_cast<unsigned>(rows), static_cast<unsigned>(nvec / reg_vecs), x.device());
  launch.enable_pdl();
  with_constant<1, 2, 4>(reg_vecs, [&](auto r) {
    launch(jitkern_quant::per_token_kernel<bf16, fp8_e4m3_t, kV, RowFit::kExact, decltype(r)::value>, jitkern_quant::Rows<const bf16>{in, hidden},
           jitkern_quant::Rows<uint8_t>{out, hidden}, scales, hidden, device::quant::kDefaultScaleEps, false);
  });
}
#endif  // __CUDACC_RTC__

// concat_mla_absorb_q's rows, [a (512 bf16) | b (64 bf16)], a warp a row as the reference lays them out: lane
// l copies a's 16-byte vectors l and l + 32 and b's 4-byte word l; the PDL wait first, the trigger after the
// loads; rows contiguous in a, b and out (no strides: the fewest instructions before the loads).
__global__ void __launch_bounds__(1024) absorb_warp_kernel(const bf16* a, const bf16* b, bf16* out, int64_t rows) {
#ifdef __CUDACC__
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / device::kWarpThreads;
  const int lane = static_cast<int>(threadIdx.x % device::kWarpThreads);
  device::pdl_wait_primary();
  if (row >= rows) return;
  const int4* ar = reinterpret_cast<const int4*>(a + row * 512);
  const int4 a0 = ar[lane], a1 = ar[lane + 32];
  const int bw = reinterpret_cast<const int*>(b + row * 64)[lane];
  device::pdl_trigger_secondary();
  int4* o = reinterpret_cast<int4*>(out + row * 576);
  o[lane] = a0;
  o[lane + 32] = a1;
  reinterpret_cast<int*>(o + 64)[lane] = bw;
#endif
}

// The same through the product's general parameters as it ran before its 32-bit form: the row's token and
// head by a 64-bit division, 64-bit strides, a predicate on a's second round (78 instructions before the
// first load, against absorb_warp_kernel's 28).
__global__ void __launch_bounds__(1024) absorb_warp_wide_index_kernel(const __grid_constant__ jitkern_kv_rows::ConcatParams p, int64_t rows) {
#ifdef __CUDACC__
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / device::kWarpThreads;
  const int lane = static_cast<int>(threadIdx.x % device::kWarpThreads);
  device::pdl_wait_primary();
  if (row >= rows) return;
  uint64_t i1;
  const int64_t i0 = static_cast<int64_t>(p.dim1.divide(static_cast<uint64_t>(row), i1)), h = static_cast<int64_t>(i1);
  const int4* x = reinterpret_cast<const int4*>(p.x + i0 * p.x_s0 + h * p.x_s1);
  char* out = p.out + i0 * p.out_s0 + h * p.out_s1;
  int4 xv[2];
#pragma unroll
  for (int j = 0; j < 2; ++j)
    if (lane + j * 32 < p.x_vecs) xv[j] = x[lane + j * 32];
  const int yv = reinterpret_cast<const int*>(p.y + i0 * p.y_s0 + h * p.y_s1)[lane];
  device::pdl_trigger_secondary();
#pragma unroll
  for (int j = 0; j < 2; ++j)
    if (lane + j * 32 < p.x_vecs) reinterpret_cast<int4*>(out)[lane + j * 32] = xv[j];
  reinterpret_cast<int*>(out + int64_t{p.x_vecs} * 16)[lane] = yv;
#endif
}

#ifndef __CUDACC_RTC__
// out [T, H, 576] = [a [T, H, 512] | b [T, H, 64]] (bf16, any strides where noted), both arms of the
// product's launch rule at any size: variant 2: the product's concat_rows_kernel (the output's vectors in
// order, 2 a thread); 31: the product's concat_warp_rows_kernel as the product launches it; 30: the same in
// CTAs of 256; 10: absorb_warp_kernel (contiguous only), CTAs of 256; 20: absorb_warp_wide_index_kernel,
// CTAs of 256.
void concat_schedule(jitkern::TensorView a, jitkern::TensorView b, jitkern::TensorView out, int64_t variant) {
  using namespace host;
  RuntimeCheck(a.dim() == 3 && a.size(2) == 512 && b.size(2) == 64 && out.size(2) == 576, "concat_schedule: [T, H, 512 + 64]");
  const int64_t t = a.size(0), h = a.size(1), rows = t * h;
  jitkern_kv_rows::ConcatParams p{};
  p.out = static_cast<char*>(out.data_ptr()), p.x = static_cast<const char*>(a.data_ptr()), p.y = static_cast<const char*>(b.data_ptr());
  p.out_s0 = out.stride(0) * 2, p.out_s1 = out.stride(1) * 2, p.x_s0 = a.stride(0) * 2, p.x_s1 = a.stride(1) * 2;
  p.y_s0 = b.stride(0) * 2, p.y_s1 = b.stride(1) * 2;
  if (variant == 2) {
    jitkern_kv_rows::KvRows::concat<2>(p, t, h, 1024, 128, a.device());
  } else if (variant >= 30) {
    RuntimeCheck(jitkern_kv_rows::KvRows::warp_rows(p, t, h, a.device(), variant == 30 ? 256 : 0, true), "concat_schedule: offsets past 32 bits");
  } else {
    LaunchKernel launch(static_cast<unsigned>(div_ceil(rows * 32, int64_t{256})), 256u, a.device());
    launch.enable_pdl();
    if (variant == 10) {
      RuntimeCheck(a.is_contiguous() && b.is_contiguous() && out.is_contiguous(), "concat_schedule: variant 10 takes contiguous tensors");
      launch(absorb_warp_kernel, static_cast<const bf16*>(a.data_ptr()), static_cast<const bf16*>(b.data_ptr()), static_cast<bf16*>(out.data_ptr()),
             rows);
    } else {
      p.dim1 = host::kv_cache::divisor(h);
      p.x_vecs = 64;
      launch(absorb_warp_wide_index_kernel, p, rows);
    }
  }
}
#endif  // __CUDACC_RTC__

}  // namespace bench_schedules
