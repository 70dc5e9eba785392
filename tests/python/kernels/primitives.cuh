// Test kernels for the device primitives (tests/python/test_device_primitives.py): each fills an
// output that the test compares with a host computation.
#pragma once

#include <jitkern/atomic.cuh>
#include <jitkern/cta.cuh>
#include <jitkern/math.cuh>
#include <jitkern/policy.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/tensor_alloc.h>
#include <jitkern/tile.cuh>
#include <jitkern/type.cuh>
#include <jitkern/vec.cuh>
#include <jitkern/warp.cuh>

namespace {

using jitkern::TensorView;

inline DLDevice cuda_device(TensorView t) { return t.device(); }

// out[0] = warp sum, out[1] = warp max, out[2] = CTA sum, out[3] = CTA max, out[4] = CTA sum by
// reduce_sum_once (the last reduction), of x (blockDim.x values); every thread must get the CTA
// results, so out[5] counts the threads that disagree with thread 0. out[6] / out[7]: the warp / CTA
// reduce_max_nonnegative of |x|.
__global__ void reductions_kernel(float* out, const float* x) {
  const float v = x[threadIdx.x];
  const float ws = device::warp::reduce_sum(v), wm = device::warp::reduce_max(v);
  const float cs = device::cta::reduce_sum(v), cm = device::cta::reduce_max(v, -INFINITY);
  const float once = device::cta::reduce_sum_once(v);
  if (threadIdx.x == 0) out[0] = ws, out[1] = wm, out[2] = cs, out[3] = cm, out[4] = once, out[5] = 0.0f;
  __shared__ float first[3];
  if (threadIdx.x == 0) first[0] = cs, first[1] = cm, first[2] = once;
  __syncthreads();
  const auto differs = [](float a, float b) { return __float_as_uint(a) != __float_as_uint(b); };  // bits: NaN sums agree too
  if (differs(cs, first[0]) || differs(cm, first[1]) || differs(once, first[2])) atomicAdd(out + 5, 1.0f);
  const float wa = device::warp::reduce_max_nonnegative(fabsf(v)), ca = device::cta::reduce_max_nonnegative(fabsf(v));
  if (threadIdx.x == 0) out[6] = wa, out[7] = ca;
}
void reductions(TensorView out, TensorView x) {
  using namespace host;
  auto n = SymbolicSize{"threads"};
  TensorMatcher({8}).with_dtype<float>().with_device<kDLCUDA>().verify(out);
  TensorMatcher({n}).with_dtype<float>().with_device<kDLCUDA>().verify(x);
  RuntimeCheck(n.unwrap() % 32 == 0 && n.unwrap() <= 1024, "threads must be a multiple of 32 up to 1024");
  LaunchKernel(1, static_cast<unsigned>(n.unwrap()), x.device())(reductions_kernel, static_cast<float*>(out.data_ptr()),
                                                                  static_cast<const float*>(x.data_ptr()));
}

// A copy of x in a tensor that C++ allocates through the caller's framework (jitkern::Tensor).
jitkern::Tensor copy_new(TensorView x) {
  using namespace host;
  auto n = SymbolicSize{"n"};
  TensorMatcher({n}).with_dtype<float>().with_device<kDLCUDA>().verify(x);
  jitkern::Tensor out = jitkern::Tensor::empty_like(x);
  RuntimeDeviceCheck(cudaMemcpyAsync(out.view().data_ptr(), x.data_ptr(), n.unwrap() * sizeof(float), cudaMemcpyDeviceToDevice,
                                     LaunchKernel::resolve_device(x.device())));
  return out;
}

// A zero-filled float32 tensor of shape [rows, cols] on x's device, allocated in C++ (jitkern::Tensor::empty).
jitkern::Tensor zeros_new(TensorView x, int64_t rows, int64_t cols) {
  using namespace host;
  RuntimeCheck(rows >= 0 && cols >= 0, "rows and cols must be non-negative");
  jitkern::Tensor out = jitkern::Tensor::empty({rows, cols}, dtype_trait<float>::value, x.device());
  RuntimeDeviceCheck(cudaMemsetAsync(out.view().data_ptr(), 0, rows * cols * sizeof(float), LaunchKernel::resolve_device(x.device())));
  return out;
}

// out[0] = atomic max over all of x (out[0] must be preset by the caller).
__global__ void atomic_max_kernel(float* out, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    device::atomic::max(out, x[i]);
}
void atomic_max(TensorView out, TensorView x) {
  using namespace host;
  auto n = SymbolicSize{"n"};
  TensorMatcher({1}).with_dtype<float>().with_device<kDLCUDA>().verify(out);
  TensorMatcher({n}).with_dtype<float>().with_device<kDLCUDA>().verify(x);
  LaunchKernel(64, 256, x.device())(atomic_max_kernel, static_cast<float*>(out.data_ptr()), static_cast<const float*>(x.data_ptr()),
                                    n.unwrap());
}

// Row k of out: op k of device::math applied to x, computed in T (then widened to float).
template <typename T>
__global__ void math_kernel(float* out, const float* x, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  using namespace device;
  const T v = cast<T>(x[i]);
  const T ops[] = {math::abs(v), math::sqrt(math::abs(v)), math::rsqrt(math::abs(v)), math::exp(v), math::sin(v), math::cos(v),
                   math::max(v, cast<T>(0.25f)), math::min(v, cast<T>(0.25f)), v};
  for (int k = 0; k < 9; ++k) out[k * n + i] = cast<float>(ops[k]);
}
template <typename T>
void math_ops(TensorView out, TensorView x) {
  using namespace host;
  auto n = SymbolicSize{"n"};
  TensorMatcher({9, n}).with_dtype<float>().with_device<kDLCUDA>().verify(out);
  TensorMatcher({n}).with_dtype<float>().with_device<kDLCUDA>().verify(x);
  LaunchKernel(div_ceil(n.unwrap(), 256), 256, x.device())(math_kernel<T>, static_cast<float*>(out.data_ptr()),
                                                           static_cast<const float*>(x.data_ptr()), n.unwrap());
}

// x2 forms: out = cast<float2>(math::max(cast<T2>(a), cast<T2>(b))) elementwise on pairs.
template <typename T2>
__global__ void packed_max_kernel(float2* out, const float2* a, const float2* b, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = device::cast<fp32x2_t>(device::math::max(device::cast<T2>(a[i]), device::cast<T2>(b[i])));
}
template <typename T2>
void packed_max(TensorView out, TensorView a, TensorView b) {
  using namespace host;
  auto n = SymbolicSize{"pairs"};
  TensorMatcher({n, 2}).with_dtype<float>().with_device<kDLCUDA>().verify(out).verify(a).verify(b);
  LaunchKernel(div_ceil(n.unwrap(), 256), 256, a.device())(packed_max_kernel<T2>, static_cast<float2*>(out.data_ptr()),
                                                           static_cast<const float2*>(a.data_ptr()),
                                                           static_cast<const float2*>(b.data_ptr()), n.unwrap());
}

// out = x rounded through T (fp16, bf16 or fp8 e4m3) and back to float.
template <typename T>
__global__ void round_trip_kernel(float* out, const float* x, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = device::cast<float>(device::cast<T>(x[i]));
}
template <typename T>
void round_trip(TensorView out, TensorView x) {
  using namespace host;
  auto n = SymbolicSize{"n"};
  TensorMatcher({n}).with_dtype<float>().with_device<kDLCUDA>().verify(out).verify(x);
  LaunchKernel(div_ceil(n.unwrap(), 256), 256, x.device())(round_trip_kernel<T>, static_cast<float*>(out.data_ptr()),
                                                           static_cast<const float*>(x.data_ptr()), n.unwrap());
}

// Copies n bf16 elements with AlignedVector (8 per access) and tile::Memory (the tail), plus load_as/store_as.
__global__ void vector_copy_kernel(bf16_t* dst, const bf16_t* src, int64_t n) {
  using Vec = device::AlignedVector<bf16_t, 8>;
  const int64_t nvec = n / 8;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < nvec; i += int64_t{gridDim.x} * blockDim.x) {
    Vec v;
    v.load(src + 8 * i);
    v.store(dst + 8 * i);
  }
  if (blockIdx.x == 0) {
    const auto mem = device::tile::Memory<bf16_t>::cta();
    bf16_t tail[1];
    mem.load(tail, src + 8 * nvec, n - 8 * nvec);
    mem.store(dst + 8 * nvec, tail, n - 8 * nvec);
    if (threadIdx.x == 0 && nvec > 0) device::store_as<uint4>(dst, device::load_as<uint4>(src));
  }
}
void vector_copy(TensorView dst, TensorView src) {
  using namespace host;
  auto n = SymbolicSize{"n"};
  TensorMatcher({n}).with_dtype<bf16_t>().with_device<kDLCUDA>().verify(dst).verify(src);
  RuntimeCheck(reinterpret_cast<uintptr_t>(dst.data_ptr()) % 16 == 0 && reinterpret_cast<uintptr_t>(src.data_ptr()) % 16 == 0,
               "vector_copy needs 16-byte aligned tensors");
  LaunchKernel(32, 128, src.device())(vector_copy_kernel, static_cast<bf16_t*>(dst.data_ptr()),
                                      static_cast<const bf16_t*>(src.data_ptr()), n.unwrap());
}

