// jitkern::TensorView: a non-owning, trivially copyable view of a DLTensor, the lean default for
// kernel entry points. It needs only <dlpack/dlpack.h>, unlike tvm::ffi::TensorView whose headers
// triple nvcc's compile time.
#pragma once

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles device code only

#include <jitkern/utils.h>

#include <cstdint>

namespace jitkern {

// A read-only (pointer, length) pair over int64 metadata; indexing is unchecked like a span.
struct IntArrayView {
  const int64_t* ptr = nullptr;
  int64_t len = 0;
  constexpr const int64_t* data() const { return ptr; }
  constexpr int64_t size() const { return len; }
  constexpr int64_t operator[](int64_t i) const { return ptr[i]; }
  constexpr const int64_t* begin() const { return ptr; }
  constexpr const int64_t* end() const { return ptr + len; }
  constexpr bool empty() const { return len == 0; }
  constexpr int64_t front() const { return ptr[0]; }
  constexpr int64_t back() const { return ptr[len - 1]; }
};

namespace detail {
[[noreturn]] void panic_dim_index(const DLTensor* t, int64_t index, const host::DebugInfo& where);
[[noreturn]] void panic_implicit_strides(const host::DebugInfo& where);
[[noreturn]] void panic_null_view(const host::DebugInfo& where);
}  // namespace detail

class TensorView {
 public:
  constexpr TensorView() = default;
  constexpr explicit TensorView(const DLTensor* tensor) : m_tensor(tensor) {}

  constexpr const DLTensor* get() const { return m_tensor; }
  const DLTensor* operator->() const { return checked(); }
  explicit constexpr operator bool() const { return m_tensor != nullptr; }

  int32_t dim() const { return checked()->ndim; }
  int32_t ndim() const { return checked()->ndim; }
  IntArrayView shape() const { return {checked()->shape, checked()->ndim}; }
  // Explicit strides; DLPack producers may leave them null for compact tensors, in which case
  // use stride(i), which computes them.
  IntArrayView strides(host::DebugInfo where = {}) const {
    if (checked()->strides == nullptr && m_tensor->ndim > 0) detail::panic_implicit_strides(where);
    return {m_tensor->strides, m_tensor->ndim};
  }
  // Negative indices count from the end, as in PyTorch.
  int64_t size(int64_t i, host::DebugInfo where = {}) const { return m_tensor->shape[normalize(i, where)]; }
  int64_t stride(int64_t i, host::DebugInfo where = {}) const {
    const int64_t d = normalize(i, where);
    if (m_tensor->strides != nullptr) return m_tensor->strides[d];
    int64_t s = 1;
    for (int64_t k = m_tensor->ndim - 1; k > d; --k) s *= m_tensor->shape[k];
    return s;
  }
  DLDataType dtype() const { return checked()->dtype; }
  DLDevice device() const { return checked()->device; }
  void* data_ptr() const { return static_cast<char*>(checked()->data) + m_tensor->byte_offset; }
  int64_t numel() const {
    int64_t n = 1;
    for (int32_t d = 0; d < checked()->ndim; ++d) n *= m_tensor->shape[d];
    return n;
  }
  // Row-major contiguity; dimensions of size 1 may carry any stride (as in PyTorch).
  bool is_contiguous() const {
    if (checked()->strides == nullptr) return true;
    for (int32_t d = 0; d < m_tensor->ndim; ++d)
      if (m_tensor->shape[d] == 0) return true;  // no elements: any strides (numpy gives empty arrays odd ones)
    int64_t expected = 1;
    for (int32_t d = m_tensor->ndim - 1; d >= 0; --d) {
      if (m_tensor->shape[d] == 1) continue;
      if (m_tensor->strides[d] != expected) return false;
      expected *= m_tensor->shape[d];
    }
    return true;
  }

 private:
  const DLTensor* checked(host::DebugInfo where = {}) const {
    if (m_tensor == nullptr) [[unlikely]]
      detail::panic_null_view(where);
    return m_tensor;
  }
  int64_t normalize(int64_t i, const host::DebugInfo& where) const {
    const int64_t n = checked()->ndim;
    const int64_t d = i < 0 ? i + n : i;
    if (d < 0 || d >= n) [[unlikely]]
      detail::panic_dim_index(m_tensor, i, where);
    return d;
  }
  const DLTensor* m_tensor = nullptr;
};

}  // namespace jitkern
#endif  // __CUDACC_RTC__
