// The export layer: JITKERN_EXPORT(name, function) makes `function` callable through the tvm-ffi
// C ABI as `__tvm_ffi_<name>` (what tvm_ffi.load_module looks up), using only the C header
// <tvm/ffi/c_api.h>. Parameters may be jitkern::TensorView, jitkern::Optional<jitkern::TensorView>,
// integers, floating-point numbers, bool, DLDataType and DLDevice (and tvm::ffi::TensorView /
// tvm::ffi::Optional<tvm::ffi::TensorView> when the kernel includes tvm-ffi's C++ headers itself).
// It may return nothing, a number, bool, or a jitkern::Tensor (allocated by the caller's framework).
// A C++ exception becomes a Python exception carrying its full message, of the kind it declares
// (host::PanicError's ErrorKind; std::invalid_argument and std::out_of_range are ValueError; anything
// else RuntimeError); a wrong argument count or type is a TypeError naming the function and argument.
// JITKERN_EXPORT_NAMED(name, "a, b, c", function) also names the parameters in those messages.
#ifndef JITKERN_EXPORT_H_
#define JITKERN_EXPORT_H_

#include <jitkern/detail/export_impl.h>  // argument conversion, results, error reporting
#include <jitkern/optional.h>
#include <jitkern/tensor_view.h>

// The exported expression may be any constant that names one function: `f`, `&f`, `f<3>`,
// `&Kernel<3>::run` (a static member), or a capture-less lambda; it is held in a constant first.
#define JITKERN_EXPORT_FUNCTION_(NAME, ...) \
  static constexpr auto jitkern_export_fn_##NAME = ::jitkern::ffi::function_pointer(__VA_ARGS__);

#define JITKERN_EXPORT(NAME, ...)                                                                          \
  JITKERN_EXPORT_FUNCTION_(NAME, __VA_ARGS__)                                                              \
  extern "C" __attribute__((visibility("default"))) int __tvm_ffi_##NAME(                                  \
      void*, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result) {                                 \
    return ::jitkern::ffi::safe_call<jitkern_export_fn_##NAME>(#NAME, nullptr, args, num_args, result);   \
  }

// ARG_NAMES: a string literal, the parameters' names separated by commas (checked against the arity).
#define JITKERN_EXPORT_NAMED(NAME, ARG_NAMES, ...)                                                         \
  JITKERN_EXPORT_FUNCTION_(NAME, __VA_ARGS__)                                                              \
  static_assert(::jitkern::ffi::count_names(ARG_NAMES) ==                                                  \
                    ::jitkern::ffi::Signature<std::remove_cv_t<decltype(jitkern_export_fn_##NAME)>>::kArity,  \
                "JITKERN_EXPORT_NAMED(" #NAME "): the number of argument names differs from the arity");   \
  extern "C" __attribute__((visibility("default"))) int __tvm_ffi_##NAME(                                  \
      void*, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result) {                                 \
    return ::jitkern::ffi::safe_call<jitkern_export_fn_##NAME>(#NAME, ARG_NAMES, args, num_args, result); \
  }

#endif  // JITKERN_EXPORT_H_

// Compatibility with kernels written against tvm-ffi's C++ TensorView (as in the reference guide).
// Outside the include guard so that it also applies when tvm-ffi's header comes after this one.
#if defined(TVM_FFI_CONTAINER_TENSOR_H_) && !defined(JITKERN_EXPORT_TVM_COMPAT_H_)
#define JITKERN_EXPORT_TVM_COMPAT_H_
namespace jitkern::ffi {
template <>
struct ArgCaster<::tvm::ffi::TensorView> {
  static constexpr const char* kExpected = "a tensor";
  static bool cast(const TVMFFIAny& a, Slot<::tvm::ffi::TensorView>* out) {
    const DLTensor* t = as_dltensor(a);
    if (t == nullptr) return false;
    out->emplace(t);
    return true;
  }
};
template <>
struct ArgCaster<::tvm::ffi::Optional<::tvm::ffi::TensorView>> {
  static constexpr const char* kExpected = "a tensor or None";
  static bool cast(const TVMFFIAny& a, Slot<::tvm::ffi::Optional<::tvm::ffi::TensorView>>* out) {
    if (a.type_index == kTVMFFINone) return out->emplace(), true;
    const DLTensor* t = as_dltensor(a);
    if (t == nullptr) return false;
    out->emplace(::tvm::ffi::TensorView(t));
    return true;
  }
};
}  // namespace jitkern::ffi
#endif
