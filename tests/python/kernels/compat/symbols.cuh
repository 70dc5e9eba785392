// Reference-style host checks on any tensors (CPU ones too): the symbols' members, is_type, operator==
// on devices, dtype_bytes, Panic/PanicError, irange. Returns a bit mask of the facts it checked.
#pragma once

#include <sgl_kernel/tensor.h>
#include <sgl_kernel/utils.h>

#include <array>
#include <string_view>
#include <cstdint>

inline int64_t compat_symbols(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {
  using namespace host;
  int64_t facts = 0;
  auto rows = SymbolicSize{"rows"};
  auto dtype = SymbolicDType{};
  auto device = SymbolicDevice{};
  dtype.set_options<float, int32_t>();
  device.set_options<kDLCPU, kDLCUDA>();
  facts |= (!rows.has_value() && !rows.get_value().has_value()) << 0;
  TensorMatcher({rows, -1}).with_dtype(dtype).with_device(device).verify(x);
  facts |= (rows.get_value().value() == x.size(0) && rows.unwrap() == x.size(0)) << 1;
  facts |= (std::string_view(rows.get_name()) == "rows") << 2;
  rows.verify(y.size(0), "y", 0);  // panics unless y has as many rows as x
  facts |= dtype.is_type<float>() << 3;
  facts |= is_type<float>(x.dtype()) << 4;
  facts |= (device.unwrap() == x.device() && !(device.unwrap() == DLDevice{kDLCUDA, 7})) << 5;
  facts |= (dtype_bytes(x.dtype()) == 4) << 6;
  static constexpr std::array<DLDataType, 1> kOnlyInt8 = {DLDataType{kDLInt, 8, 1}};
  auto narrow = SymbolicDType{};
  narrow.set_options(kOnlyInt8);
  try {
    narrow.verify(x.dtype());
  } catch (const PanicError&) {
    facts |= 1 << 7;  // float32 is not an option
  }
  auto cpu_only = SymbolicDevice{};
  static constexpr std::array<DLDeviceType, 1> kCpu = {kDLCPU};
  cpu_only.set_options(kCpu);
  cpu_only.verify(x.device());
  facts |= (cpu_only.get_value().has_value() == (x.device().device_type == kDLCPU)) << 8;
  int64_t count = 0;
  for (auto i : irange(2, 5)) count += i;
  facts |= (count == 9) << 9;
  return facts;
}

// Panic's message reaches Python as a RuntimeError.
inline void compat_panic(int64_t code) { host::Panic("compat panic with code ", code); }

// PanicError::root_cause() is the message without the location prefix.
inline bool compat_root_cause(int64_t code) {
  try {
    host::Panic("compat panic with code ", code);
  } catch (const host::PanicError& e) {
    return e.root_cause() == "compat panic with code 7";
  }
  return false;
}
