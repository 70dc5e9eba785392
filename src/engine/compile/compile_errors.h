// What a failed compile's message shows of the compiler's output, and the user's likely mistake behind it
// (src/engine/build.cc's fail_build leads with the first error and adds these).
#pragma once

#include "plan/plan.h"

#include <string>

namespace jitkern::compile_errors {

// The cause a failed compile's message leads with, in the user's terms: the compiler's first error in
// the request's own sources ("path:line:col: error: ..." from gcc and clang, "path(line): error: ..."
// from nvcc), else its first error about a wrapper, named by its field, export name and expression
// (gcc reports an error in a wrapper's expression inside export.h's macro, with the wrapper's line in
// a note beside it), else its first error outside the generated sources (in `scratch`) and the
// toolchain, else its first error; empty if there is none.
std::string first_error(const std::string& log, const plan::Plan& p, const std::string& scratch);
// A compiler's output, cut to what a message can carry.
std::string truncated(std::string text);
// The generated sources under the names the compiler's output gives them, for a failure's log.
std::string generated_sources(const plan::Plan& p);
// Whether a compiler's output blames the disk (the linker's "No space left on device").
bool blames_the_disk(const std::string& log);

// The compiler's output with each diagnostic shown once: nvcc's host and device passes print the same
// diagnostic (a "file(line): error" or "file:line:col: error" line and its indented lines, with the notes
// after it) and the same "N errors detected" line, once per pass. A note repeated after another error stays.
std::string each_diagnostic_once(const std::string& output);

// A sentence naming a mistake the output points to, or "": a file of cpp_files that holds CUDA code (the
// host compiler alone compiles those), or a wrapper whose expression names a template without its
// arguments. `cause`: the first error already found (a wrapper's starts with its field and export name).
std::string likely_mistake(const std::string& output, const plan::Plan& p, const std::string& cause);
// The cause a failed compile's message leads with: `cause` (first_error's, or "the compiler ended with ..."), with the likely
// mistake behind it. CUDA code in cpp_files replaces it (the compiler's first error is only its
// consequence: an undeclared blockIdx, a CUDA header the host compiler does not find); a template
// named without arguments is added to it.
std::string leading_cause(const std::string& output, const plan::Plan& p, const std::string& cause);

}  // namespace jitkern::compile_errors
