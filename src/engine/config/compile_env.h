// The environment every compiler step runs in: built from a declared list, never inherited. A
// variable the engine does not declare (CPATH, CPLUS_INCLUDE_PATH, LIBRARY_PATH, GCC_EXEC_PREFIX,
// COMPILER_PATH, NVCC_APPEND_FLAGS, NVCC_PREPEND_FLAGS, NVCC_CCBIN, SOURCE_DATE_EPOCH, ...) cannot
// change a build at all.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace jitkern::compile_env {

struct Variable {
  const char* name;
  const char* value;                      // the engine's fixed value, or nullptr: forwarded
  std::string config::Config::*forwarded;  // a forwarded variable's value, as the configuration resolved it
  const char* why;
};

// Every variable a compiler step sees (TMPDIR is set per step, in the step's scratch directory).
extern const Variable kDeclared[];
extern const std::size_t kDeclaredCount;

// "NAME=value" for each declared variable (forwarded ones only where set), then `step` entries
// ("NAME=value", replacing a declared one of the same name).
std::vector<std::string> make(const config::Config& config, const std::vector<std::string>& step = {});

// `env` (a make() result) with `step` entries added or replacing.
std::vector<std::string> with(std::vector<std::string> env, const std::vector<std::string>& step);

// The forwarded variables' values: what a remembered failure is keyed with besides the commands (a
// library's content key holds the compilers' versions, which PATH picks, not PATH itself).
std::string key(const config::Config& config);

}  // namespace jitkern::compile_env
