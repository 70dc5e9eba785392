// add_constant: dst = src + kConstant over int32 tensors (the add-a-kernel tutorial's example),
// vectorised to 16-byte accesses so that it runs at the memory-bandwidth limit.
#pragma once

#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/utils.cuh>
#include <jitkern/utils.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace {

// The fastest of the block shapes and unrolls tried; streaming cache hints were slower
// (docs/benchmarks/design.md).
constexpr int kAddConstantThreads = 1024;
constexpr int kAddConstantUnroll = 1;  // 16-byte vectors in flight per thread
constexpr int64_t kAddConstantTile = int64_t{kAddConstantThreads} * kAddConstantUnroll * 4;  // elements per block

// int32 addition that wraps like torch's (signed overflow is undefined in C++).
template <int32_t kConstant>
__device__ __forceinline__ int32_t add_wrapping(int32_t x) {
  return static_cast<int32_t>(static_cast<uint32_t>(x) + static_cast<uint32_t>(kConstant));
}

// Each block handles one tile of kAddConstantTile elements; loads are issued before any store so
// that kAddConstantUnroll 16-byte requests per thread are in flight. The last partial tile and
// misaligned tensors take the scalar path. Launched as a PDL secondary on sm_90+ (see
// launch_add_constant), so it waits for the previous kernel before reading src.
template <int32_t kConstant, bool kAligned>
__global__ void __launch_bounds__(kAddConstantThreads) add_constant_kernel(int32_t* __restrict__ dst,
                                                                           const int32_t* __restrict__ src, int64_t n) {
  const int64_t tile_start = static_cast<int64_t>(blockIdx.x) * kAddConstantTile;
  device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  if (kAligned && tile_start + kAddConstantTile <= n) {
    const int4* in = reinterpret_cast<const int4*>(src + tile_start);
    int4* out = reinterpret_cast<int4*>(dst + tile_start);
    int4 v[kAddConstantUnroll];
#pragma unroll
    for (int u = 0; u < kAddConstantUnroll; ++u) v[u] = in[u * kAddConstantThreads + threadIdx.x];
#pragma unroll
    for (int u = 0; u < kAddConstantUnroll; ++u) {
      v[u].x = add_wrapping<kConstant>(v[u].x);
      v[u].y = add_wrapping<kConstant>(v[u].y);
      v[u].z = add_wrapping<kConstant>(v[u].z);
      v[u].w = add_wrapping<kConstant>(v[u].w);
      out[u * kAddConstantThreads + threadIdx.x] = v[u];
    }
    return;
  }
  const int64_t tile_end = tile_start + kAddConstantTile < n ? tile_start + kAddConstantTile : n;
  for (int64_t i = tile_start + threadIdx.x; i < tile_end; i += kAddConstantThreads) dst[i] = add_wrapping<kConstant>(src[i]);
}

// pdl: launch with programmatic stream serialisation (sm_90+): the launch overlaps the previous kernel's
// tail, and the driver queues it faster (docs/benchmarks/add_constant.md). The reference-path benchmark passes
// false, as the tutorial launches.
template <int32_t kConstant>
void launch_add_constant(int32_t* out, const int32_t* in, int64_t n, DLDevice device, bool pdl = true) {
  using namespace host;
  if (n == 0) return;
  const int64_t blocks = div_ceil(n, kAddConstantTile);
  RuntimeCheck(blocks <= int64_t{0x7fffffff}, "add_constant: tensor too large (", n, " elements)");
  const bool aligned = (reinterpret_cast<uintptr_t>(out) % 16 == 0) && (reinterpret_cast<uintptr_t>(in) % 16 == 0);
  const auto kernel = aligned ? add_constant_kernel<kConstant, true> : add_constant_kernel<kConstant, false>;
  LaunchKernel(static_cast<unsigned>(blocks), kAddConstantThreads, device)
      .enable_pdl(pdl)(kernel, out, in, n);
}

// A contiguous tensor of any rank as 1-D (`numel` holds the 1-D shape).
inline DLTensor as_flat(jitkern::TensorView t, const char* name, int64_t* numel) {
  if (!t.is_contiguous()) {
    char strides[96] = "";
    for (int64_t d = 0, n = 0; d < t.dim() && n < 80; ++d)
      n += std::snprintf(strides + n, sizeof strides - n, d ? ", %lld" : "%lld", static_cast<long long>(t.stride(d)));
    host::RuntimeCheck(false, name, " must be contiguous, got strides (", static_cast<const char*>(strides), ")");
  }
  DLTensor flat = *t.get();
  if (t.dim() != 1) {
    *numel = 1;
    for (int64_t d = 0; d < t.dim(); ++d) *numel *= t.size(d);
    flat.ndim = 1, flat.shape = numel, flat.strides = nullptr;
  }
  return flat;
}

// out = src + kConstant (the tutorial's form: the caller allocates out); contiguous tensors of any
// (equal) shape.
template <int32_t kConstant>
void add_constant(jitkern::TensorView out, jitkern::TensorView src) {
  using namespace host;
  int64_t src_numel = 0, out_numel = 0;
  const DLTensor flat_src = as_flat(src, "src", &src_numel), flat_out = as_flat(out, "out", &out_numel);
  SymbolicSize N{"num_elements"};
  SymbolicDevice device;
  TensorMatcher({N}).with_dtype<int32_t>().with_device<kDLCUDA>(device).verify(&flat_src, "src").verify(&flat_out, "out");
  RuntimeCheck(out.dim() == src.dim(), "out must have src's shape: got ", out.dim(), " dimensions for ", src.dim());
  for (int64_t d = 0; d < src.dim(); ++d)
    RuntimeCheck(out.size(d) == src.size(d), "out must have src's shape: dimension ", d, " is ", out.size(d), ", not ", src.size(d));
  launch_add_constant<kConstant>(static_cast<int32_t*>(out.data_ptr()), static_cast<const int32_t*>(src.data_ptr()), N.unwrap(),
                                 device.unwrap());
}

}  // namespace
