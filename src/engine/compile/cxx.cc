// The host compiler's backend: a C++-only module compiled and linked in one command; otherwise the host
// glue beside the CUDA objects, then the link.
#include <chrono>

#include "compile/steps.h"

namespace jitkern::compile {

// Runs every compile and the link; returns the first non-zero status (fs::wait's encoding).
int run(Steps& s, const std::string& out) {
  fs::make_dirs(s.scratch + "/tmp", 0700, "the compilers' temporary directory");
  const std::string cuda_src = s.scratch + "/device.cu", cuda_obj = s.scratch + "/device.o";
  if (s.p.has_cuda) fs::write_file_atomic(cuda_src, s.p.cuda_source);
  if (s.p.has_cpp) fs::write_file_atomic(s.scratch + "/host.cc", s.p.cpp_source);
  if (s.p.has_cpp && !s.p.has_cuda) {  // host code alone: compile and link in one command
    auto cmd = s.p.cpp_compile;
    cmd.insert(cmd.end(), {"-MD", "-MF", s.scratch + "/host.d", s.scratch + "/host.cc", "-o", out});
    cmd.insert(cmd.end(), s.p.link.begin(), s.p.link.end());
    s.depfiles.push_back({s.scratch + "/host.d", s.scratch});
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = s.run_link(cmd);
    s.phases = "compile and link " + format_seconds(seconds_since(t0));
    return rc;
  }
  // Host glue (if any) compiles while the CUDA pipeline runs; then the host compiler links.
  std::vector<fs::Process> host;
  std::vector<std::string> objects;
  if (s.p.has_cpp) {
    auto cpp = s.p.cpp_compile;
    cpp.insert(cpp.end(), {"-MD", "-MF", s.scratch + "/host.d", "-c", s.scratch + "/host.cc", "-o", s.scratch + "/host.o"});
    s.record(fs::join_command(cpp));
    s.depfiles.push_back({s.scratch + "/host.d", s.scratch});
    objects.push_back(s.scratch + "/host.o");
    host.push_back(s.start(cpp, s.log(), s.scratch));
  }
  const auto t0 = std::chrono::steady_clock::now();
  int rc = cuda_objects(s);
  s.phases = s.cuda_steps.empty() ? "CUDA " + format_seconds(seconds_since(t0)) : s.cuda_steps;
  for (auto& pr : host) rc = first_failure(rc, fs::wait(pr, s.timeout));
  if (!host.empty()) s.phases += ", C++ " + format_seconds(seconds_since(t0));
  objects.push_back(cuda_obj);
  objects.insert(objects.end(), s.cuda_objects.begin(), s.cuda_objects.end());
  if (rc != 0) return rc;
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<std::string> link = {s.p.host_cxx};
  link.insert(link.end(), objects.begin(), objects.end());
  link.insert(link.end(), {"-o", out});
  link.insert(link.end(), s.p.link.begin(), s.p.link.end());
  link.insert(link.end(), {"-L" + s.cuda_lib, "-lcudart"});
  rc = s.run_link(link);
  s.phases += ", link " + format_seconds(seconds_since(t1));
  return rc;
}

int cuda_objects(Steps& s) {
  s.cuda_lib = toolchain::cuda_lib_dir(s.p.nvcc);
  return s.p.host_pass.empty() ? nvcc_object(s) : host_pass_and_image(s);
}

}  // namespace jitkern::compile
