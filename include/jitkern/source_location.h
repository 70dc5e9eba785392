// Portable std::source_location for host code compiled by g++/clang or nvcc.
#pragma once

#if defined(__CUDACC__) && !defined(__cpp_consteval)
// Older nvcc front ends (12.1 and earlier) do not announce consteval, so libstdc++'s
// <source_location> declares nothing. The builtin it relies on is still supported, so
// announce the feature for the duration of the include only.
#pragma push_macro("__cpp_consteval")
#define __cpp_consteval 201811L
#include <source_location>
#pragma pop_macro("__cpp_consteval")
#else
#include <source_location>
#endif

namespace jitkern {
using source_location = std::source_location;
}  // namespace jitkern
