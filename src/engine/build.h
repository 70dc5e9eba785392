// The engine's build entry point for the loader: the library found or built, open on the checked
// file and with the entry's lock held until it is mapped (so that `jitkern cache prune` cannot remove
// it between lookup and dlopen).
#pragma once

#include <jitkern/jit.h>

#include "store/store.h"

namespace jitkern {

// build(), returning the store's Found; `*compiled`: whether this call ran the compiler.

// Where the libraries modules link are for this process (jitkern's runtime and tvm-ffi: the configuration's
// directories; the CUDA runtime: beside the configuration's nvcc, looked up only when needed). module.cc
// loads one from there when a module needs it and the process has not loaded it (modules carry no
// RUNPATH). Cheap on the warm path: it records the configuration's values.
void note_library_sources(const config::Config& config);

store::Found find_or_build(const BuildRequest& request, const EngineConfig& config, bool* compiled);

}  // namespace jitkern
