// jitkern-nvrtc: one module's kernels through NVRTC, in a process of its own (NVRTC compiles in one
// process contend for its internal locks: 16 at once keep about 6 CPUs busy). Run by the engine:
//   jitkern-nvrtc LIBNVRTC HOST_OBJECT SOURCE CUBIN READS [NVRTC OPTION...]
// instantiates the kernels whose stubs HOST_OBJECT holds (src/engine/compile/nvrtc.h), writes the cubin to CUBIN
// and the files NVRTC read to READS, one a line (relative ones to this directory); NVRTC's messages go to stderr.
// Exit status 0: compiled; 1: NVRTC or the stubs refused; 2: usage.
#undef _FORTIFY_SOURCE  // its inline open() wrapper would clash with the open() defined here
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "base/fs_util.h"
#include "compile/nvrtc.h"

// NVRTC writes no dependency list: the files it opens for reading (its headers; it opens them through
// libc's fopen, fopen64 and open, which this executable exports, CMakeLists.txt) are recorded while it compiles.
namespace {
std::atomic<bool> g_recording{false};
std::mutex g_mutex;
std::vector<std::string> g_reads;

void note_read(const char* path, int fd) {
  struct stat st;
  if (!g_recording.load() || path == nullptr || fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_reads.emplace_back(path);
}

template <typename Fn>
Fn next_symbol(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, name));
}

FILE* recorded_fopen(const char* symbol, const char* path, const char* mode) {
  using Fopen = FILE* (*)(const char*, const char*);
  FILE* f = next_symbol<Fopen>(symbol)(path, mode);
  if (f != nullptr && mode != nullptr && mode[0] == 'r' && std::string(mode).find('+') == std::string::npos) note_read(path, ::fileno(f));
  return f;
}

int recorded_open(const char* symbol, const char* path, int flags, mode_t mode) {
  using Open = int (*)(const char*, int, ...);
  const int fd = next_symbol<Open>(symbol)(path, flags, mode);
  if ((flags & O_ACCMODE) == O_RDONLY) note_read(path, fd);
  return fd;
}
// Whether open() was given a mode, glibc's rule: O_TMPFILE holds O_DIRECTORY's bit, so O_DIRECTORY alone is not it.
bool takes_mode(int flags) { return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE; }

}  // namespace

extern "C" {
FILE* fopen(const char* path, const char* mode) { return recorded_fopen("fopen", path, mode); }
FILE* fopen64(const char* path, const char* mode) { return recorded_fopen("fopen64", path, mode); }
// The mode argument is read only where open() was given one (takes_mode).
#define JITKERN_RECORDED_OPEN(name)                                      \
  int name(const char* path, int flags, ...) {                           \
    va_list args;                                                        \
    va_start(args, flags);                                               \
    const mode_t mode = takes_mode(flags) ? va_arg(args, mode_t) : 0;    \
    va_end(args);                                                        \
    return recorded_open(#name, path, flags, mode);                      \
  }
JITKERN_RECORDED_OPEN(open)
JITKERN_RECORDED_OPEN(open64)
#undef JITKERN_RECORDED_OPEN
}

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s LIBNVRTC HOST_OBJECT SOURCE CUBIN READS [NVRTC OPTION...]\n", argv[0]);
    return 2;
  }
  const std::string library = argv[1], object = argv[2], source_path = argv[3], cubin_path = argv[4], reads_path = argv[5];
  const std::vector<std::string> options(argv + 6, argv + argc);
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
  g_recording = true;
  const auto r = jitkern::nvrtc::compile(library, source, source_path, options, stubs);
  g_recording = false;
  if (!r.log.empty()) std::fprintf(stderr, "%s\n", r.log.c_str());
  if (!r.ok) return 1;
  std::string reads;
  for (const auto& path : g_reads) {
    if (path.find('\n') != std::string::npos) {
      std::fprintf(stderr, "NVRTC read %s, whose name holds a newline: it cannot be listed as a dependency\n", path.c_str());
      return 1;
    }
    reads += path + "\n";
  }
  try {
    jitkern::fs::write_file_atomic(reads_path, reads);
    jitkern::fs::write_file_atomic(cubin_path, r.cubin);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
