// The host prelude precompiled (GCC's precompiled headers) for the host passes of builds run many at
// once: each host pass of a module that asks for the prelude (JitSpec host_prelude) otherwise parses
// it again, half its time. One per process and set of host-pass flags, in $TMPDIR (about 40 MB),
// removed at exit and, if the process died, by the next process that makes one. Never part of a key
// or a cache entry: a module's host object is the one the textual prelude gives, byte for byte; a
// prelude whose headers changed, or whose files are gone, is not used; a host pass that fails with it
// is run again without it.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace jitkern::host_prelude {

struct Precompiled {
  std::string header;                // what the host pass's -include names instead of the prelude
  std::vector<std::string> headers;  // the files it was compiled from: dependencies of the module too
  std::string key;                   // for retire()
};

// The precompiled prelude for a host pass run with `flags` (its command without the prelude's -include,
// its inputs and outputs), if one is ready, its files are there and every header it read is unchanged.
// Otherwise none; with `start`, one is compiled in the background (a build does not wait for it), one at
// a time and for a few flag sets at most. Only for GCC (`gcc`): clang has other rules for precompiled headers.
// `env`: the compilers' environment (compile_env); `temp_dir`: where the precompiled prelude goes.
std::optional<Precompiled> find(const std::vector<std::string>& flags, const std::string& prelude, bool gcc, bool start,
                                double timeout_s, const std::vector<std::string>& env, const std::string& temp_dir);

// Stops using it (a host pass failed with it), saying why.
void retire(const Precompiled& precompiled, const std::string& why);

}  // namespace jitkern::host_prelude
