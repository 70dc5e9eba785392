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

// The CPUs nvcc's device passes of one build keep busy.
int cpus_for(int passes) { return passes * plan::kSplitCompileThreads; }

// Whether a build starts the precompiled prelude for later builds' host passes: among builds run at once,
// and once a process beside a lone build where it has a CPU for it past the build's own threads (nvcc's
// device passes, the host pass). On 2 CPUs a lone rmsnorm took 2.3-2.8 s beside it against 2.0, and the
// next builds waited for nvcc's device pass all the same (their host passes 0.6 s shorter).
host_prelude::Start starts_prelude(const Steps& s) {
  if (s.parallel) return host_prelude::Start::kShared;
  return cpus::usable() >= cpus_for(s.device_passes) + 2 ? host_prelude::Start::kOnce : host_prelude::Start::kNone;
}

// The host pass. A host_prelude module's -includes the prelude precompiled where one is ready for its
// flags (the same object, byte for byte; starts_prelude has it compiled; GCC ignores it after another
// -include, so only where the prelude's is the first); `*note` then says so. A failure with it retires
// it and runs the pass again without: a precompiled header never fails a module.
int run_host_pass(Steps& s, const std::vector<std::string>& flags, const std::vector<std::string>& io, std::string* note) {
  auto host = flags;
  host.insert(host.end(), io.begin(), io.end());
  const auto at = std::find(flags.begin(), flags.end(), s.p.host_prelude);
  std::optional<host_prelude::Precompiled> pch;
  if (!s.p.host_prelude.empty() && at != flags.begin() && at != flags.end() && *(at - 1) == "-include" &&
      std::find(flags.begin(), at - 1, "-include") == at - 1) {
    std::vector<std::string> rest(flags.begin(), at - 1);
    rest.insert(rest.end(), at + 1, flags.end());
    pch = host_prelude::find(rest, s.p.host_prelude, s.p.host_cxx_gcc, starts_prelude(s), s.timeout, s.env, config::temp_dir(s.cfg));
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

// nvcc's device images of a module, one per device pass, compiled at once from construction on; the
// destructor waits for any still running, so an exception leaves no compiler behind. A module of several
// device parts takes one pass (the same machine code in one image, without the passes' repeated parsing
// of the headers) among builds run at once (warmup, prebuild) and where this process may not run every
// pass's kSplitCompileThreads at once (rmsnorm bf16 on 2 CPUs: 3.1-3.7 s in three passes, 2.3-2.5 s in one).
class DeviceImages {
 public:
  explicit DeviceImages(Steps& s) : seconds_(passes_for(s), 0.0), one_of_(s.p.device_parts) {
    if (seconds_.size() == 1 && one_of_ > 1)
      why_one_ = s.parallel ? "builds run at once" : std::to_string(cpus::usable()) + " CPUs, " + std::to_string(cpus_for(one_of_)) + " run them at once";
    const int count = static_cast<int>(seconds_.size());
    s.device_passes = count;
    std::vector<std::function<int()>> images;
    for (int part = 0; part < count; ++part) images.push_back(nvcc_image(s, part, count));
    const auto t0 = std::chrono::steady_clock::now();
    for (int part = 0; part < count; ++part)
      running_.push_back(std::async(std::launch::async, [this, part, t0, image = std::move(images[part])] {
        const int rc = image();
        seconds_[part] = seconds_since(t0);
        return rc;
      }));
  }
  DeviceImages(const DeviceImages&) = delete;
  DeviceImages& operator=(const DeviceImages&) = delete;

  // The first failure's status, once every pass has ended.
  int wait() {
    int rc = 0;
    for (auto& r : running_) rc = first_failure(rc, r.get());
    running_.clear();
    return rc;
  }
  // "1.52 s", or with several passes the longest and each: "1.52 s (3 passes: 1.31 / 1.52 / 1.20 s)".
  std::string seconds() const {
    std::string text = format_seconds(*std::max_element(seconds_.begin(), seconds_.end()));
    if (seconds_.size() == 1) return why_one_.empty() ? text : text + " (one pass for " + std::to_string(one_of_) + " device parts: " + why_one_ + ")";
    text += " (" + std::to_string(seconds_.size()) + " passes: ";
    for (std::size_t i = 0; i < seconds_.size(); ++i) {
      const std::string one = format_seconds(seconds_[i]);
      text += i + 1 < seconds_.size() ? one.substr(0, one.size() - 2) + " / " : one + ")";
    }
    return text;
  }

 private:
  static std::size_t passes_for(const Steps& s) {
    const int parts = s.p.device_parts;
    return parts > 1 && !s.parallel && cpus::usable() >= cpus_for(parts) ? parts : 1;
  }

  std::vector<double> seconds_;
  const int one_of_;  // the module's device parts
  std::string why_one_;  // why a module of several parts took one pass
  std::vector<std::future<int>> running_;  // a std::async future waits for its task when destroyed
};

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
    DeviceImages images(s);
    rc = images.wait();
    s.cuda_steps += " (could not), nvcc " + images.seconds();
    return rc;
  }
  DeviceImages images(s);  // started before the host pass, which runs beside them
  std::string prelude;
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = run_host_pass(s, host, io, &prelude);
  const double host_seconds = seconds_since(t0);
  const int device_rc = images.wait();
  s.cuda_steps = "host pass " + format_seconds(host_seconds) + prelude + " beside nvcc " + images.seconds();
  return first_failure(rc, device_rc);
}

