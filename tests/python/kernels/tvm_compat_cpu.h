// A CPU kernel written exactly as the reference guide shows, against tvm-ffi's C++ TensorView
// (only the include prefix differs): it must compile and run unchanged.
#include <jitkern/tensor.h>
#include <jitkern/utils.h>

#include <dlpack/dlpack.h>
#include <tvm/ffi/container/tensor.h>

#include <cstdint>

void copy_rows(tvm::ffi::TensorView dst, const tvm::ffi::TensorView src, tvm::ffi::Optional<tvm::ffi::TensorView> bias) {
  using namespace host;
  auto R = SymbolicSize{"rows"};
  auto C = SymbolicSize{"cols"};
  auto dtype = SymbolicDType{};
  auto device = SymbolicDevice{};
  TensorMatcher({R, C})  //
      .with_dtype<float>(dtype)
      .with_device<kDLCPU>(device)
      .verify(dst)
      .verify(src);
  const float* b = nullptr;
  if (bias.has_value()) {
    TensorMatcher({C}).with_dtype(dtype).with_device(device).verify(bias.value());
    b = static_cast<const float*>(bias.value().data_ptr());
  }
  auto* out = static_cast<float*>(dst.data_ptr());
  const auto* in = static_cast<const float*>(src.data_ptr());
  for (auto r : irange(R.unwrap()))
    for (auto c : irange(C.unwrap())) out[r * C.unwrap() + c] = in[r * C.unwrap() + c] + (b ? b[c] : 0.0f);
}
