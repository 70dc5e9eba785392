// NVRTC's backend: the kernels of a host_without_nvcc module compiled by NVRTC in a helper process, after
// the host pass whose stubs name them.
#include "config/config.h"
#include "base/log.h"
#include "compile/nvcc_pipeline.h"
#include "compile/steps.h"
#include "base/text.h"

namespace jitkern::compile {

// Where NVRTC compiles the kernels (JITKERN_DEVICE_COMPILER=nvrtc; auto for a build run among many), after
// the host pass: NVRTC compiles the module's kernel files in a process of its own (jitkern-nvrtc, beside the engine), instantiating the kernels whose stubs the host
// pass made (src/engine/compile/nvrtc.h). Returns 0; kNvrtcCannot with `*why` where NVRTC cannot compile them (the
// caller has nvcc do it); a timeout's or an interrupt's status as it is. A missing or broken helper is
// the install's failure, not the module's: Transient where nvrtc was asked for. What NVRTC reads is
// the list of files the helper saw it open (NVRTC writes no dependencies).
int nvrtc_image(Steps& s, const std::string& cuda_include, std::string* why) {
  const auto stopped = [](int rc) { return rc == fs::kTimedOut || rc == fs::kInterrupted; };
  const std::string helper = config::engine_lib_dir() + "/jitkern-nvrtc";
  // nvrtc's key promises NVRTC's image, so a broken install fails its builds; auto's may hold either.
  const auto broken_install = [&](const std::string& what) {
    const std::string text = what + " (an incomplete install): reinstall jitkern, or set JITKERN_DEVICE_COMPILER=nvcc";
    if (s.p.nvrtc_asked) throw Transient("jitkern: module '" + s.p.name + "': JITKERN_DEVICE_COMPILER=nvrtc: " + text);
    log::emit(log::kWarning, s.p.name + ": " + text);
    return *why = what, kNvrtcCannot;
  };
  if (!fs::is_executable_file(helper)) return broken_install(helper + " is missing or not executable");
  auto options = s.p.nvrtc_options;
  options.push_back("-I" + cuda_include);
  if (::access((cuda_include + "/cccl").c_str(), F_OK) == 0) options.push_back("-I" + cuda_include + "/cccl");
  fs::write_file_atomic(s.scratch + "/device_rtc.cu", s.p.nvrtc_source);
  std::vector<std::string> nvrtc = {helper, s.p.nvrtc_library, "device.o", "device_rtc.cu", "device.cubin", "device.reads"};
  nvrtc.insert(nvrtc.end(), options.begin(), options.end());
  s.record(s.in_dir(fs::join_command(nvrtc)));
  const std::string nvrtc_log = s.scratch + "/nvrtc.log";
  int rc = 0;
  try {
    rc = fs::wait(s.start(nvrtc, nvrtc_log, s.scratch), s.timeout);
  } catch (const std::exception& e) {
    return broken_install(e.what());
  }
  if (stopped(rc)) return rc;
  if (rc != 0) return *why = s.head_of(nvrtc_log) + (rc == 1 ? "" : " (jitkern-nvrtc: " + fs::describe_status(rc) + ")"), kNvrtcCannot;
  std::string text;
  if (!fs::read_file(s.scratch + "/device.reads", &text)) return *why = "jitkern-nvrtc wrote no list of the files NVRTC read", kNvrtcCannot;
  Depfile reads{"", s.scratch};
  for (auto& path : text::split(text, '\n'))
    if (!path.empty()) reads.paths.push_back(std::move(path));
  // The source includes every kernel file: no read seen means NVRTC opened them some way the helper does not see.
  if (reads.paths.empty()) return *why = "jitkern-nvrtc saw NVRTC read no file, so what it read cannot be tracked", kNvrtcCannot;
  s.depfiles.push_back(std::move(reads));
  fs::write_file_atomic(s.scratch + "/image.s", nvcc::image_assembly("device.cubin"));
  rc = s.run_argv({s.p.host_cxx, "-c", "-x", "assembler", "image.s", "-o", "image.o"}, s.scratch);
  if (stopped(rc)) return rc;
  if (rc != 0) return *why = "the assembler failed on NVRTC's cubin: " + s.head_of(s.log()), kNvrtcCannot;
  s.cuda_objects.push_back(s.scratch + "/image.o");
  return 0;
}

}  // namespace jitkern::compile
