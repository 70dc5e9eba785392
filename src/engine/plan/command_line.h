// The flags of a request (extra_cflags, extra_cuda_cflags, extra_ldflags) as the compilers get them:
// everything they name is either in the key or a tracked dependency, and nothing depends on the
// caller's working directory (compilers run in their scratch directory).
#pragma once

#include <string>
#include <vector>

#include "base/fs_util.h"

namespace jitkern::command_line {

enum class Tool { kHost, kNvcc, kLink };

// `flags` (request field `field`, given to `tool`) with response files (@file, and nvcc's
// --options-file / -optf) expanded in place, so that their options are part of the key, and every
// path a flag names made absolute against `cwd`. Throws std::invalid_argument naming the flag for one
// whose inputs the engine cannot track (-B, -specs, --sysroot, -fplugin, profile data, -ccbin, ...) or
// a response file that cannot be read.
std::vector<std::string> resolve(const std::vector<std::string>& flags, const char* field, Tool tool, const fs::WorkingDir& cwd);

// The directories that header search flags among a resolved command (-I, -isystem, -iquote, -idirafter, nvcc's
// --include-path= and --system-include=, attached, after '=' or as the next argument, also inside -Xcompiler) name.
std::vector<std::string> header_directories(const std::vector<std::string>& argv);

// The files that options among resolved link flags make the linker read besides its inputs (version
// scripts, linker scripts, dynamic lists): dependencies the linker's own trace does not list.
std::vector<std::string> linker_option_files(const std::vector<std::string>& ldflags);

// A flag that passes the linker arguments: -Wl,a,b (kComma); -Xlinker a, or GCC's alias --for-linker a, with
// the argument in the next flag (kNext); --for-linker=a (kAttached). Every place that reads linker flags asks this.
enum class LinkerFlag { kNone, kComma, kNext, kAttached };
LinkerFlag linker_flag(const std::string& flag);

// A response file's text split as GCC splits it (blanks separate; quotes and backslashes escape).
std::vector<std::string> split_response_file(const std::string& text);

}  // namespace jitkern::command_line
