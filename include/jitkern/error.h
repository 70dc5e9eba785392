// The exception type thrown by host::Panic, host::RuntimeCheck and TensorMatcher.
// Separate from utils.h because <stdexcept> pulls <string>; include it only where you catch.
#pragma once

#include <jitkern/utils.h>

#include <stdexcept>
#include <string>

namespace host {
struct PanicError : std::runtime_error {
  explicit PanicError(const std::string& message, ErrorKind kind = ErrorKind::kRuntime)
      : std::runtime_error(message), kind(kind) {}
  ErrorKind kind;  // the Python exception type it becomes
};
}  // namespace host
