// One build attempt's compiler steps, in its scratch directory, and the backends that run them (one file
// each: cxx.cc the host compiler and the link, nvcc.cc nvcc's object, host_pass.cc the host pass beside
// nvcc's device image, nvrtc_image.cc NVRTC's image after it). Every step runs in the scratch
// directory, in the environment compile_env builds, with its command recorded for the failure log.
#pragma once

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/cpus.h"
#include "config/config.h"
#include "store/dependencies.h"
#include "base/fs_util.h"
#include "plan/plan.h"

namespace jitkern::compile {

// A failure worth remembering: the compiler ran to completion and rejected the sources. Anything else
// (a signal, a timeout, a full disk) is transient and retried by the next call.
struct Transient : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using deps::Depfile;

double seconds_since(std::chrono::steady_clock::time_point t0);
std::string format_seconds(double s);
inline int first_failure(int a, int b) { return a != 0 ? a : b; }

class Steps {
 public:
  Steps(const plan::Plan& p, const config::Config& cfg, const std::string& scratch, bool parallel_build);

  std::string log() const { return scratch + "/build.log"; }
  // Device pass `part`'s output (one per pass of a module built in several, plan::Plan::device_parts).
  std::string device_log(int part = 0) const { return scratch + (part == 0 ? "/device.log" : "/device." + std::to_string(part) + ".log"); }
  std::string stub_log() const { return scratch + "/stub.log"; }
  // Everything the compilers printed. nvcc's host and device phases parse the same source, so an error
  // both report is shown once: the device phases' output only where it adds something, under the names of
  // the passes that printed it where several ran.
  std::string output() const;
  // "the device pass of JITKERN_DEVICE_PART=1 (of 3)": the one pass whose output holds `diagnostic`, where
  // several ran; else (one pass, the diagnostic in several or in the host pass's output) empty.
  std::string device_pass_of(const std::string& diagnostic) const;
  std::string in_dir(const std::string& command) const { return "(cd " + fs::shell_quote(scratch) + " && " + command + ")"; }

  void record(const std::string& command);
  // Runs `argv` (in `cwd`) into the build log.
  int run_argv(const std::vector<std::string>& argv, const std::string& cwd = {});
  // A link, with the linker listing every file it reads (--trace): the archives, objects and -l
  // libraries it took are dependencies like headers. The list stays out of the build log.
  int run_link(std::vector<std::string> argv);
  // A step started with TMPDIR in the scratch directory (relative where the step runs there: nvcc puts
  // TMPDIR into the commands it runs through a shell, and the cache path may hold $ or `).
  fs::Process start(const std::vector<std::string>& argv, const std::string& log_path, const std::string& cwd,
                    std::vector<std::string> env = {}) const;
  int run_shell_chain(const std::vector<std::string>& cmds, const std::vector<std::string>& env, const std::string& log_path);
  // `nvcc --dryrun --keep` of `argv` with every name relative to the scratch directory, its kept files in
  // `keep_dir` there; false where the phases must not run that way (JITKERN_NVCC_PIPELINE=0, an argument
  // the shell would expand, a failed dry run).
  bool dry_run(std::vector<std::string> argv, std::string* text, const std::string& keep_dir = "nvcc");
  // nvcc run as one command passes the scratch directory through a shell: refused where it would run something.
  void refuse_a_path_a_shell_would_run() const;
  // A step's first error lines (else its first lines), for a message: the scratch directory is gone when it is read.
  static std::string head_of(const std::string& path);
  // "the device pass of JITKERN_DEVICE_PART=1 (of 3)", "the device passes of JITKERN_DEVICE_PART=1, 2 (of 3)".
  std::string device_passes_name(const std::vector<int>& parts) const;

  const plan::Plan& p;
  const config::Config& cfg;
  const std::vector<std::string> env;  // the compilers' environment (compile_env)
  const std::string scratch;
  const double timeout;
  const bool parallel;  // one of many builds run at once
  const bool nvrtc;     // NVRTC compiles the kernels (after the host pass), else nvcc beside it
  std::string cuda_lib;
  int device_passes = 1;                  // nvcc's device passes run (host_pass.cc's DeviceImages)
  std::vector<std::string> cuda_objects;  // linked beside device.o (the pipeline's fatbin, the image)
  std::string cuda_steps;                 // "host pass 0.81 s, NVRTC 1.52 s" or "host pass 0.81 s beside nvcc 1.70 s"
  std::vector<std::string> commands;
  std::vector<Depfile> depfiles;
  std::string phases;  // "CUDA 4.10 s, C++ 4.12 s, link 0.08 s": the INFO line's detail
};

// Runs every compile and the link into `out`; returns the first non-zero status (fs::wait's encoding).
int run(Steps& s, const std::string& out);
// The CUDA source's objects: nvcc's (nvcc.cc), or a host pass and a device image (host_pass.cc).
int cuda_objects(Steps& s);
int nvcc_object(Steps& s);
int host_pass_and_image(Steps& s);
// nvcc's device image of device pass `part` of `passes` (plan::Plan::device_parts, or 1), prepared here and
// run by the returned task.
std::function<int()> nvcc_image(Steps& s, int part = 0, int passes = 1);
inline constexpr int kNvrtcCannot = 1;  // nvrtc_image: NVRTC cannot compile these kernels, nvcc may
int nvrtc_image(Steps& s, const std::string& cuda_include, std::string* why);

}  // namespace jitkern::compile