// Copies n elements of T, 16 bytes per AlignedVector access, through shared memory: global -> registers
// -> shared (AlignedVector::store to a shared address) -> registers -> global.
template <typename T>
__global__ void vector_copy_via_shared_kernel(T* dst, const T* src, int64_t nvec) {
  constexpr int kN = 16 / sizeof(T);
  using Vec = device::AlignedVector<T, kN>;
  __shared__ Vec stage[128];
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < nvec; i += int64_t{gridDim.x} * blockDim.x) {
    Vec v;
    v.load(src + kN * i);
    v.store(stage[threadIdx.x].data);
    Vec w;
    w.load(stage[threadIdx.x].data);
    w.store(dst + kN * i);
  }
}
template <typename T>
void vector_copy_via_shared(TensorView dst, TensorView src) {
  using namespace host;
  constexpr int kN = 16 / sizeof(T);
  auto n = SymbolicSize{"n"};
  TensorMatcher({n}).template with_dtype<T>().template with_device<kDLCUDA>().verify(dst).verify(src);
  RuntimeCheck(n.unwrap() % kN == 0, "vector_copy_via_shared: n must be a multiple of ", kN, ", got ", n.unwrap());
  RuntimeCheck(reinterpret_cast<uintptr_t>(dst.data_ptr()) % 16 == 0 && reinterpret_cast<uintptr_t>(src.data_ptr()) % 16 == 0,
               "vector_copy_via_shared needs 16-byte aligned tensors");
  LaunchKernel(32, 128, src.device())(vector_copy_via_shared_kernel<T>, static_cast<T*>(dst.data_ptr()),
                                      static_cast<const T*>(src.data_ptr()), n.unwrap() / kN);
}

