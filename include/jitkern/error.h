// The exception type thrown by host::Panic, host::RuntimeCheck and TensorMatcher.
// Separate from utils.h because <stdexcept> pulls <string>; include it only where you catch.
#pragma once

#include <jitkern/utils.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace host {
struct PanicError : std::runtime_error {
  explicit PanicError(const std::string& message, ErrorKind kind = ErrorKind::kRuntime)
      : std::runtime_error(message), kind(kind) {}
  ErrorKind kind;  // the Python exception type it becomes
  // The message without its "<what> at <file:line> in <function>: " prefix.
  std::string_view root_cause() const {
    const std::string_view s = what();
    const std::size_t in = s.find(" in "), colon = s.find(": ", in == std::string_view::npos ? 0 : in);
    return colon == std::string_view::npos ? s : s.substr(colon + 2);
  }
};
}  // namespace host
