// The host pass backend (host_without_nvcc): the host compiler alone compiles the CUDA source's host code
// (with the precompiled prelude where one is ready), beside nvcc's device image or before NVRTC's.
#include <unistd.h>

#include <algorithm>
#include <future>
#include <optional>

#include "compile/host_prelude.h"
#include "base/log.h"
#include "compile/nvcc_pipeline.h"
#include "compile/steps.h"

namespace jitkern::compile {
namespace {

// The host pass. A host_prelude module's -includes the prelude precompiled where one is ready for its
// flags (the same object, byte for byte; builds run many at once have it compiled; GCC ignores it after
// another -include, so only where the prelude's is the first); `*note` then says so. A failure with it
// retires it and runs the pass again without: a precompiled header never fails a module.
int run_host_pass(Steps& s, const std::vector<std::string>& flags, const std::vector<std::string>& io, std::string* note) {
  auto host = flags;
  host.insert(host.end(), io.begin(), io.end());
  const auto at = std::find(flags.begin(), flags.end(), s.p.host_prelude);
  std::optional<host_prelude::Precompiled> pch;
  if (!s.p.host_prelude.empty() && at != flags.begin() && at != flags.end() && *(at - 1) == "-include" &&
      std::find(flags.begin(), at - 1, "-include") == at - 1) {
    std::vector<std::string> rest(flags.begin(), at - 1);
    rest.insert(rest.end(), at + 1, flags.end());
    pch = host_prelude::find(rest, s.p.host_prelude, s.p.host_cxx_gcc, s.parallel, s.timeout, s.env, config::temp_dir(s.cfg));
  }
  if (pch) {
    auto with = host;
    with[at - flags.begin()] = pch->header;
    s.record(s.in_dir(fs::join_command(with)));
    const std::string attempt_log = s.scratch + "/host_pass_precompiled.log";
    const int rc = fs::wait(s.start(with, attempt_log, s.scratch), s.timeout);
    std::string text;
    fs::read_file(attempt_log, &text);
    if (rc == 0 || rc == fs::kTimedOut || rc == fs::kInterrupted) {
      if (!text.empty()) fs::append_file(s.log(), text);  // its warnings
      if (rc == 0) s.depfiles.push_back({"", "", pch->headers}), *note = " (prelude precompiled)";
      return rc;
    }
    host_prelude::retire(*pch, s.p.name + "'s host pass failed with it: " + s.head_of(attempt_log));
  }
  s.record(s.in_dir(fs::join_command(host)));
  return fs::wait(s.start(host, s.log(), s.scratch), s.timeout);
}

}  // namespace

// host_without_nvcc: the host pass (the host compiler alone, into device.o) beside nvcc's device
// image, linked in as data that the module's launches look their kernels up in. nvcc's steps run from
// its dry run with relative names, as nvcc.cc's: no part of the cache path reaches a shell.
int host_pass_and_image(Steps& s) {
  const std::string src = "device.cu";
  auto host = s.p.host_pass;
  // CUDA's include directories as nvcc gives them to its host compiler (CUDA 13 keeps CCCL apart).
  const std::string cuda_include = toolchain::cuda_include_dir(s.p.nvcc);
  host.push_back("-I" + cuda_include);
  if (::access((cuda_include + "/cccl").c_str(), F_OK) == 0) host.insert(host.end(), {"-isystem", cuda_include + "/cccl"});
  const std::vector<std::string> io = {"-MD", "-MF", "host_pass.d", "-c", src, "-o", "device.o"};
  s.depfiles.push_back({s.scratch + "/host_pass.d", s.scratch});
  if (!s.p.nvrtc_unused.empty() && s.p.nvrtc_asked)
    log::emit(log::kInfo, s.p.name + ": JITKERN_DEVICE_COMPILER=nvrtc, but nvcc compiles its kernels: " + s.p.nvrtc_unused);
  if (s.nvrtc) {  // the host pass first: its stubs name the kernels NVRTC instantiates
    const auto t0 = std::chrono::steady_clock::now();
    std::string prelude;
    int rc = run_host_pass(s, host, io, &prelude);
    if (rc != 0) return rc;
    const auto t1 = std::chrono::steady_clock::now();
    s.cuda_steps = "host pass " + format_seconds(std::chrono::duration<double>(t1 - t0).count()) + prelude + ", NVRTC ";
    std::string why;
    rc = nvrtc_image(s, cuda_include, &why);
    s.cuda_steps += format_seconds(seconds_since(t1));
    if (rc != kNvrtcCannot) return rc;  // compiled, or timed out / interrupted: no fallback for those
    log::emit(s.p.nvrtc_asked ? log::kWarning : log::kInfo, s.p.name + ": NVRTC could not compile its kernels, so nvcc compiles them "
                                                                      "(JITKERN_DEVICE_COMPILER=nvcc skips the attempt): " + why);
    const auto t2 = std::chrono::steady_clock::now();
    rc = nvcc_image(s)();
    s.cuda_steps += " (could not), nvcc " + format_seconds(seconds_since(t2));
    return rc;
  }
  // A task: its future waits for nvcc when destroyed, so an exception here leaves no compiler running.
  auto image = nvcc_image(s);
  const auto t0 = std::chrono::steady_clock::now();
  double device_seconds = 0;
  std::future<int> device = std::async(std::launch::async, [&image, &device_seconds, t0] {
    const int rc = image();
    device_seconds = seconds_since(t0);
    return rc;
  });
  std::string prelude;
  const int rc = run_host_pass(s, host, io, &prelude);
  const double host_seconds = seconds_since(t0);
  const int device_rc = device.get();
  s.cuda_steps = "host pass " + format_seconds(host_seconds) + prelude + " beside nvcc " + format_seconds(device_seconds);
  return first_failure(rc, device_rc);
}

// nvcc's device image of the module (its steps from its dry run with relative names, as nvcc.cc's:
// no part of the cache path reaches a shell), linked in as data that the launches look kernels up in.
// Prepared here, run by the returned task.
std::function<int()> nvcc_image(Steps& s) {
  auto image = s.p.cuda_compile;
  image.insert(image.end(), {"-fatbin", "device.cu", "-o", "device.fatbin"});
  std::vector<std::string> env, steps;
  std::string text;
  if (s.dry_run(image, &text) && !nvcc::fatbin_commands(text, "device.d", &env, &steps)) steps.clear();
  if (steps.empty()) image.insert(image.end(), {"-MD", "-MF", "device.d"});
  s.depfiles.push_back({s.scratch + "/device.d", s.scratch});
  fs::write_file_atomic(s.scratch + "/image.s", nvcc::image_assembly("device.fatbin"));
  const std::vector<std::string> embed = {s.p.host_cxx, "-c", "-x", "assembler", "image.s", "-o", "image.o"};
  if (steps.empty()) s.refuse_a_path_a_shell_would_run(), s.record(s.in_dir(fs::join_command(image)));
  for (const auto& step : steps) s.record(s.in_dir(step));
  s.record(s.in_dir(fs::join_command(embed)));
  s.cuda_objects.push_back(s.scratch + "/image.o");
  return [&s, image, env, steps, embed] {
    const int rc = steps.empty() ? fs::wait(s.start(image, s.device_log(), s.scratch), s.timeout) : s.run_shell_chain(steps, env, s.device_log());
    return rc != 0 ? rc : fs::wait(s.start(embed, s.device_log(), s.scratch), s.timeout);
  };
}

}  // namespace jitkern::compile
