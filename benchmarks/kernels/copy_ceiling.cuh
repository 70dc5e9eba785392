// A plain device-to-device copy, the second yardstick of the benchmarks' bandwidth ceiling (next to
// torch's copy_): 16-byte vectors, 1024 threads of one vector each. On the H100 it measured 3030 GB/s
// against 2964 for torch's copy_ (docs/benchmarks.md), so "% of the copy ceiling" is not flattered by a
// slow reference copy.
#pragma once

#include <jitkern/tensor.h>
#include <jitkern/utils.cuh>
#include <jitkern/utils.h>

#include <cstdint>

namespace {

constexpr int kCopyCeilingThreads = 1024;
constexpr int64_t kCopyCeilingTileBytes = int64_t{16} * kCopyCeilingThreads;

__global__ void __launch_bounds__(kCopyCeilingThreads) copy_ceiling_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src) {
  const int64_t i = int64_t{blockIdx.x} * kCopyCeilingThreads + threadIdx.x;
  dst[i] = src[i];
}

// dst, src: contiguous int32 CUDA tensors of the same size, a multiple of 16 KiB, 16-byte aligned.
void copy_ceiling(jitkern::TensorView dst, jitkern::TensorView src) {
  using namespace host;
  SymbolicSize n{"num_elements"};
  SymbolicDevice device;
  TensorMatcher({n}).with_dtype<int32_t>().with_device<kDLCUDA>(device).verify(dst).verify(src);
  const int64_t bytes = n.unwrap() * 4;
  RuntimeCheck(bytes % kCopyCeilingTileBytes == 0, "copy_ceiling: the size must be a multiple of ", kCopyCeilingTileBytes,
               " bytes, got ", bytes);
  RuntimeCheck(reinterpret_cast<uintptr_t>(dst.data_ptr()) % 16 == 0 && reinterpret_cast<uintptr_t>(src.data_ptr()) % 16 == 0,
               "copy_ceiling: dst and src must be 16-byte aligned");
  RuntimeCheck(bytes / kCopyCeilingTileBytes <= int64_t{0x7fffffff}, "copy_ceiling: too large");
  if (bytes == 0) return;
  LaunchKernel(static_cast<unsigned>(bytes / kCopyCeilingTileBytes), kCopyCeilingThreads, device.unwrap())(
      copy_ceiling_kernel, static_cast<uint4*>(dst.data_ptr()), static_cast<const uint4*>(src.data_ptr()));
}

}  // namespace
