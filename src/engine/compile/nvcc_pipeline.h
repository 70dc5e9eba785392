// nvcc runs its phases one after another: host preprocessing and cudafe++, then device
// preprocessing, cicc, ptxas and fatbinary, then the host compile of the generated code. The engine
// runs them as parallel chains instead:
//   host:   preprocessing and cudafe++ (which needs from the device side only the module id: the
//           engine writes it itself), then, once the host stub of the kernels exists, the host compile;
//   device: preprocessing, cicc (which writes the stub), ptxas, fatbinary, in parallel with the host
//           compile. Where CPUs are free, cicc's front end alone (--device-syntax-only) writes the stub
//           in a process of its own, so that the host compile need not wait for cicc's code generation.
// nvcc's host compile also includes the fatbin as data, which would make it wait for ptxas; the
// engine writes that included file as a declaration instead (fatbin_declaration) and links the fatbin
// in from an object of its own (fatbin_assembly). The commands come from `nvcc --dryrun`, so flags
// and paths are nvcc's own; anything unexpected in the dry run means a plain nvcc invocation instead.
#pragma once

#include <string>
#include <vector>

namespace jitkern::nvcc {

struct Pipeline {
  std::vector<std::string> env;             // NAME=value
  std::vector<std::string> host_chain;      // preprocessing, cudafe++
  std::string device_preprocess;            // its output feeds every cicc run
  std::string cicc;                         // nvcc's: the PTX and the host stub
  std::string cicc_frontend;                // the host stub alone (and side files nothing reads)
  std::string cicc_ptx;                     // `cicc` with its stub written to a side file (beside cicc_frontend)
  std::vector<std::string> device_back;     // ptxas, fatbinary (the fatbin file only)
  std::string host_compile;                 // after host_chain and the stub
  std::string host_preprocessed;            // host_chain's first output: what cudafe++ reads
  std::string module_id_path;
  std::string fatbin_path;                  // the fatbin fatbinary creates
  std::string embedded_fatbin_path;         // the file the stub includes (fatbin_declaration())
};

// Plans the pipeline from `nvcc --dryrun --keep` output; the host preprocessing step also writes
// make-style dependencies to `depfile`. False when the dry run has a shape this parser does not know
// (the caller then runs nvcc as one command).
bool plan(const std::string& dryrun, const std::string& depfile, Pipeline* out);

// The steps of `nvcc -fatbin --dryrun --keep` (device preprocessing, which also writes make-style
// dependencies to `depfile`, cicc, ptxas, fatbinary) in `cmds`, its variables in `env`: what the engine
// runs for a host_without_nvcc module's device image. False for any other shape.
bool fatbin_commands(const std::string& dryrun, const std::string& depfile, std::vector<std::string>* env, std::vector<std::string>* cmds);

// The file the host stub includes in place of nvcc's embedded fatbin: the runtime's wrapper around a
// fatbin that fatbin_assembly() defines.
std::string fatbin_declaration();

// Assembler source that embeds the fatbin at `fatbin_path` (relative to the assembler's directory or
// absolute) under the symbol fatbin_declaration() refers to.
std::string fatbin_assembly(const std::string& fatbin_path);
// The same for a host_without_nvcc module's device image of device pass `part` of `passes`, under
// JITKERN_DEVICE_IMAGE_SYMBOL (part 0, with the count of passes) or that name followed by _<part>
// (<jitkern/detail/device_image.h>).
std::string image_assembly(const std::string& fatbin_path, int part = 0, int passes = 1);
// Under both symbols: a host_without_cudafe module's fatbin, which its host side reaches by either
// (the rewritten host side looks its kernels up in it; nvcc's host chain registers them from it).
std::string fatbin_and_image_assembly(const std::string& fatbin_path);

// host_without_cudafe: nvcc's host compile (`pipe.host_compile`) of the rewritten, already preprocessed
// `file` in place of cudafe++'s output; "" where the command has an unexpected shape.
std::string rewritten_host_compile(const Pipeline& pipe, const std::string& file);

}  // namespace jitkern::nvcc
