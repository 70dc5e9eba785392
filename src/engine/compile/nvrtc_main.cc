// jitkern-nvrtc: one module's kernels through NVRTC, in a process of its own (NVRTC compiles in one
// process contend for its internal locks: 16 at once keep about 6 CPUs busy). Run by the engine:
//   jitkern-nvrtc LIBNVRTC HOST_OBJECT SOURCE CUBIN [NVRTC OPTION...]
// instantiates the kernels whose stubs HOST_OBJECT holds (src/engine/compile/nvrtc.h), writes the cubin to CUBIN;
// NVRTC's messages go to stderr. Exit status 0: compiled; 1: NVRTC or the stubs refused; 2: usage.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "base/fs_util.h"
#include "compile/nvrtc.h"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s LIBNVRTC HOST_OBJECT SOURCE CUBIN [NVRTC OPTION...]\n", argv[0]);
    return 2;
  }
  const std::string library = argv[1], object = argv[2], source_path = argv[3], cubin_path = argv[4];
  const std::vector<std::string> options(argv + 5, argv + argc);
  std::string source;
  if (!jitkern::fs::read_file(source_path, &source)) {
    std::fprintf(stderr, "cannot read %s\n", source_path.c_str());
    return 1;
  }
  std::vector<std::string> stubs;
  std::string why;
  if (!jitkern::nvrtc::kernel_stubs(object, &stubs, &why)) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return 1;
  }
  const auto r = jitkern::nvrtc::compile(library, source, source_path, options, stubs);
  if (!r.log.empty()) std::fprintf(stderr, "%s\n", r.log.c_str());
  if (!r.ok) return 1;
  try {
    jitkern::fs::write_file_atomic(cubin_path, r.cubin);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
