// The host prelude precompiled (GCC's precompiled headers) for the host passes of builds run many at
// once: each host pass of a module that asks for the prelude (JitSpec host_prelude) otherwise parses
// it again, half its time. One per process and set of host-pass flags, in a temporary directory
// removed at exit; never part of a key or a cache entry: a module compiled with it is the module
// compiled without it (its host object byte for byte), and a prelude whose headers changed after it was compiled is
// not used.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace jitkern::host_prelude {

struct Precompiled {
  std::string header;   // what the host pass's -include names instead of the prelude (the .gch lies beside it)
  std::string depfile;  // the headers it was compiled from (the module's dependencies too)
  std::string dir;      // its directory: none of its files is a dependency
};

// The precompiled prelude for a host pass run with `flags` (its command without the prelude's -include,
// its inputs and outputs), if one is ready and every header it read is unchanged. Otherwise none; with
// `start`, the first caller for these flags has it compiled in the background (a build does not wait
// for it). Only for GCC (`gcc`): clang has other rules for precompiled headers.
std::optional<Precompiled> find(const std::vector<std::string>& flags, const std::string& prelude, bool gcc, bool start,
                                double timeout_s);

}  // namespace jitkern::host_prelude
