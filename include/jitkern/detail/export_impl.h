// Internals of JITKERN_EXPORT: converting tvm-ffi C ABI arguments to C++ parameters, results back,
// and C++ exceptions to Python errors. Not for kernel authors; include <jitkern/export.h>.
#pragma once

#include <dlpack/dlpack.h>
#include <jitkern/optional.h>
#include <jitkern/tensor_view.h>
#include <tvm/ffi/c_api.h>

#include <cstdint>
#include <exception>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>

namespace jitkern {
class Tensor;  // <jitkern/tensor_alloc.h>: not included here, it would cost every compile

namespace ffi {

// Uninitialised storage for one converted argument, so that parameter types need no default
// constructor (tvm::ffi::TensorView has none).
template <typename T>
class Slot {
 public:
  Slot() = default;
  Slot(const Slot&) = delete;
  ~Slot() {
    if (m_set) get().~T();
  }
  template <typename... A>
  void emplace(A&&... args) {
    new (m_buf) T(static_cast<A&&>(args)...);
    m_set = true;
  }
  T& get() { return *std::launder(reinterpret_cast<T*>(m_buf)); }

 private:
  alignas(T) unsigned char m_buf[sizeof(T)];
  bool m_set = false;
};

template <std::size_t I, typename T>
struct SlotLeaf {
  Slot<T> slot;
};
template <typename Seq, typename... T>
struct Slots;
template <std::size_t... I, typename... T>
struct Slots<std::index_sequence<I...>, T...> : SlotLeaf<I, T>... {};
template <std::size_t I, typename T>
Slot<T>& slot_at(SlotLeaf<I, T>& leaf) {
  return leaf.slot;
}

// Raised for arguments of the wrong kind; reported to Python as TypeError.
struct ArgumentError {
  const char* function;
  const char* arg_names;  // "a, b, c" or null
  int32_t index;
  const char* expected;
  const TVMFFIAny* got;
};
struct ArityError {
  const char* function;
  const char* arg_names;
  int32_t expected;
  int32_t got;
};

// Message formatting lives in the runtime library (thread-local buffer, valid until the next call
// on the same thread); raising goes through the tvm-ffi C ABI directly.
const char* describe_argument_error(const ArgumentError& e) noexcept;
const char* describe_arity_error(const ArityError& e) noexcept;
const char* describe_exception(const char* function, const char* what) noexcept;
// "TypeError", "ValueError" or "RuntimeError": the Python exception type for `e`.
const char* error_kind(const std::exception& e) noexcept;

inline void raise_argument_error(const ArgumentError& e) noexcept {
  TVMFFIErrorSetRaisedFromCStr("TypeError", describe_argument_error(e));
}
inline void raise_arity_error(const ArityError& e) noexcept {
  TVMFFIErrorSetRaisedFromCStr("TypeError", describe_arity_error(e));
}
inline void raise_exception(const char* function, const std::exception& e) noexcept {
  TVMFFIErrorSetRaisedFromCStr(error_kind(e), describe_exception(function, e.what()));
}
inline void raise_unknown_exception(const char* function) noexcept {
  TVMFFIErrorSetRaisedFromCStr("RuntimeError", describe_exception(function, "unknown C++ exception"));
}

inline const DLTensor* as_dltensor(const TVMFFIAny& a) {
  if (a.type_index == kTVMFFIDLTensorPtr) return static_cast<const DLTensor*>(a.v_ptr);
  if (a.type_index == kTVMFFITensor) return TVMFFITensorGetDLTensorPtr(a.v_obj);
  return nullptr;
}

// The number of names in "a, b, c" (0 for null), for the arity check of JITKERN_EXPORT_NAMED.
constexpr int32_t count_names(const char* names) {
  if (names == nullptr) return 0;
  int32_t n = 1;
  for (const char* p = names; *p != '\0'; ++p) n += *p == ',';
  return n;
}

template <typename T, typename = void>
struct ArgCaster {
  static_assert(sizeof(T) == 0,
                "JITKERN_EXPORT: unsupported parameter type; use jitkern::TensorView, "
                "jitkern::Optional<jitkern::TensorView>, an integer, a floating-point type, bool, DLDataType or DLDevice");
};

template <>
struct ArgCaster<TensorView> {
  static constexpr const char* kExpected = "a tensor";
  static bool cast(const TVMFFIAny& a, Slot<TensorView>* out) {
    const DLTensor* t = as_dltensor(a);
    if (t == nullptr) return false;
    out->emplace(t);
    return true;
  }
};

template <>
struct ArgCaster<Optional<TensorView>> {
  static constexpr const char* kExpected = "a tensor or None";
  static bool cast(const TVMFFIAny& a, Slot<Optional<TensorView>>* out) {
    if (a.type_index == kTVMFFINone) return out->emplace(), true;
    const DLTensor* t = as_dltensor(a);
    if (t == nullptr) return false;
    out->emplace(TensorView(t));
    return true;
  }
};

template <typename T>
struct ArgCaster<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static constexpr const char* kExpected = std::is_signed_v<T> ? "an integer in the range of the C++ parameter type"
                                                               : "a non-negative integer in the range of the C++ parameter type";
  static bool cast(const TVMFFIAny& a, Slot<T>* out) {
    if (a.type_index != kTVMFFIInt) return false;  // not a bool: True is no head count
    const int64_t v = a.v_int64;
    if constexpr (std::is_signed_v<T>) {
      if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) || v > static_cast<int64_t>(std::numeric_limits<T>::max()))
        return false;
    } else {
      if (v < 0 || static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
    }
    out->emplace(static_cast<T>(v));
    return true;
  }
};

