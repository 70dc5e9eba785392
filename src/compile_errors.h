// What a failed compile's message shows of the compiler's output, and the user's likely mistake behind it
// (src/build.cc's fail_build leads with the first error and adds these).
#pragma once

#include "plan.h"

#include <string>

namespace jitkern::compile_errors {

// The compiler's output with each diagnostic shown once: nvcc's host and device passes print the same
// diagnostic (a "file(line): error" or "file:line:col: error" line and its indented lines, with the notes
// after it) and the same "N errors detected" line, once per pass. A note repeated after another error stays.
std::string each_diagnostic_once(const std::string& output);

// A sentence naming a mistake the output points to, or "": a file of cpp_files that holds CUDA code (the
// host compiler alone compiles those), or a wrapper whose expression names a template without its
// arguments. `cause`: the first error already found (a wrapper's starts with its field and export name).
std::string likely_mistake(const std::string& output, const plan::Plan& p, const std::string& cause);

}  // namespace jitkern::compile_errors
