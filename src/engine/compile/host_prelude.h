// Headers precompiled (GCC's precompiled headers) for the host compiles of later builds in this process:
//   - the host prelude, for the host passes of later builds (started by builds run many at once, and by
//     lone ones where CPUs are spare: host_pass.cc's starts_prelude): each host pass of a module that
//     asks for the prelude (JitSpec host_prelude) otherwise parses it again, half its time;
//   - the shared host prefix of host_without_cudafe modules (JitSpec host_shared_files): the rewritten
//     host unit's text up to the end of the headers many modules start with (the reference's kernel
//     files: its tensor.h), which each module's host compile otherwise parses again (0.4-1.5 s).
// One per process and set of flags (and prefix text), in $TMPDIR (40-80 MB), compiled in the background
// (the build that asks first does not wait for it), removed at exit and, if the process died, by the
// next process that makes one. Never part of a key or a cache entry: a module's host object is the one
// the text gives, byte for byte; a prelude whose headers changed, or whose files are gone, is not used;
// a host compile that fails with it is run again without it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace jitkern::host_prelude {

// Whether a find that finds none starts a compile: never; for builds run at once (kMaxFlagSets flag sets a
// process at most); once in a process, beside a lone build (not counted among those).
enum class Start { kNone, kShared, kOnce };

struct Precompiled {
  std::string header;                // what the host pass's -include names instead of the prelude (find_prefix: the .gch)
  std::vector<std::string> headers;  // the files it was compiled from: dependencies of the module too
  std::string key;                   // for retire()
};

// The precompiled prelude for a host pass run with `flags` (its command without the prelude's -include,
// its inputs and outputs), if one is ready, its files are there and every header it read is unchanged.
// Otherwise none; with `start`, one is compiled in the background (a build does not wait for it), one at
// a time and for a few flag sets at most (Start). Only for GCC (`gcc`): clang has other rules for precompiled headers.
// `env`: the compilers' environment (compile_env); `temp_dir`: where the precompiled prelude goes.
std::optional<Precompiled> find(const std::vector<std::string>& flags, const std::string& prelude, bool gcc, Start start,
                                double timeout_s, const std::vector<std::string>& env, const std::string& temp_dir);

// The precompiled shared host prefix for a host_without_cudafe module's host compile `compile` (its
// shell command, run with `env`, with "@prefix@" for the input file): `prefix` (preprocessed, rewritten
// text ending at the main file's level; `prefix_sha256` its digest) compiled as a header by the same
// command; its `header` is then the .gch that a `#pragma GCC pch_preprocess` names. As find() for the
// rest (only GCC, `start`, ...).
std::optional<Precompiled> find_prefix(const std::string& compile, std::string_view prefix, const std::string& prefix_sha256, bool gcc,
                                       bool start, double timeout_s, const std::vector<std::string>& env, const std::string& temp_dir);

// Stops using it (a host pass failed with it), saying why.
void retire(const Precompiled& precompiled, const std::string& why);

}  // namespace jitkern::host_prelude
