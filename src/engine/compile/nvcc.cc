// nvcc's backend: the CUDA source's object from nvcc's own phases, run from its dry run in parallel
// (host chain, device front end and back end, the stub's front end where CPUs idle), else nvcc as one command.
#include <sched.h>

#include <atomic>
#include <future>
#include <thread>

#include "compile/nvcc_pipeline.h"
#include "compile/steps.h"

namespace jitkern::compile {
namespace {

// This process's CUDA compiles share its CPUs: each takes (CPUs it may run on) / (compiles running)
// for parallelism of its own (a front-end run for the host stub, which changes no output).
class CpuShare {
 public:
  CpuShare() : cpus(std::max(1, usable_cpus() / (s_running.fetch_add(1) + 1))) {}
  ~CpuShare() { s_running.fetch_sub(1); }
  CpuShare(const CpuShare&) = delete;
  CpuShare& operator=(const CpuShare&) = delete;
  const int cpus;

 private:
  static int usable_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  static inline std::atomic<int> s_running{0};
};

}  // namespace

// nvcc runs its s.phases through a shell, so it runs in the scratch directory with relative names:
// no cache path (quotes, spaces, $) ever reaches a command line.
int nvcc_object(Steps& s) {
    const CpuShare share;
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
      fs::write_file_atomic(in_scratch(pipe.module_id_path), "_" + s.p.request_key.substr(0, 8) + "_9_device_cu_" + s.p.request_key.substr(8, 8));
      fs::write_file_atomic(in_scratch(pipe.embedded_fatbin_path), nvcc::fatbin_declaration());
      fs::write_file_atomic(s.scratch + "/fatbin.s", nvcc::fatbin_assembly(pipe.fatbin_path));
      const std::vector<std::string> embed = {s.p.host_cxx, "-c", "-x", "assembler", "fatbin.s", "-o", "fatbin.o"};
      // A front-end run of its own for the stub pays where CPUs would otherwise idle (one compile
      // takes about three at a time); among parallel builds it only adds work.
      const bool frontend = share.cpus >= 3;
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
      const std::shared_future<int> preprocessed =
          std::async(std::launch::async, [&] { return chain({pipe.device_preprocess}, s.device_log()); }).share();
      const std::shared_future<int> cicc =
          after(preprocessed, [&] { return chain({frontend ? pipe.cicc_ptx : pipe.cicc}, s.device_log()); }).share();
      const std::shared_future<int> stub_written =
          frontend ? after(preprocessed, [&] { return chain({pipe.cicc_frontend}, s.stub_log()); }).share() : cicc;
      std::future<int> device = after(cicc, [&] {
        const int rc = chain(pipe.device_back, s.device_log());
        return rc != 0 ? rc : fs::wait(s.start(embed, s.device_log(), s.scratch), s.timeout);
      });
      int host_rc = chain(pipe.host_chain, s.log());
      const int stub_rc = stub_written.get();
      if (host_rc == 0 && stub_rc == 0) host_rc = chain({pipe.host_compile}, s.log());
      const int device_rc = device.get();
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
