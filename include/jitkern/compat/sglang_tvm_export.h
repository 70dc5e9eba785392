// Exports through tvm-ffi's own TVM_FFI_DLL_EXPORT_TYPED_FUNC, in namespace sglang, for kernels of the
// reference framework (SGLang) that use tvm-ffi's C++ API (tvm::ffi::Tensor results, Array, Optional of
// scalars, objects): included after the kernel files, it stands in for <jitkern/export.h>, so the
// JITKERN_EXPORT lines jitkern generates become the reference's own export lines.
#pragma once

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#define JITKERN_EXPORT_H_             // <jitkern/export.h> adds nothing after this header
#define JITKERN_EXPORT_TVM_COMPAT_H_  // nor its casters for tvm-ffi's types
#define JITKERN_EXPORT(NAME, ...) \
  namespace sglang {              \
  TVM_FFI_DLL_EXPORT_TYPED_FUNC(NAME, (__VA_ARGS__));  \
  }
#define JITKERN_EXPORT_NAMED(NAME, ARG_NAMES, ...) JITKERN_EXPORT(NAME, __VA_ARGS__)
