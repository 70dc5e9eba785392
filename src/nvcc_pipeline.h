// nvcc runs its phases one after another: host preprocessing and cudafe++, then device
// preprocessing, cicc, ptxas and fatbinary, then the host compile of the generated code. The device
// chain needs from cudafe++ only the module id, so the engine writes that id itself and runs the two
// chains in parallel. The commands come from `nvcc --dryrun`, so flags and paths are nvcc's own;
// anything unexpected in the dry run means a plain nvcc invocation instead.
#pragma once

#include <string>
#include <vector>

namespace jitkern::nvcc {

struct Pipeline {
  std::vector<std::string> env;                                // NAME=value
  std::vector<std::string> host_chain, device_chain, finish;  // shell command lines
  std::string module_id_path;
};

// Plans the pipeline from `nvcc --dryrun --keep` output; the host preprocessing step also writes
// make-style dependencies to `depfile`. False when the dry run has a shape this parser does not know
// (the caller then runs nvcc as one command).
bool plan(const std::string& dryrun, const std::string& depfile, Pipeline* out);

}  // namespace jitkern::nvcc
