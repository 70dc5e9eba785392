// jitkern::Optional<T>: an optional kernel argument (None from Python), e.g.
// Optional<TensorView> bias. Include it without the export glue in kernel files.
#pragma once

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles device code only

#include <jitkern/utils.h>

namespace jitkern {

// An optional kernel argument (None from Python). Deliberately not std::optional: nvcc 13's front
// end hits an internal error instantiating std::optional's destructor in this context.
template <typename T>
class Optional {
 public:
  Optional() = default;
  Optional(const T& value) : m_value(value), m_has_value(true) {}  // NOLINT(google-explicit-constructor)
  bool has_value() const { return m_has_value; }
  explicit operator bool() const { return m_has_value; }
  const T& value(host::DebugInfo where = {}) const {
    if (!m_has_value) [[unlikely]]
      host::detail::panic_with(where, "Optional::value()", "the optional argument is None");
    return m_value;
  }
  const T& operator*() const { return value(); }
  const T* operator->() const { return &value(); }
  T value_or(const T& fallback) const { return m_has_value ? m_value : fallback; }

 private:
  T m_value{};
  bool m_has_value = false;
};

}  // namespace jitkern
#endif  // __CUDACC_RTC__
