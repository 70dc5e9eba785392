// What device code takes from the standard library, for NVRTC (__CUDACC_RTC__), which has none: the
// fixed-width integers and the few type traits the headers and kernels use. Nothing here is compiled by
// nvcc or the host compiler, which use the real <cstdint> and <type_traits>.
#pragma once

#ifdef __CUDACC_RTC__
// As glibc's on LP64 Linux (int64_t is long): kernels' mangled names must match the host pass's.
using int8_t = signed char;
using int16_t = short;
using int32_t = int;
using int64_t = long;
using uint8_t = unsigned char;
using uint16_t = unsigned short;
using uint32_t = unsigned int;
using uint64_t = unsigned long;
using intptr_t = long;
using uintptr_t = unsigned long;

// NVRTC declares memcpy for device code but not GCC's __builtin_memcpy, which nvcc accepts (the same copy).
#define __builtin_memcpy memcpy
// Nor GCC's __builtin_huge_valf (a constant expression: +inf).
#define __builtin_huge_valf() __builtin_bit_cast(float, 0x7f800000u)

#define INT_MAX 2147483647
#define INT_MIN (-2147483647 - 1)
#define INT8_MIN (-128)
#define INT8_MAX 127
#define INT16_MIN (-32768)
#define INT16_MAX 32767
#define UINT8_MAX 255
#define UINT16_MAX 65535
#define INT32_MIN (-2147483647 - 1)
#define INT32_MAX 2147483647
#define UINT32_MAX 4294967295u
#define INT64_MAX 9223372036854775807L
#define INT64_MIN (-9223372036854775807L - 1)
#define UINT64_MAX 18446744073709551615ul

namespace std {
using ::int8_t, ::int16_t, ::int32_t, ::int64_t, ::uint8_t, ::uint16_t, ::uint32_t, ::uint64_t, ::intptr_t, ::uintptr_t;
using size_t = ::size_t;
using ptrdiff_t = ::ptrdiff_t;

template <typename T, T v>
struct integral_constant {
  static constexpr T value = v;
  using value_type = T;
  using type = integral_constant;
  __host__ __device__ constexpr operator value_type() const noexcept { return value; }
  __host__ __device__ constexpr value_type operator()() const noexcept { return value; }
};
using true_type = integral_constant<bool, true>;
using false_type = integral_constant<bool, false>;

template <typename T, typename U>
struct is_same : false_type {};
template <typename T>
struct is_same<T, T> : true_type {};
template <typename T, typename U>
inline constexpr bool is_same_v = is_same<T, U>::value;

template <bool B, typename T, typename F>
struct conditional {
  using type = T;
};
template <typename T, typename F>
struct conditional<false, T, F> {
  using type = F;
};
template <bool B, typename T, typename F>
using conditional_t = typename conditional<B, T, F>::type;

template <bool B, typename T = void>
struct enable_if {};
template <typename T>
struct enable_if<true, T> {
  using type = T;
};
template <bool B, typename T = void>
using enable_if_t = typename enable_if<B, T>::type;

template <typename T>
struct remove_cv {
  using type = T;
};
template <typename T>
struct remove_cv<const T> {
  using type = T;
};
template <typename T>
struct remove_cv<volatile T> {
  using type = T;
};
template <typename T>
struct remove_cv<const volatile T> {
  using type = T;
};
template <typename T>
using remove_cv_t = typename remove_cv<T>::type;
template <typename T>
struct remove_reference {
  using type = T;
};
template <typename T>
struct remove_reference<T&> {
  using type = T;
};
template <typename T>
struct remove_reference<T&&> {
  using type = T;
};
template <typename T>
using remove_reference_t = typename remove_reference<T>::type;
template <typename T>
using remove_cvref_t = remove_cv_t<remove_reference_t<T>>;

template <typename T>
__host__ __device__ constexpr const T& min(const T& a, const T& b) {
  return b < a ? b : a;
}
template <typename T>
__host__ __device__ constexpr const T& max(const T& a, const T& b) {
  return a < b ? b : a;
}
}  // namespace std
#endif
