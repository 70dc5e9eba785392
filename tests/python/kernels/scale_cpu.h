// A CPU kernel for the engine tests: out[i] = in[i] * factor, over float32 CPU tensors.
#pragma once

#include <jitkern/tensor.h>
#include <jitkern/tensor_alloc.h>
#include <jitkern/utils.h>

#include <cstdint>

template <int kFactor>
void scale(jitkern::TensorView out, jitkern::TensorView in) {
  using namespace host;
  SymbolicSize n{"n"};
  TensorMatcher({n}).with_dtype<float>().with_device<kDLCPU>().verify(out).verify(in);
  auto* dst = static_cast<float*>(out.data_ptr());
  const auto* src = static_cast<const float*>(in.data_ptr());
  for (auto i : irange(n.unwrap())) dst[i] = src[i] * kFactor;
}

inline int64_t sum_ints(int64_t a, int64_t b, bool negate) { return negate ? -(a + b) : a + b; }

inline void always_fails(int64_t value) { host::RuntimeCheck(value > 100, "value must exceed 100, got ", value); }

// Returns in * 2 in a tensor allocated by the caller's framework (needs a framework allocator).
inline jitkern::Tensor doubled(jitkern::TensorView in) {
  using namespace host;
  SymbolicSize n{"n"};
  TensorMatcher({n}).with_dtype<float>().with_device<kDLCPU>().verify(in);
  jitkern::Tensor out = jitkern::Tensor::empty_like(in);
  auto* dst = static_cast<float*>(out.view().data_ptr());
  const auto* src = static_cast<const float*>(in.data_ptr());
  for (auto i : irange(n.unwrap())) dst[i] = src[i] * 2;
  return out;
}
