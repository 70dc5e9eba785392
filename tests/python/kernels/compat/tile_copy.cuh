// Reference-style cooperative copy with tile::Memory: the (tid, tsize) constructor, thread(), warp(n),
// cta(n), load(ptr, i), store(ptr, v, i), in_bound(count, i). out = in * scale, three ways by `mode`.
#pragma once

#include <sgl_kernel/tensor.h>
#include <sgl_kernel/tile.cuh>
#include <sgl_kernel/utils.cuh>

#include <cstdint>

__global__ void compat_tile_scale(float* out, const float* in, int64_t n, float scale, int mode) {
  using namespace device;
  // mode 0: the CTA; 1: warp 0 in groups of 16 lanes, group g taking every other element from g; 2: thread 0 alone.
  const auto mem = mode == 0 ? tile::Memory<float>::cta(blockDim.x)
                   : mode == 1 ? tile::Memory<float>(threadIdx.x / 16 + 2 * (threadIdx.x % 16), 32u)
                               : tile::Memory<float>::thread();
  if (mode == 1 && threadIdx.x >= 32) return;
  if (mode == 2 && threadIdx.x != 0) return;
  const auto group = tile::Memory<float>::warp(16);  // only checks its shape: lane in 16, 16 lanes
  if (group.rank != static_cast<int>(threadIdx.x % 16) || group.size != 16) __trap();
  for (int64_t i = 0; mem.in_bound(n, i); ++i) mem.store(out, mem.load(in, i) * scale, i);
}

void compat_tile_scale_run(tvm::ffi::TensorView out, tvm::ffi::TensorView in, double scale, int64_t mode) {
  using namespace host;
  auto n = SymbolicSize{"n"};
  auto device = SymbolicDevice{};
  TensorMatcher({n}).with_dtype<float>().with_device<kDLCUDA>(device).verify(out).verify(in);
  RuntimeCheck(mode >= 0 && mode <= 2, "mode is 0, 1 or 2");
  LaunchKernel(1, 128, device.unwrap())(compat_tile_scale, static_cast<float*>(out.data_ptr()), static_cast<const float*>(in.data_ptr()),
                                        n.unwrap(), static_cast<float>(scale), static_cast<int>(mode));
}