// nvcc's device image of device pass `part` (its steps from its dry run with relative names, as nvcc.cc's:
// no part of the cache path reaches a shell), linked in as data that the launches look kernels up in.
// Prepared here, run by the returned task. Each pass of several has files of its own (.<part> in their
// names but pass 0's) and sees JITKERN_DEVICE_PART and JITKERN_DEVICE_PARTS.
std::function<int()> nvcc_image(Steps& s, int part, int passes) {
  const std::string suffix = part == 0 ? "" : "." + std::to_string(part);
  const std::string fatbin = "device" + suffix + ".fatbin", depfile = "device" + suffix + ".d", image_s = "image" + suffix + ".s",
                    image_o = "image" + suffix + ".o", log = s.device_log(part);
  auto image = s.p.cuda_compile;
  if (passes > 1) image.insert(image.end(), {"-DJITKERN_DEVICE_PART=" + std::to_string(part), "-DJITKERN_DEVICE_PARTS=" + std::to_string(passes)});
  image.insert(image.end(), {"-fatbin", "device.cu", "-o", fatbin});
  std::vector<std::string> env, steps;
  std::string text;
  if (s.dry_run(image, &text, "nvcc" + suffix) && !nvcc::fatbin_commands(text, depfile, &env, &steps)) steps.clear();
  if (steps.empty()) image.insert(image.end(), {"-MD", "-MF", depfile});
  s.depfiles.push_back({s.scratch + "/" + depfile, s.scratch});
  fs::write_file_atomic(s.scratch + "/" + image_s, nvcc::image_assembly(fatbin, part, passes));
  const std::vector<std::string> embed = {s.p.host_cxx, "-c", "-x", "assembler", image_s, "-o", image_o};
  if (steps.empty()) s.refuse_a_path_a_shell_would_run(), s.record(s.in_dir(fs::join_command(image)));
  for (const auto& step : steps) s.record(s.in_dir(step));
  s.record(s.in_dir(fs::join_command(embed)));
  s.cuda_objects.push_back(s.scratch + "/" + image_o);
  return [&s, image, env, steps, embed, log] {
    const int rc = steps.empty() ? fs::wait(s.start(image, log, s.scratch), s.timeout) : s.run_shell_chain(steps, env, log);
    return rc != 0 ? rc : fs::wait(s.start(embed, log, s.scratch), s.timeout);
  };
}

}  // namespace jitkern::compile
