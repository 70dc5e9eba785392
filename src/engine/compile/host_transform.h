// The host side of a CUDA translation unit without cudafe++: nvcc's host preprocessing output
// (__CUDACC__ defined, __CUDA_ARCH__ not) rewritten so that the host compiler alone compiles it, as
// cudafe++'s output would be compiled:
//   - bodies of device-only functions become `{ __builtin_unreachable(); }` (never run on the host),
//     kernels' bodies `{}` with __attribute__((noipa)): a distinct, never-folded host function whose
//     symbol is the kernel's mangled name (the launch finds the kernel in the device image by it);
//   - CUDA's attributes (global, device, host, launch_bounds, grid_constant, ...) are removed;
//   - the runtime calls that take a kernel (launches, attributes, occupancy) are renamed to
//     jitkern_compat_<name>, defined by <jitkern/compat/host_launch.h>, which map the stub to the kernel;
//     `kernel<<<config>>>(args)` becomes `::jitkern::compat::chevron(kernel, config)(args)`, a routed launch.
// Where the rewrite could be wrong it refuses (the build then runs nvcc's host chain), saying why:
// triple-chevron launches of anything but a (qualified, templated) name, __managed__ variables, runtime calls that need cudafe++'s registration
// (symbols, graph kernel nodes), static kernels, and device-only
// functions with a deduced return type that are neither inline nor templates.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace jitkern::host_transform {

// Part of the build key of every module built this way: bump it with any change to what the rewrite
// writes (tests/cpp/test_host_transform.cc pins its output for a fixed unit to this version).
inline constexpr int kVersion = 1;

struct Result {
  bool ok = false;
  std::string text;  // the rewritten unit (line numbers kept: removed text leaves its newlines and line markers)
  std::string why;   // refused: the reason, naming the file and line where it was found
  int kernels = 0;   // kernel stubs written
  int emptied = 0;   // device-only function bodies removed
};

// Rewrites `preprocessed` (the host compiler's -E output: line markers, no comments). Files under
// `toolkit_dirs` (the CUDA toolkit's headers, compared by real path) may name what user code may not:
// they declare it. `module_id`: the id cicc compiled the device code with (it names unnamed namespaces
// after it), defined at the end of the unit as jitkern_compat_module_id for the launches' lookups.
Result transform(std::string_view preprocessed, const std::vector<std::string>& toolkit_dirs, const std::string& module_id);

// The end of a rewritten unit's shared prefix: the offset of the line marker where the main file resumes
// after its top-level #include of `header` (as the #include spells it). npos, saying why, where it has
// none, or where the text before it holds a #pragma whose state a precompiled header may not carry as
// the text does (anything but GCC diagnostic, nvcc's own, balanced GCC visibility push/pop).
std::size_t shared_prefix_end(std::string_view text, const std::string& header, std::string* why);

// The unit `text` from `end` on, as a unit that starts with the text before `end` precompiled into
// `gch` (GCC's `#pragma GCC pch_preprocess`, compiled as preprocessed text): the same object, byte for byte.
std::string after_prefix(std::string_view text, std::size_t end, const std::string& gch);

// The runtime functions that take a kernel and are routed through the module's device image.
const std::vector<std::string>& routed_functions();

}  // namespace jitkern::host_transform
