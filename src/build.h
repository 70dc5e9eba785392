// The engine's build entry point for the loader: the library found or built, open on the checked
// file and with the entry's lock held until it is mapped (so that `jitkern cache prune` cannot remove
// it between lookup and dlopen).
#pragma once

#include <jitkern/jit.h>

#include "store.h"

namespace jitkern {

// build(), returning the store's Found; `*compiled`: whether this call ran the compiler.
// The directory of the engine's library (the package's lib/ when installed).
const std::string& engine_lib_dir();

// Where the libraries modules link (jitkern's runtime, tvm-ffi) are for this process: module.cc loads
// them from there when a module needs one the process has not loaded (modules carry no RUNPATH).
void add_library_dirs(const std::vector<std::string>& dirs);

store::Found find_or_build(const BuildRequest& request, const EngineConfig& config, bool* compiled);

}  // namespace jitkern