template <>
struct ArgCaster<bool> {
  static constexpr const char* kExpected = "a bool";
  static bool cast(const TVMFFIAny& a, Slot<bool>* out) {
    if (a.type_index != kTVMFFIBool && a.type_index != kTVMFFIInt) return false;
    out->emplace(a.v_int64 != 0);
    return true;
  }
};

template <typename T>
struct ArgCaster<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static constexpr const char* kExpected = "a float";
  static bool cast(const TVMFFIAny& a, Slot<T>* out) {
    if (a.type_index == kTVMFFIFloat) return out->emplace(static_cast<T>(a.v_float64)), true;
    if (a.type_index == kTVMFFIInt) return out->emplace(static_cast<T>(a.v_int64)), true;
    return false;
  }
};

template <>
struct ArgCaster<DLDataType> {
  static constexpr const char* kExpected = "a dtype";
  static bool cast(const TVMFFIAny& a, Slot<DLDataType>* out) {
    if (a.type_index != kTVMFFIDataType) return false;
    return out->emplace(a.v_dtype), true;
  }
};

template <>
struct ArgCaster<DLDevice> {
  static constexpr const char* kExpected = "a device";
  static bool cast(const TVMFFIAny& a, Slot<DLDevice>* out) {
    if (a.type_index != kTVMFFIDevice) return false;
    return out->emplace(a.v_device), true;
  }
};

template <typename R>
inline void set_result(TVMFFIAny* result, R value) {
  if constexpr (std::is_same_v<R, bool>) {
    result->type_index = kTVMFFIBool, result->zero_padding = 0, result->v_int64 = value;
  } else if constexpr (std::is_integral_v<R>) {
    result->type_index = kTVMFFIInt, result->zero_padding = 0, result->v_int64 = static_cast<int64_t>(value);
  } else if constexpr (std::is_floating_point_v<R>) {
    result->type_index = kTVMFFIFloat, result->zero_padding = 0, result->v_float64 = static_cast<double>(value);
  } else if constexpr (std::is_same_v<R, ::jitkern::Tensor>) {  // reaches Python as the caller's tensor type
    result->type_index = kTVMFFITensor, result->zero_padding = 0, result->v_obj = static_cast<TVMFFIObject*>(value.release());
  } else {
    static_assert(sizeof(R) == 0, "JITKERN_EXPORT: return void, an integer, a float, bool or jitkern::Tensor");
  }
}

// The function pointer an export expression names: a function or function pointer as it is, a
// capture-less lambda through its conversion (unary +).
template <typename F>
constexpr auto function_pointer(F f) {
  if constexpr (std::is_pointer_v<F>) return f;
  else return +f;
}

template <typename F>
struct Signature;
template <typename R, typename... A>
struct Signature<R (*)(A...)> {
  using Result = R;
  static constexpr int32_t kArity = sizeof...(A);
  template <auto Fn, std::size_t... I>
  static int invoke(const char* name, const char* arg_names, const TVMFFIAny* args, TVMFFIAny* result, std::index_sequence<I...>) {
    Slots<std::index_sequence<I...>, std::remove_cv_t<std::remove_reference_t<A>>...> values;
    int32_t failed = -1;
    // Convert left to right, stopping at the first argument that does not fit.
    ((failed < 0 && !ArgCaster<std::remove_cv_t<std::remove_reference_t<A>>>::cast(args[I], &slot_at<I>(values))
          ? (failed = static_cast<int32_t>(I))
          : 0),
     ...);
    if (failed >= 0) {
      static constexpr const char* kExpected[] = {ArgCaster<std::remove_cv_t<std::remove_reference_t<A>>>::kExpected..., ""};
      raise_argument_error({name, arg_names, failed, kExpected[failed], &args[failed]});
      return -1;
    }
    if constexpr (std::is_void_v<R>) {
      Fn(slot_at<I>(values).get()...);
    } else {
      set_result<R>(result, Fn(slot_at<I>(values).get()...));
    }
    return 0;
  }
};

template <auto Fn>
inline int safe_call(const char* name, const char* arg_names, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result) noexcept {
  using Sig = Signature<decltype(Fn)>;
  if (num_args != Sig::kArity) [[unlikely]] {
    raise_arity_error({name, arg_names, Sig::kArity, num_args});
    return -1;
  }
  try {
    return Sig::template invoke<Fn>(name, arg_names, args, result, std::make_index_sequence<Sig::kArity>{});
  } catch (const std::exception& e) {
    raise_exception(name, e);
  } catch (...) {
    raise_unknown_exception(name);
  }
  return -1;
}

}  // namespace ffi
}  // namespace jitkern