// {sm count, cc major, runtime version, max dynamic smem per block, blocks per SM of reductions_kernel at 256 threads}
void runtime_info(TensorView out) {
  using namespace host;
  TensorMatcher({5}).with_dtype<int64_t>().with_device<kDLCPU>().verify(out);
  auto* o = static_cast<int64_t*>(out.data_ptr());
  o[0] = runtime::get_sm_count();
  o[1] = runtime::get_cc_major();
  o[2] = runtime::get_runtime_version();
  o[3] = runtime::get_available_dynamic_smem_per_block();
  o[4] = runtime::get_blocks_per_sm(reductions_kernel, 256);
}

// The launch rules of <jitkern/utils.cuh>, <jitkern/vec.cuh> and <jitkern/policy.cuh>, as numbers.
void launch_rules(TensorView out) {
  using namespace host;
  TensorMatcher({16}).with_dtype<int64_t>().with_device<kDLCPU>().verify(out);
  auto* o = static_cast<int64_t*>(out.data_ptr());
  o[0] = runtime::get_arch();
  o[1] = runtime::has_pdl();
  int before = -1, inside = -1, after = -1;
  RuntimeDeviceCheck(cudaGetDevice(&before));
  {
    const DeviceGuard guard(before);  // the current device: no switch
    RuntimeDeviceCheck(cudaGetDevice(&inside));
  }
  RuntimeDeviceCheck(cudaGetDevice(&after));
  o[2] = before == inside && inside == after;
  o[3] = row_policy(DLDevice{kDLCUDA, before}).row_threads;
  o[4] = policy_for(80).threads_per_sm;
  o[5] = policy_for(89).threads_per_sm;
  o[6] = policy_for(120).row_threads;
  o[7] = policy_for(103).arch;
  alignas(16) static fp16_t row[16];
  const auto* base = reinterpret_cast<const char*>(row);
  o[8] = vector_width(device::kVec16<fp16_t>, 4096, {row, {base + 8, 1}}, {4096, 0});  // 8 fp16, an 8-byte vector of bytes
  o[9] = vector_width(device::kVec16<fp16_t>, 4096, {reinterpret_cast<const fp16_t*>(base + 2)}, {});  // 2 bytes off
  o[10] = vector_width(device::kVec16<fp16_t>, 4096, {row}, {4100});  // a stride of half a vector
  o[11] = vector_width(device::kVec16<fp16_t>, 4100, {row, static_cast<const fp16_t*>(nullptr)}, {});  // the width
  o[12] = vector_width(device::kVec16<fp16_t>, 4096, {{base + 4, 1}}, {});  // bytes 4 off an 8-byte vector
  o[13] = device::kVec16<float>;
  o[14] = device::kVec16<fp8_e4m3_t>;
  o[15] = kRowKernels.max_cta_threads;
}

}  // namespace
