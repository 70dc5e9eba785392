// nvcc's backend: the CUDA source's object from nvcc's own phases, run from its dry run in parallel
// (host chain, device front end and back end, the stub's front end where CPUs idle), else nvcc as one command.

#include <atomic>
#include <future>
#include <optional>

#include "base/log.h"
#include "base/sha256.h"
#include "compile/host_prelude.h"
#include "compile/host_transform.h"
#include "config/compile_env.h"
#include "compile/nvcc_pipeline.h"
#include "compile/steps.h"
#include "compile/toolchain.h"

namespace jitkern::compile {
namespace {

// This process's CUDA compiles share its CPUs: each takes (CPUs it may run on) / (compiles running)
// for parallelism of its own (a front-end run for the host stub, a shared prefix's precompile: neither
// changes an output).
class CpuShare {
 public:
  CpuShare() : cpus(std::max(1, jitkern::cpus::usable() / (s_running.fetch_add(1) + 1))) {}
  ~CpuShare() { s_running.fetch_sub(1); }
  CpuShare(const CpuShare&) = delete;
  CpuShare& operator=(const CpuShare&) = delete;
  const int cpus;
  // More than the compile's own chains use (one compile takes about three at a time): extra work there
  // costs it nothing, where among parallel builds it only adds work.
  bool spare() const { return cpus >= 3; }

 private:
  static inline std::atomic<int> s_running{0};
};

// host_shared_files: the shared prefix of a rewritten unit, and its precompiled form where one is ready.
// Its compile starts in the background (for later builds) at the first lookup with `start`: a build
// whose process has CPUs to spare starts it before its own host compile, others after it.
class SharedPrefix {
 public:
  SharedPrefix(Steps& s, const nvcc::Pipeline& pipe, const std::string& text) : s_(s), pipe_(pipe), text_(text) {
    if (s.p.host_shared_prefix.empty() || !s.p.host_cxx_gcc) return;
    std::string why;
    end_ = host_transform::shared_prefix_end(text, s.p.host_shared_prefix, &why);
    if (end_ == std::string::npos) log::emit(log::kDebug, s.p.name + ": no precompiled shared host prefix: " + why);
    else digest_ = std::string(Sha256().update(std::string_view(text).substr(0, end_)).hex());  // once: a build looks it up twice
  }

  std::optional<host_prelude::Precompiled> find(bool start) const {
    if (end_ == std::string::npos) return std::nullopt;
    return host_prelude::find_prefix(nvcc::rewritten_host_compile(pipe_, "@prefix@"), std::string_view(text_).substr(0, end_), digest_, true, start,
                                     s_.timeout, compile_env::with(s_.env, pipe_.env), config::temp_dir(s_.cfg));
  }

  // The unit compiled with `pch`: true, its status in `*rc`, where it compiled (or timed out, or was
  // interrupted); false where it failed (the caller then compiles the whole unit).
  bool compile(const host_prelude::Precompiled& pch, int* rc) const {
    const std::string file = "nvcc/device.after_prefix.ii";
    fs::write_file_atomic(s_.scratch + "/" + file, host_transform::after_prefix(text_, end_, pch.header));
    const std::string cmd = nvcc::rewritten_host_compile(pipe_, file);
    s_.record(s_.in_dir(cmd));
    const std::string attempt_log = s_.scratch + "/host_precompiled.log";
    *rc = s_.run_shell_chain({cmd}, pipe_.env, attempt_log);
    if (*rc != 0 && *rc != fs::kTimedOut && *rc != fs::kInterrupted) return false;
    std::string output;
    if (fs::read_file(attempt_log, &output) && !output.empty()) fs::append_file(s_.log(), output);  // its warnings
    return true;
  }

