// Internals of TensorMatcher: the pattern it records and the runtime library's matcher
// (src/runtime/diagnostics.cc). Not for kernel authors; include <jitkern/tensor.h>.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>

namespace host {
struct DebugInfo;
struct SizeRef;
struct SymbolicDType;
struct SymbolicDevice;

namespace detail {

struct MatcherSpec {
  const SizeRef* shape;
  std::size_t ndim;
  const SizeRef* strides;  // null: contiguous required
  std::size_t num_strides;
  const DLDataType* dtypes;  // null: any (subject to the symbol)
  std::size_t num_dtypes;
  SymbolicDType* dtype_symbol;
  uint64_t device_mask;  // 0: any (subject to the symbol)
  SymbolicDevice* device_symbol;
};

void match_tensor(const MatcherSpec& spec, const DLTensor* tensor, const char* name, const DebugInfo& where);

// Whether two strided tensors share a byte: 1 they do, 0 they do not, -1 not decided (a search too large to finish,
// or elements narrower than a byte).
int tensors_overlap(const DLTensor* a, const DLTensor* b);

}  // namespace detail
}  // namespace host
