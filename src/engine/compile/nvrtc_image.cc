// NVRTC's backend: the kernels of a host_without_nvcc module compiled by NVRTC in a helper process, after
// the host pass whose stubs name them.
#include <cctype>

#include "config/config.h"
#include "base/log.h"
#include "compile/nvcc_pipeline.h"
#include "compile/steps.h"

namespace jitkern::compile {

// Where NVRTC compiles the kernels (JITKERN_DEVICE_COMPILER=nvrtc; auto for a build run among many), after
// the host pass: NVRTC compiles the module's kernel files in a process of its own (jitkern-nvrtc, beside the engine), instantiating the kernels whose stubs the host
// pass made (src/engine/compile/nvrtc.h). Returns 0; kNvrtcCannot with `*why` where NVRTC cannot compile them (the
// caller has nvcc do it); a timeout's or an interrupt's status as it is. A missing or broken helper is
// the install's failure, not the module's: Transient where nvrtc was asked for. What NVRTC reads is
// listed by the host compiler's preprocessor run as NVRTC's (NVRTC writes no dependencies).
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
  std::string digits;  // sm_90a: __CUDA_ARCH__ 900
  for (const char c : s.p.cuda_arch.substr(3))
    if (std::isdigit(static_cast<unsigned char>(c))) digits += c;
  std::vector<std::string> scan = {s.p.host_cxx, "-E", "-M", "-MF", "device.d", "-x", "c++", "-w", "-D__CUDACC__", "-D__CUDACC_RTC__",
                                   "-D__CUDA_ARCH__=" + digits + "0"};
  scan.insert(scan.end(), s.p.nvrtc_predefined.begin(), s.p.nvrtc_predefined.end());
  scan.push_back("-D__NVCC__");  // else CCCL takes this GCC for the CUDA compiler and refuses the toolkit
  for (const auto& o : options) {
    if (o.rfind("-I", 0) == 0 || o.rfind("-D", 0) == 0 || o.rfind("-U", 0) == 0 || o.rfind("-std=", 0) == 0) scan.push_back(o);
    else if (o.rfind("--pre-include=", 0) == 0) scan.insert(scan.end(), {"-include", o.substr(14)});
  }
  scan.push_back("device_rtc.cu");
  fs::write_file_atomic(s.scratch + "/device_rtc.cu", s.p.nvrtc_source);
  // Its own log: a failure here leaves the module to nvcc, whose errors are the ones to report.
  const std::string scan_log = s.scratch + "/nvrtc_deps.log";
  s.record(s.in_dir(fs::join_command(scan)));
  int rc = fs::wait(s.start(scan, scan_log, s.scratch), s.timeout);
  if (stopped(rc)) return rc;
  if (rc != 0) return *why = "the host compiler, listing what NVRTC reads, failed: " + s.head_of(scan_log), kNvrtcCannot;
  std::vector<std::string> nvrtc = {helper, s.p.nvrtc_library, "device.o", "device_rtc.cu", "device.cubin"};
  nvrtc.insert(nvrtc.end(), options.begin(), options.end());
  s.record(s.in_dir(fs::join_command(nvrtc)));
  const std::string nvrtc_log = s.scratch + "/nvrtc.log";
  try {
    rc = fs::wait(s.start(nvrtc, nvrtc_log, s.scratch), s.timeout);
  } catch (const std::exception& e) {
    return broken_install(e.what());
  }
  if (stopped(rc)) return rc;
  if (rc != 0) return *why = s.head_of(nvrtc_log) + (rc == 1 ? "" : " (jitkern-nvrtc: " + fs::describe_status(rc) + ")"), kNvrtcCannot;
  s.depfiles.push_back({s.scratch + "/device.d", s.scratch});
  fs::write_file_atomic(s.scratch + "/image.s", nvcc::image_assembly("device.cubin"));
  rc = s.run_argv({s.p.host_cxx, "-c", "-x", "assembler", "image.s", "-o", "image.o"}, s.scratch);
  if (stopped(rc)) return rc;
  if (rc != 0) return *why = "the assembler failed on NVRTC's cubin: " + s.head_of(s.log()), kNvrtcCannot;
  s.cuda_objects.push_back(s.scratch + "/image.o");
  return 0;
}

}  // namespace jitkern::compile
