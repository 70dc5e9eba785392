// jitkern::Tensor: an owned tensor allocated by the caller's framework through tvm-ffi's environment
// allocator (for a call from PyTorch: torch's caching allocator, on the current stream). Returned
// from an exported function it reaches Python as the caller's own tensor type (a torch.Tensor), so
// an op can allocate its output in C++ instead of paying for a Python-level torch.empty_like.
//
// Only a module links tvm-ffi (the runtime library does not), so everything here is inline.
#pragma once

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles device code only

#include <jitkern/tensor_view.h>
#include <jitkern/utils.h>
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/extra/c_env_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <utility>

namespace jitkern {

class Tensor {
 public:
  Tensor() = default;
  Tensor(Tensor&& other) noexcept : m_handle(std::exchange(other.m_handle, nullptr)) {}
  Tensor& operator=(Tensor&& other) noexcept {
    if (this != &other) reset(), m_handle = std::exchange(other.m_handle, nullptr);
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() { reset(); }

  // A new, uninitialised, compact tensor with `like`'s shape, dtype and device.
  static Tensor empty_like(TensorView like, host::DebugInfo where = {}) {
    return allocate(like.dim(), like.shape().data(), like.dtype(), like.device(), where);
  }
  static Tensor empty(std::initializer_list<int64_t> shape, DLDataType dtype, DLDevice device, host::DebugInfo where = {}) {
    return allocate(static_cast<int32_t>(shape.size()), shape.begin(), dtype, device, where);
  }

  explicit operator bool() const { return m_handle != nullptr; }
  TensorView view() const { return TensorView(m_handle == nullptr ? nullptr : dl_tensor()); }
  // Hands the reference to the caller (the export layer, which returns it to tvm-ffi).
  TVMFFIObjectHandle release() { return std::exchange(m_handle, nullptr); }

 private:
  static Tensor allocate(int32_t ndim, const int64_t* shape, DLDataType dtype, DLDevice device, const host::DebugInfo& where) {
    DLTensor prototype{};
    prototype.ndim = ndim;
    prototype.shape = const_cast<int64_t*>(shape);
    prototype.dtype = dtype;
    prototype.device = device;
    Tensor t;
    if (TVMFFIEnvTensorAlloc(&prototype, &t.m_handle) != 0) [[unlikely]] {
      // The reason, copied out of tvm-ffi's error object (no <string>: this header stays cheap to compile).
      char why[512] = "no reason given";
      TVMFFIObjectHandle error = nullptr;
      TVMFFIErrorMoveFromRaised(&error);
      if (error != nullptr) {
        const TVMFFIByteArray& m = TVMFFIErrorGetCellPtr(error)->message;
        const std::size_t n = m.size < sizeof(why) - 1 ? m.size : sizeof(why) - 1;
        std::memcpy(why, m.data, n);
        why[n] = '\0';
        TVMFFIObjectDecRef(error);
      }
      host::detail::panic_with(where, "jitkern::Tensor", "cannot allocate a tensor through the caller's framework (",
                               static_cast<const char*>(why),
                               "). Call with framework tensors (e.g. torch.Tensor), or pass preallocated outputs where the op takes them.");
    }
    return t;
  }
  const DLTensor* dl_tensor() const {
    return TVMFFITensorGetDLTensorPtr(m_handle);
  }
  void reset() {
    if (m_handle != nullptr) TVMFFIObjectDecRef(std::exchange(m_handle, nullptr));
  }

  TVMFFIObjectHandle m_handle = nullptr;
};

}  // namespace jitkern
#endif  // __CUDACC_RTC__