 private:
  Steps& s_;
  const nvcc::Pipeline& pipe_;
  const std::string& text_;
  std::size_t end_ = std::string::npos;
  std::string digest_;  // of the prefix
};

// host_without_cudafe: after nvcc's host preprocessing, its output rewritten (host_transform.h) and
// compiled by nvcc's host compile command into device.o; its status, unless `*why` is set: then nvcc's
// host chain must compile it (the rewrite refused, or its compile failed other than by a timeout or an
// interruption). `spare_cpus`: CpuShare::spare() (when a shared prefix's precompile starts).
int rewritten_host(Steps& s, const nvcc::Pipeline& pipe, const std::string& module_id, bool spare_cpus, std::string* why) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string in = pipe.host_preprocessed[0] == '/' ? pipe.host_preprocessed : s.scratch + "/" + pipe.host_preprocessed;
  std::string text;
  if (!fs::read_file(in, &text)) return *why = "its preprocessed host code could not be read", 1;
  const host_transform::Result r = host_transform::transform(text, {toolchain::cuda_include_dir(s.p.nvcc)}, module_id);
  const double rewrite_s = seconds_since(t0);
  if (!r.ok) return *why = "the rewrite refused: " + r.why, 1;
  const std::string file = "nvcc/device.rewritten.ii";
  const std::string cmd = nvcc::rewritten_host_compile(pipe, file);
  if (cmd.empty()) return *why = "nvcc's host compile command has a shape jitkern does not know", 1;
  fs::write_file_atomic(s.scratch + "/" + file, r.text);
  const auto t1 = std::chrono::steady_clock::now();
  const auto steps = [&](const char* note) {
    s.cuda_steps = "host side without cudafe++: rewrite " + format_seconds(rewrite_s) + " (" + std::to_string(r.kernels) + " kernels), compile " +
                   format_seconds(seconds_since(t1)) + note;
  };
  int rc = 0;
  const SharedPrefix shared(s, pipe, r.text);
  const auto pch = shared.find(spare_cpus);
  if (pch && shared.compile(*pch, &rc)) return steps(" (shared prefix precompiled)"), rc;
  s.record(s.in_dir(cmd));
  const std::string attempt_log = s.scratch + "/host_rewritten.log";
  rc = s.run_shell_chain({cmd}, pipe.env, attempt_log);
  std::string output;
  fs::read_file(attempt_log, &output);
  if (rc == 0 && pch) host_prelude::retire(*pch, s.p.name + "'s host compile failed with it, not without it");
  if (rc == 0 && !pch) shared.find(true);  // (started now, where it was not: this build's host side is done)
  if (rc == 0 || rc == fs::kTimedOut || rc == fs::kInterrupted) {
    if (!output.empty()) fs::append_file(s.log(), output);  // its warnings
    steps("");
    return rc;
  }
  return *why = "its rewritten host code failed to compile: " + Steps::head_of(attempt_log), rc;
}

}  // namespace

