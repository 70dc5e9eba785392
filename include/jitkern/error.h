// The exception type thrown by host::Panic, host::RuntimeCheck and TensorMatcher.
// Separate from utils.h because <stdexcept> pulls <string>; include it only where you catch.
#pragma once

#include <stdexcept>

namespace host {
struct PanicError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace host
