// The engine's build entry point with the cache entry's lock kept: load() maps the library while
// holding it, so that `jitkern cache prune` cannot remove the file between lookup and dlopen.
#pragma once

#include <jitkern/jit.h>

#include <memory>
#include <string>

#include "fs_util.h"

namespace jitkern {

// build(), and `*hold` (if given) receives the entry's lock (shared after a cache hit, exclusive after a
// compile), to be released once the library is loaded; `*compiled` (if given): whether this call ran
// the compiler.
std::string build_holding(const BuildRequest& request, const EngineConfig& config, std::unique_ptr<fs::FileLock>* hold,
                          bool* compiled = nullptr);

}  // namespace jitkern