// nvcc runs its s.phases through a shell, so it runs in the scratch directory with relative names:
// no cache path (quotes, spaces, $) ever reaches a command line.
int nvcc_object(Steps& s) {
  const CpuShare share;
  const auto t_start = std::chrono::steady_clock::now();
  if (!s.p.host_rewrite_unused.empty())
    log::emit(log::kInfo, s.p.name + ": nvcc's host chain (cudafe++) compiles its host side: " + s.p.host_rewrite_unused);
  const std::string src = "device.cu", obj = "device.o", depfile = "device.d";
  s.depfiles.push_back({s.scratch + "/" + depfile, s.scratch});
  auto dry = s.p.cuda_compile;
  dry.insert(dry.end(), {"-c", src, "-o", obj});
  std::string text;
  if (s.dry_run(dry, &text)) {
    nvcc::Pipeline pipe;
    if (nvcc::plan(text, depfile, &pipe)) {
      // Same shape as nvcc's own ids: _<hash>_<length>_<name>_<hash>.
      const auto in_scratch = [&](const std::string& path) { return path[0] == '/' ? path : s.scratch + "/" + path; };
      const std::string module_id = "_" + s.p.request_key.substr(0, 8) + "_9_device_cu_" + s.p.request_key.substr(8, 8);
      fs::write_file_atomic(in_scratch(pipe.module_id_path), module_id);
      fs::write_file_atomic(in_scratch(pipe.embedded_fatbin_path), nvcc::fatbin_declaration());
      const bool rewrite = s.p.host_without_cudafe;
      fs::write_file_atomic(s.scratch + "/fatbin.s", rewrite ? nvcc::fatbin_and_image_assembly(pipe.fatbin_path) : nvcc::fatbin_assembly(pipe.fatbin_path));
      const std::vector<std::string> embed = {s.p.host_cxx, "-c", "-x", "assembler", "fatbin.s", "-o", "fatbin.o"};
      // A front-end run of its own for the stub pays where CPUs would otherwise idle.
      const bool frontend = share.spare() && !rewrite;  // the rewritten host side needs no stub
      const std::vector<std::string> ciccs = frontend ? std::vector<std::string>{pipe.cicc_frontend, pipe.cicc_ptx} : std::vector<std::string>{pipe.cicc};
      std::vector<std::string> all = pipe.host_chain;
      all.push_back(pipe.device_preprocess);
      all.insert(all.end(), ciccs.begin(), ciccs.end());
      all.insert(all.end(), pipe.device_back.begin(), pipe.device_back.end());
      all.insert(all.end(), {pipe.host_compile, fs::join_command(embed)});
      for (const auto& c : all) s.record(s.in_dir(c));
      // Each step a task; a failed step's status flows to the steps after it, and std::async's futures
      // wait for their task when destroyed (an exception here never leaves a compiler step running).
      const auto chain = [&](const std::vector<std::string>& cmds, const std::string& log_path) {
        return s.run_shell_chain(cmds, pipe.env, log_path);
      };
      const auto after = [](const std::shared_future<int>& before, auto step) {
        return std::async(std::launch::async, [before, step] { const int rc = before.get(); return rc != 0 ? rc : step(); });
      };
      const auto t_device = std::chrono::steady_clock::now();
      const std::shared_future<int> preprocessed =
          std::async(std::launch::async, [&] { return chain({pipe.device_preprocess}, s.device_log()); }).share();
      const std::shared_future<int> cicc =
          after(preprocessed, [&] { return chain({frontend ? pipe.cicc_ptx : pipe.cicc}, s.device_log()); }).share();
      const std::shared_future<int> stub_written =
          frontend ? after(preprocessed, [&] { return chain({pipe.cicc_frontend}, s.stub_log()); }).share() : cicc;
      double device_seconds = 0;  // the device chain alone: what any engine compiling this source with nvcc runs
      std::future<int> device = after(cicc, [&] {
        int rc = chain(pipe.device_back, s.device_log());
        if (rc == 0) rc = fs::wait(s.start(embed, s.device_log(), s.scratch), s.timeout);
        device_seconds = seconds_since(t_device);
        return rc;
      });
      int host_rc = 0, stub_rc = 0;
      std::string why;  // set where the rewritten host side gives way to nvcc's host chain
      if (rewrite && (host_rc = chain({pipe.host_chain[0]}, s.log())) == 0) {
        host_rc = rewritten_host(s, pipe, module_id, share.spare(), &why);
        if (!why.empty()) log::emit(log::kInfo, s.p.name + ": nvcc's host chain (cudafe++) compiles its host side: " + why);
      }
      if (!rewrite || !why.empty()) {
        s.cuda_steps.clear();
        host_rc = chain(rewrite ? std::vector<std::string>{pipe.host_chain[1]} : pipe.host_chain, s.log());
        stub_rc = stub_written.get();
        if (host_rc == 0 && stub_rc == 0) host_rc = chain({pipe.host_compile}, s.log());
      }
      const int device_rc = device.get();
      if (!s.cuda_steps.empty())
        s.cuda_steps = "CUDA " + format_seconds(seconds_since(t_start)) + " (" + s.cuda_steps + " beside nvcc " + format_seconds(device_seconds) + ")";
      s.cuda_objects.push_back(s.scratch + "/fatbin.o");
      return first_failure(first_failure(host_rc, device_rc), stub_rc);
    }
  }
  auto cmd = s.p.cuda_compile;
  cmd.insert(cmd.end(), {"-MD", "-MF", depfile, "-c", src, "-o", obj});
  s.refuse_a_path_a_shell_would_run();
  return s.run_argv(cmd, s.scratch);
}

}  // namespace jitkern::compile
