// jitkern::build: a request's way through the cache store. Warm path: the prebuilt layers, then the
// writable cache under the entry's load lock; no compiler runs. Cold path: the entry's build lock,
// compile in a scratch directory, record what the compiler read, publish through the store. The store
// (store.h) owns every file and lock; this file owns compiling and what a build's outcome means.
#include <dlfcn.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <climits>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <stdexcept>
#include <thread>

#include "build.h"
#include "compile_env.h"
#include "fs_util.h"
#include "host_prelude.h"
#include "log.h"
#include "manifest.h"
#include "nvcc_pipeline.h"
#include "plan.h"
#include "settings.h"
#include "sha256.h"
#include "text.h"
#include "toolchain.h"

namespace jitkern {
namespace {

using manifest::Dep;
using manifest::Failure;
using manifest::Manifest;

// A failure worth remembering: the compiler ran to completion and rejected the sources. Anything else
// (a signal, a timeout, a full disk) is transient and retried by the next call.
struct Transient : std::runtime_error {
  using std::runtime_error::runtime_error;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

double compile_timeout_s() { return settings::seconds("JITKERN_COMPILE_TIMEOUT", 900); }


std::string current_dir() {
  char buf[PATH_MAX];
  if (::getcwd(buf, sizeof buf) == nullptr) throw std::runtime_error("jitkern: cannot read the current directory");
  return buf;
}

bool under_any(const std::string& path, const std::vector<std::string>& prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& pre) { return path.rfind(pre, 0) == 0; });
}

// A file that cannot be read is kept as kMissing: the record it goes into is then never found valid.
std::vector<Dep> hash_files(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<Dep> deps;
  for (const auto& [path, resolved] : files) {
    Dep d;
    d.path = path;
    d.resolved = resolved;
    if (!fs::stat_sig(path, &d.sig) || !sha256_file(path, &d.sha)) d.sig = {}, d.sha = manifest::kMissing;
    deps.push_back(d);
  }
  return deps;
}

// A dependency file and the directory its compiler ran in (what its relative names are relative to).
struct Depfile {
  std::string path, base;
  std::vector<std::string> paths = {};  // where path is empty: the files themselves (absolute)
};

// "a//b/./c" -> "a/b/c"; ".." stays (through a symbolic link it is not the lexical parent).
std::string clean_path(const std::string& path) {
  std::string out;
  for (const auto& part : text::split(path, '/')) {
    if (part.empty() || part == ".") continue;
    out += "/" + part;
  }
  return out.empty() ? "/" : out;
}

// Every file the compiler read according to its dependency output, as the compiler opened it, with
// where that led when elsewhere (a symbolic link, ".."), outside the generated sources and the
// toolchain's own files, and the module's own files whatever the output says (nvcc's -MD misspells a
// path holding '"' or '\\'): (path, resolved or "").
std::vector<std::pair<std::string, std::string>> dependency_paths(const plan::Plan& p, const std::vector<Depfile>& depfiles,
                                                                  const std::string& scratch) {
  const std::string scratch_real = fs::realpath_or(scratch);
  std::map<std::string, std::string> unique;
  for (const auto& df : depfiles) {
    std::string text;
    if (!df.path.empty() && !fs::read_file(df.path, &text)) continue;
    for (const auto& raw : df.path.empty() ? df.paths : manifest::parse_depfile(text)) {
      const std::string used = clean_path(raw[0] == '/' ? raw : df.base + "/" + raw);
      const std::string resolved = fs::realpath_or(used);
      // the generated source (its text is in the key) and the toolchain's own headers
      if (used.rfind(scratch + "/", 0) == 0 || resolved.rfind(scratch_real + "/", 0) == 0) continue;
      if (under_any(resolved, p.dep_exclude_prefixes)) continue;  // where the file really is decides
      unique.emplace(used, resolved == used ? "" : resolved);
    }
  }
  for (const auto& file : p.link_option_files) {
    const std::string used = clean_path(file), resolved = fs::realpath_or(used);
    unique.emplace(used, resolved == used ? "" : resolved);
  }
  for (const auto& source : p.sources) {
    const std::string used = clean_path(source), resolved = fs::realpath_or(used);
    unique.emplace(used, resolved == used ? "" : resolved);
  }
  return {unique.begin(), unique.end()};
}

// A compiler's output, cut to what a message can carry.
std::string truncated(std::string text) {
  constexpr std::size_t kMax = 20000;
  if (text.size() > kMax) text = text.substr(0, kMax) + "\n[... compiler output truncated ...]\n";
  return text;
}

std::string erase_all(std::string text, const std::string& part) {
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at)) text.erase(at, part.size());
  return text;
}

// The generated sources under the names the compiler's output gives them, for a failure's log.
std::string generated_sources(const plan::Plan& p) {
  std::string out;
  if (p.has_cpp) out += "generated source: host.cc (the cpp_wrappers)\n" + p.cpp_source;
  if (p.has_cuda) out += "generated source: device.cu (the cuda_wrappers)\n" + p.cuda_source;
  return out;
}

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

class Compile {
 public:
  Compile(const plan::Plan& p, const std::string& scratch, const std::string& cwd, double timeout_s, bool parallel_build)
      : m_p(p), m_scratch(scratch), m_cwd(cwd), m_timeout(timeout_s), m_parallel(parallel_build),
        m_nvrtc(!p.nvrtc_options.empty() && (p.nvrtc_asked || parallel_build)) {}

  // Runs every compile and the link; returns the first non-zero status (fs::wait's encoding).
  int run(const std::string& out) {
    fs::make_dirs(m_scratch + "/tmp", 0700, "the compilers' temporary directory");
    const std::string cuda_src = m_scratch + "/device.cu", cuda_obj = m_scratch + "/device.o";
    if (m_p.has_cuda) fs::write_file_atomic(cuda_src, m_p.cuda_source);
    if (m_p.has_cpp) fs::write_file_atomic(m_scratch + "/host.cc", m_p.cpp_source);
    if (m_p.has_cpp && !m_p.has_cuda) {  // host code alone: compile and link in one command
      auto cmd = m_p.cpp_compile;
      cmd.insert(cmd.end(), {"-MD", "-MF", m_scratch + "/host.d", m_scratch + "/host.cc", "-o", out});
      cmd.insert(cmd.end(), m_p.link.begin(), m_p.link.end());
      depfiles.push_back({m_scratch + "/host.d", m_scratch});
      const auto t0 = std::chrono::steady_clock::now();
      const int rc = run_link(cmd);
      phases = "compile and link " + format_seconds(seconds_since(t0));
      return rc;
    }
    // Host glue (if any) compiles while the CUDA pipeline runs; then the host compiler links.
    std::vector<fs::Process> host;
    std::vector<std::string> objects;
    if (m_p.has_cpp) {
      auto cpp = m_p.cpp_compile;
      cpp.insert(cpp.end(), {"-MD", "-MF", m_scratch + "/host.d", "-c", m_scratch + "/host.cc", "-o", m_scratch + "/host.o"});
      record(fs::join_command(cpp));
      depfiles.push_back({m_scratch + "/host.d", m_scratch});
      objects.push_back(m_scratch + "/host.o");
      host.push_back(start(cpp, log(), m_scratch));
    }
    const auto t0 = std::chrono::steady_clock::now();
    int rc = compile_cuda();
    phases = m_cuda_steps.empty() ? "CUDA " + format_seconds(seconds_since(t0)) : m_cuda_steps;
    for (auto& pr : host) rc = first_failure(rc, fs::wait(pr, m_timeout));
    if (!host.empty()) phases += ", C++ " + format_seconds(seconds_since(t0));
    objects.push_back(cuda_obj);
    objects.insert(objects.end(), m_cuda_objects.begin(), m_cuda_objects.end());
    if (rc != 0) return rc;
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<std::string> link = {m_p.host_cxx};
    link.insert(link.end(), objects.begin(), objects.end());
    link.insert(link.end(), {"-o", out});
    link.insert(link.end(), m_p.link.begin(), m_p.link.end());
    link.insert(link.end(), {"-L" + m_cuda_lib, "-lcudart"});
    rc = run_link(link);
    phases += ", link " + format_seconds(seconds_since(t1));
    return rc;
  }

  std::string log() const { return m_scratch + "/build.log"; }
  // Everything the compilers printed. nvcc's host and device phases parse the same source, so an error
  // both report is shown once: the device phases' output only where it adds something.
  std::string output() const {
    std::string text, other;
    fs::read_file(log(), &text);
    for (const auto& path : {device_log(), stub_log()})
      if (fs::read_file(path, &other) && text.find(other) == std::string::npos) text += other;
    return text;
  }
  std::vector<std::string> commands;
  std::vector<Depfile> depfiles;
  std::string phases;  // "CUDA 4.10 s, C++ 4.12 s, link 0.08 s": the INFO line's detail

 private:
  static int first_failure(int a, int b) { return a != 0 ? a : b; }

  void record(const std::string& command) {
    commands.push_back(command);
    log::emit(log::kDebug, "run: " + command);
  }

  int run_argv(const std::vector<std::string>& argv, const std::string& cwd = {}) {
    record(cwd.empty() ? fs::join_command(argv) : "(cd " + fs::shell_quote(cwd) + " && " + fs::join_command(argv) + ")");
    return fs::wait(start(argv, log(), cwd), m_timeout);
  }

  // A link, with the linker listing every file it reads (--trace): the archives, objects and -l libraries
  // it took are dependencies like headers (the platform's and the toolchain's are left out by
  // dependency_paths). The list stays out of the build log.
  int run_link(std::vector<std::string> argv) {
    argv.push_back("-Wl,--trace");
    record(in_dir(fs::join_command(argv)));
    const std::string link_log = m_scratch + "/link.log";
    const int rc = fs::wait(start(argv, link_log, m_scratch), m_timeout);
    std::string text, rest;
    fs::read_file(link_log, &text);
    Depfile inputs{"", ""};
    for (const auto& line : text::split_lines(text)) {
      std::string path = line[0] == '/' ? line : m_scratch + "/" + line;
      if (!line.empty() && line.back() == ')' && ::access(path.c_str(), F_OK) != 0) path = path.substr(0, path.rfind('('));  // gold: archive(member)
      struct stat st;
      if (!line.empty() && line.find(": ") == std::string::npos && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
        inputs.paths.push_back(path);
      else
        rest += line + "\n";
    }
    if (!rest.empty()) fs::append_file(log(), rest);
    depfiles.push_back(inputs);
    return rc;
  }

  // Every compiler step runs with TMPDIR in the scratch directory: their temporary files go with it, and
  // the process's TMPDIR (missing, full, cleaned under a build) is no part of a build, nor of a failure
  // remembered against the sources. Relative where the step runs there: nvcc puts TMPDIR into the
  // commands it runs through a shell, and the cache path may hold $ or `.
  fs::Process start(const std::vector<std::string>& argv, const std::string& log_path, const std::string& cwd,
                    std::vector<std::string> env = {}) const {
    env.push_back(cwd == m_scratch ? "TMPDIR=tmp" : "TMPDIR=" + m_scratch + "/tmp");
    return fs::spawn(argv, log_path, compile_env::make(env), cwd);
  }

  // nvcc run as one command passes the scratch directory's absolute path through its own shell (as the
  // source's name): a path that would run a command there is refused, not run.
  void refuse_a_path_a_shell_would_run() const {
    if (m_scratch.find('`') == std::string::npos && m_scratch.find("$(") == std::string::npos && m_scratch.find("${") == std::string::npos)
      return;
    throw Transient("jitkern: module '" + m_p.name + "': nvcc compiles it as one command (JITKERN_NVCC_PIPELINE=0, or a CUDA flag " +
                    "holding one of $ ` \" \\ !), which passes the cache path " + m_scratch + " through a shell, where its ` or $( or ${ " +
                    "would run: use another JITKERN_CACHE_DIR, or leave JITKERN_NVCC_PIPELINE at 1 and such flags out");
  }

  std::string device_log() const { return m_scratch + "/device.log"; }
  std::string stub_log() const { return m_scratch + "/stub.log"; }
  std::string in_dir(const std::string& command) const { return "(cd " + fs::shell_quote(m_scratch) + " && " + command + ")"; }

  int run_shell_chain(const std::vector<std::string>& cmds, const std::vector<std::string>& env, const std::string& log_path) {
    for (const auto& c : cmds) {
      const int rc = fs::wait(start({"/bin/sh", "-c", c}, log_path, m_scratch, env), m_timeout);
      if (rc != 0) return rc;
    }
    return 0;
  }

  // nvcc runs its phases through a shell, so it runs in the scratch directory with relative names:
  // no cache path (quotes, spaces, $) ever reaches a command line.
  int compile_cuda() {
    m_cuda_lib = toolchain::cuda_lib_dir(m_p.nvcc);
    if (!m_p.host_pass.empty()) return compile_host_and_image();
    const CpuShare share;
    const std::string src = "device.cu", obj = "device.o", depfile = "device.d";
    depfiles.push_back({m_scratch + "/" + depfile, m_scratch});
    auto dry = m_p.cuda_compile;
    dry.insert(dry.end(), {"-c", src, "-o", obj});
    std::string text;
    if (dry_run(dry, &text)) {
      nvcc::Pipeline pipe;
      if (nvcc::plan(text, depfile, &pipe)) {
        // Same shape as nvcc's own ids: _<hash>_<length>_<name>_<hash>.
        const auto in_scratch = [&](const std::string& path) { return path[0] == '/' ? path : m_scratch + "/" + path; };
        fs::write_file_atomic(in_scratch(pipe.module_id_path), "_" + m_p.request_key.substr(0, 8) + "_9_device_cu_" + m_p.request_key.substr(8, 8));
        fs::write_file_atomic(in_scratch(pipe.embedded_fatbin_path), nvcc::fatbin_declaration());
        fs::write_file_atomic(m_scratch + "/fatbin.s", nvcc::fatbin_assembly(pipe.fatbin_path));
        const std::vector<std::string> embed = {m_p.host_cxx, "-c", "-x", "assembler", "fatbin.s", "-o", "fatbin.o"};
        // A front-end run of its own for the stub pays where CPUs would otherwise idle (one compile
        // takes about three at a time); among parallel builds it only adds work.
        const bool frontend = share.cpus >= 3;
        const std::vector<std::string> ciccs = frontend ? std::vector<std::string>{pipe.cicc_frontend, pipe.cicc_ptx} : std::vector<std::string>{pipe.cicc};
        std::vector<std::string> all = pipe.host_chain;
        all.push_back(pipe.device_preprocess);
        all.insert(all.end(), ciccs.begin(), ciccs.end());
        all.insert(all.end(), pipe.device_back.begin(), pipe.device_back.end());
        all.insert(all.end(), {pipe.host_compile, fs::join_command(embed)});
        for (const auto& c : all) record(in_dir(c));
        // Each step a task; a failed step's status flows to the steps after it, and std::async's futures
        // wait for their task when destroyed (an exception here never leaves a compiler step running).
        const auto chain = [&](const std::vector<std::string>& cmds, const std::string& log_path) {
          return run_shell_chain(cmds, pipe.env, log_path);
        };
        const auto after = [](const std::shared_future<int>& before, auto step) {
          return std::async(std::launch::async, [before, step] { const int rc = before.get(); return rc != 0 ? rc : step(); });
        };
        const std::shared_future<int> preprocessed =
            std::async(std::launch::async, [&] { return chain({pipe.device_preprocess}, device_log()); }).share();
        const std::shared_future<int> cicc =
            after(preprocessed, [&] { return chain({frontend ? pipe.cicc_ptx : pipe.cicc}, device_log()); }).share();
        const std::shared_future<int> stub_written =
            frontend ? after(preprocessed, [&] { return chain({pipe.cicc_frontend}, stub_log()); }).share() : cicc;
        std::future<int> device = after(cicc, [&] {
          const int rc = chain(pipe.device_back, device_log());
          return rc != 0 ? rc : fs::wait(start(embed, device_log(), m_scratch), m_timeout);
        });
        int host_rc = chain(pipe.host_chain, log());
        const int stub_rc = stub_written.get();
        if (host_rc == 0 && stub_rc == 0) host_rc = chain({pipe.host_compile}, log());
        const int device_rc = device.get();
        m_cuda_objects.push_back(m_scratch + "/fatbin.o");
        return first_failure(first_failure(host_rc, device_rc), stub_rc);
      }
    }
    auto cmd = m_p.cuda_compile;
    cmd.insert(cmd.end(), {"-MD", "-MF", depfile, "-c", src, "-o", obj});
    refuse_a_path_a_shell_would_run();
    return run_argv(cmd, m_scratch);
  }

  // `nvcc --dryrun --keep` of `argv` (intermediates in nvcc/), with every name relative to the scratch
  // directory: nvcc names the source by its absolute path too (--orig_src_path_name), and the phases run
  // through /bin/sh, so no part of the cache path may stay (a backtick or $ in it would run). False
  // where the phases must not run that way: JITKERN_NVCC_PIPELINE=0, an argument the shell would expand
  // ($, `, ", \), a failed dry run; the caller then runs nvcc's own single command.
  bool dry_run(std::vector<std::string> argv, std::string* text) {
    const bool shell_safe = std::none_of(m_p.cuda_compile.begin(), m_p.cuda_compile.end(),
                                         [](const std::string& a) { return a.find_first_of("$`\"\\!") != std::string::npos; });
    if (!shell_safe || !settings::flag("JITKERN_NVCC_PIPELINE")) return false;
    ::mkdir((m_scratch + "/nvcc").c_str(), 0700);
    argv.insert(argv.end(), {"--dryrun", "--keep", "--keep-dir", "nvcc"});
    const std::string log_path = m_scratch + "/dryrun.txt";
    if (fs::wait(start(argv, log_path, m_scratch), m_timeout) != 0 || !fs::read_file(log_path, text)) return false;
    *text = erase_all(*text, m_scratch + "/");
    return text->find(m_scratch) == std::string::npos;
  }

  // host_without_nvcc: the host pass (the host compiler alone, into device.o) beside nvcc's device
  // image, linked in as data that the module's launches look their kernels up in. nvcc's steps run from
  // its dry run with relative names, as compile_cuda's: no part of the cache path reaches a shell.
  int compile_host_and_image() {
    const std::string src = "device.cu";
    auto host = m_p.host_pass;
    // CUDA's include directories as nvcc gives them to its host compiler (CUDA 13 keeps CCCL apart).
    const std::string cuda_include = toolchain::cuda_include_dir(m_p.nvcc);
    host.push_back("-I" + cuda_include);
    if (::access((cuda_include + "/cccl").c_str(), F_OK) == 0) host.insert(host.end(), {"-isystem", cuda_include + "/cccl"});
    const std::vector<std::string> io = {"-MD", "-MF", "host_pass.d", "-c", src, "-o", "device.o"};
    depfiles.push_back({m_scratch + "/host_pass.d", m_scratch});
    if (!m_p.nvrtc_unused.empty() && m_p.nvrtc_asked)
      log::emit(log::kInfo, m_p.name + ": JITKERN_DEVICE_COMPILER=nvrtc, but nvcc compiles its kernels: " + m_p.nvrtc_unused);
    if (m_nvrtc) {  // the host pass first: its stubs name the kernels NVRTC instantiates
      const auto t0 = std::chrono::steady_clock::now();
      std::string prelude;
      int rc = run_host_pass(host, io, &prelude);
      if (rc != 0) return rc;
      const auto t1 = std::chrono::steady_clock::now();
      m_cuda_steps = "host pass " + format_seconds(std::chrono::duration<double>(t1 - t0).count()) + prelude + ", NVRTC ";
      std::string why;
      rc = nvrtc_image(cuda_include, &why);
      m_cuda_steps += format_seconds(seconds_since(t1));
      if (rc != kNvrtcCannot) return rc;  // compiled, or timed out / interrupted: no fallback for those
      log::emit(m_p.nvrtc_asked ? log::kWarning : log::kInfo, m_p.name + ": NVRTC could not compile its kernels, so nvcc compiles them "
                                                                        "(JITKERN_DEVICE_COMPILER=nvcc skips the attempt): " + why);
      const auto t2 = std::chrono::steady_clock::now();
      rc = nvcc_image()();
      m_cuda_steps += " (could not), nvcc " + format_seconds(seconds_since(t2));
      return rc;
    }
    // A task: its future waits for nvcc when destroyed, so an exception here leaves no compiler running.
    auto image = nvcc_image();
    const auto t0 = std::chrono::steady_clock::now();
    double device_seconds = 0;
    std::future<int> device = std::async(std::launch::async, [&image, &device_seconds, t0] {
      const int rc = image();
      device_seconds = seconds_since(t0);
      return rc;
    });
    std::string prelude;
    const int rc = run_host_pass(host, io, &prelude);
    const double host_seconds = seconds_since(t0);
    const int device_rc = device.get();
    m_cuda_steps = "host pass " + format_seconds(host_seconds) + prelude + " beside nvcc " + format_seconds(device_seconds);
    return first_failure(rc, device_rc);
  }

  // The host pass. A host_prelude module's -includes the prelude precompiled where one is ready for its
  // flags (the same object, byte for byte; builds run many at once have it compiled; GCC ignores it after
  // another -include, so only where the prelude's is the first); `*note` then says so. A failure with it
  // retires it and runs the pass again without: a precompiled header never fails a module.
  int run_host_pass(const std::vector<std::string>& flags, const std::vector<std::string>& io, std::string* note) {
    auto host = flags;
    host.insert(host.end(), io.begin(), io.end());
    const auto at = std::find(flags.begin(), flags.end(), m_p.host_prelude);
    std::optional<host_prelude::Precompiled> pch;
    if (!m_p.host_prelude.empty() && at != flags.begin() && at != flags.end() && *(at - 1) == "-include" &&
        std::find(flags.begin(), at - 1, "-include") == at - 1) {
      std::vector<std::string> rest(flags.begin(), at - 1);
      rest.insert(rest.end(), at + 1, flags.end());
      pch = host_prelude::find(rest, m_p.host_prelude, m_p.host_cxx_gcc, m_parallel, m_timeout);
    }
    if (pch) {
      auto with = host;
      with[at - flags.begin()] = pch->header;
      record(in_dir(fs::join_command(with)));
      const std::string attempt_log = m_scratch + "/host_pass_precompiled.log";
      const int rc = fs::wait(start(with, attempt_log, m_scratch), m_timeout);
      std::string text;
      fs::read_file(attempt_log, &text);
      if (rc == 0 || rc == fs::kTimedOut || rc == fs::kInterrupted) {
        if (!text.empty()) fs::append_file(log(), text);  // its warnings
        if (rc == 0) depfiles.push_back({"", "", pch->headers}), *note = " (prelude precompiled)";
        return rc;
      }
      host_prelude::retire(*pch, m_p.name + "'s host pass failed with it: " + head_of(attempt_log));
    }
    record(in_dir(fs::join_command(host)));
    return fs::wait(start(host, log(), m_scratch), m_timeout);
  }

  // nvcc's device image of the module (its steps from its dry run with relative names, as compile_cuda's:
  // no part of the cache path reaches a shell), linked in as data that the launches look kernels up in.
  // Prepared here, run by the returned task.
  std::function<int()> nvcc_image() {
    auto image = m_p.cuda_compile;
    image.insert(image.end(), {"-fatbin", "device.cu", "-o", "device.fatbin"});
    std::vector<std::string> env, steps;
    std::string text;
    if (dry_run(image, &text) && !nvcc::fatbin_commands(text, "device.d", &env, &steps)) steps.clear();
    if (steps.empty()) image.insert(image.end(), {"-MD", "-MF", "device.d"});
    depfiles.push_back({m_scratch + "/device.d", m_scratch});
    fs::write_file_atomic(m_scratch + "/image.s", nvcc::image_assembly("device.fatbin"));
    const std::vector<std::string> embed = {m_p.host_cxx, "-c", "-x", "assembler", "image.s", "-o", "image.o"};
    if (steps.empty()) refuse_a_path_a_shell_would_run(), record(in_dir(fs::join_command(image)));
    for (const auto& step : steps) record(in_dir(step));
    record(in_dir(fs::join_command(embed)));
    m_cuda_objects.push_back(m_scratch + "/image.o");
    return [this, image, env, steps, embed] {
      const int rc = steps.empty() ? fs::wait(start(image, device_log(), m_scratch), m_timeout) : run_shell_chain(steps, env, device_log());
      return rc != 0 ? rc : fs::wait(start(embed, device_log(), m_scratch), m_timeout);
    };
  }

  static constexpr int kNvrtcCannot = 1;  // nvrtc_image: NVRTC cannot compile these kernels, nvcc may

  // A step's first error lines (else its first lines), for a message: the scratch directory is gone
  // when it is read.
  static std::string head_of(const std::string& path) {
    std::string text;
    fs::read_file(path, &text);
    return text::error_lines(text);
  }

  // Where NVRTC compiles the kernels (JITKERN_DEVICE_COMPILER=nvrtc; auto for a build run among many), after
  // the host pass: NVRTC compiles the module's kernel files in a process of its own (jitkern-nvrtc, beside the engine), instantiating the kernels whose stubs the host
  // pass made (src/nvrtc.h). Returns 0; kNvrtcCannot with `*why` where NVRTC cannot compile them (the
  // caller has nvcc do it); a timeout's or an interrupt's status as it is. A missing or broken helper is
  // the install's failure, not the module's: Transient where nvrtc was asked for. What NVRTC reads is
  // listed by the host compiler's preprocessor run as NVRTC's (NVRTC writes no dependencies).
  int nvrtc_image(const std::string& cuda_include, std::string* why) {
    const auto stopped = [](int rc) { return rc == fs::kTimedOut || rc == fs::kInterrupted; };
    const std::string helper = engine_lib_dir() + "/jitkern-nvrtc";
    // nvrtc's key promises NVRTC's image, so a broken install fails its builds; auto's may hold either.
    const auto broken_install = [&](const std::string& what) {
      const std::string text = what + " (an incomplete install): reinstall jitkern, or set JITKERN_DEVICE_COMPILER=nvcc";
      if (m_p.nvrtc_asked) throw Transient("jitkern: module '" + m_p.name + "': JITKERN_DEVICE_COMPILER=nvrtc: " + text);
      log::emit(log::kWarning, m_p.name + ": " + text);
      return *why = what, kNvrtcCannot;
    };
    if (!fs::is_executable_file(helper)) return broken_install(helper + " is missing or not executable");
    auto options = m_p.nvrtc_options;
    options.push_back("-I" + cuda_include);
    if (::access((cuda_include + "/cccl").c_str(), F_OK) == 0) options.push_back("-I" + cuda_include + "/cccl");
    std::string digits;  // sm_90a: __CUDA_ARCH__ 900
    for (const char c : m_p.cuda_arch.substr(3))
      if (std::isdigit(static_cast<unsigned char>(c))) digits += c;
    std::vector<std::string> scan = {m_p.host_cxx, "-E", "-M", "-MF", "device.d", "-x", "c++", "-w", "-D__CUDACC__", "-D__CUDACC_RTC__",
                                     "-D__CUDA_ARCH__=" + digits + "0"};
    scan.insert(scan.end(), m_p.nvrtc_predefined.begin(), m_p.nvrtc_predefined.end());
    scan.push_back("-D__NVCC__");  // else CCCL takes this GCC for the CUDA compiler and refuses the toolkit
    for (const auto& o : options) {
      if (o.rfind("-I", 0) == 0 || o.rfind("-D", 0) == 0 || o.rfind("-U", 0) == 0 || o.rfind("-std=", 0) == 0) scan.push_back(o);
      else if (o.rfind("--pre-include=", 0) == 0) scan.insert(scan.end(), {"-include", o.substr(14)});
    }
    scan.push_back("device_rtc.cu");
    fs::write_file_atomic(m_scratch + "/device_rtc.cu", m_p.nvrtc_source);
    // Its own log: a failure here leaves the module to nvcc, whose errors are the ones to report.
    const std::string scan_log = m_scratch + "/nvrtc_deps.log";
    record(in_dir(fs::join_command(scan)));
    int rc = fs::wait(start(scan, scan_log, m_scratch), m_timeout);
    if (stopped(rc)) return rc;
    if (rc != 0) return *why = "the host compiler, listing what NVRTC reads, failed: " + head_of(scan_log), kNvrtcCannot;
    std::vector<std::string> nvrtc = {helper, m_p.nvrtc_library, "device.o", "device_rtc.cu", "device.cubin"};
    nvrtc.insert(nvrtc.end(), options.begin(), options.end());
    record(in_dir(fs::join_command(nvrtc)));
    const std::string nvrtc_log = m_scratch + "/nvrtc.log";
    try {
      rc = fs::wait(start(nvrtc, nvrtc_log, m_scratch), m_timeout);
    } catch (const std::exception& e) {
      return broken_install(e.what());
    }
    if (stopped(rc)) return rc;
    if (rc != 0) return *why = head_of(nvrtc_log) + (rc == 1 ? "" : " (jitkern-nvrtc: " + fs::describe_status(rc) + ")"), kNvrtcCannot;
    depfiles.push_back({m_scratch + "/device.d", m_scratch});
    fs::write_file_atomic(m_scratch + "/image.s", nvcc::image_assembly("device.cubin"));
    rc = run_argv({m_p.host_cxx, "-c", "-x", "assembler", "image.s", "-o", "image.o"}, m_scratch);
    if (stopped(rc)) return rc;
    if (rc != 0) return *why = "the assembler failed on NVRTC's cubin: " + head_of(log()), kNvrtcCannot;
    m_cuda_objects.push_back(m_scratch + "/image.o");
    return 0;
  }

  const plan::Plan& m_p;
  std::string m_scratch, m_cwd, m_cuda_lib;
  std::vector<std::string> m_cuda_objects;  // linked beside device.o (the pipeline's fatbin)
  std::string m_cuda_steps;                 // "host pass 0.81 s, NVRTC 1.52 s" or "host pass 0.81 s beside nvcc 1.70 s"
  double m_timeout;
  bool m_parallel;  // one of many builds run at once
  bool m_nvrtc;  // NVRTC compiles the kernels (after the host pass), else nvcc beside it
};


// The directories a missing header would have been looked for in (a failure is retried when a
// file appears in one).
std::vector<Dep> search_directories(const plan::Plan& p) {
  std::vector<Dep> dirs;
  auto add = [&](const std::string& dir) {
    Dep dep;
    dep.path = dir;
    dep.sha = manifest::kDirectory;
    if (fs::stat_sig(dir, &dep.sig) &&
        std::none_of(dirs.begin(), dirs.end(), [&](const Dep& e) { return e.path == dep.path; }))
      dirs.push_back(dep);
  };
  for (const auto& s : p.sources) add(fs::dirname(s));
  for (const auto* cmd : {&p.cpp_compile, &p.cuda_compile, &p.host_pass})
    for (const auto& a : *cmd)
      if (a.rfind("-I", 0) == 0 && a.size() > 2) add(a.substr(2));
  return dirs;
}

// A manifest for `p` with its descriptive fields filled in (the caller adds the library and deps).
Manifest new_manifest(const plan::Plan& p, const std::vector<toolchain::Compiler>& compilers, double build_seconds) {
  Manifest m;
  m.request_key = p.request_key;
  m.toolchain = p.toolchain_id;
  for (const auto& c : compilers) {
    Dep stamp;
    stamp.path = c.path, stamp.sig = c.sig;
    m.compilers.push_back(stamp);
  }
  m.compiler_search = toolchain::search_key(p.has_cuda);
  m.module = p.name;
  m.arch = p.has_cuda ? p.cuda_arch : "-";
  m.built_unix = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  m.build_ms = static_cast<int64_t>(build_seconds * 1000);
  return m;
}

enum class OnMiss { kCompile, kWarn, kError };
OnMiss on_miss() {
  const std::string mode = settings::choice("JITKERN_ON_MISS");
  return mode == "error" ? OnMiss::kError : mode == "warn" ? OnMiss::kWarn : OnMiss::kCompile;
}

// `misses`: where the module was looked for and why each place could not serve it.
void refuse_miss_if_strict(const plan::Plan& p, const std::vector<std::string>& misses) {
  if (on_miss() != OnMiss::kError) return;
  std::string where;
  for (const auto& m : misses) where += "\n  " + m;
  throw CacheMissError("jitkern: module '" + p.name + "' is not cached (or not intact) where jitkern looked, and JITKERN_ON_MISS=error "
                       "forbids compiling it; prebuild it into the cache (jitkern prebuild) or set JITKERN_ON_MISS=compile." + where);
}

// The wrapper that a diagnostic at `file`:`line` is about, if that is a wrapper's line of a generated
// source (host.cc holds cpp_wrappers, device.cu cuda_wrappers); nullptr otherwise.
const plan::Plan::WrapperLine* wrapper_at(const plan::Plan& p, const std::string& scratch, const std::string& file, int line) {
  const char* field = file == scratch + "/host.cc" ? "cpp_wrappers" : file == scratch + "/device.cu" ? "cuda_wrappers" : nullptr;
  if (field == nullptr) return nullptr;
  for (const auto& w : p.wrapper_lines)
    if (w.field == field && w.line == line) return &w;
  return nullptr;
}

// A compiler diagnostic's location and message. The parsers below take the shortest file name that
// lets the rest of the line match, as the regular expressions in their comments would (except that a
// '\r', which `.` would not match, is taken as any other character; std::regex is
// not used: constructing one crashed the process on a GPU host whose GCC 13 built the engine).
struct Diagnostic {
  std::string file;
  int line = 0;
  std::string message;
};

// The end of the digits at `at` (== at where there are none).
std::size_t digits_end(const std::string& s, std::size_t at) {
  while (at < s.size() && s[at] >= '0' && s[at] <= '9') ++at;
  return at;
}

// Where a line number that follows `sep` at `i` ends ("file:12" or "file(12"), or npos.
std::size_t line_number_end(const std::string& s, std::size_t i, char sep) {
  if (s[i] != sep) return std::string::npos;
  const std::size_t end = digits_end(s, i + 1);
  return end == i + 1 ? std::string::npos : end;
}

// `word` at `at`, not followed by a word character.
bool word_at(const std::string& s, std::size_t at, const std::string& word) {
  if (s.compare(at, word.size(), word) != 0) return false;
  const std::size_t end = at + word.size();
  return end == s.size() || !(std::isalnum(static_cast<unsigned char>(s[end])) || s[end] == '_');
}

// "error..." or "<prefix>error..." at `at`.
bool error_at(const std::string& s, std::size_t at, const std::string& prefix) {
  return word_at(s, at, "error") || (s.compare(at, prefix.size(), prefix) == 0 && word_at(s, at + prefix.size(), "error"));
}

Diagnostic diagnostic(const std::string& s, std::size_t file_end, std::size_t line_begin, std::size_t line_end, std::size_t message) {
  return {s.substr(0, file_end), static_cast<int>(std::strtol(s.substr(line_begin, line_end - line_begin).c_str(), nullptr, 10)),
          message < s.size() ? s.substr(message) : std::string()};
}

// The first "<file><sep><line>" in s after which `rest(line_end)` finds the message (its start, or npos
// where the line does not match).
template <typename Rest>
bool first_match(const std::string& s, char sep, Rest rest, Diagnostic* out) {
  for (std::size_t i = 1; i < s.size(); ++i) {
    const std::size_t line_end = line_number_end(s, i, sep);
    if (line_end == std::string::npos) continue;
    const std::size_t message = rest(line_end);
    if (message == std::string::npos) continue;
    *out = diagnostic(s, i, i + 1, line_end, message);
    return true;
  }
  return false;
}

// gcc and clang: ^(.+?):(\d+)(?::\d+)?: ((?:fatal )?error\b.*)$
bool gcc_error(const std::string& s, Diagnostic* out) {
  return first_match(s, ':', [&](std::size_t line_end) {
    const std::size_t col_end = line_end < s.size() && s[line_end] == ':' ? digits_end(s, line_end + 1) : line_end + 1;
    for (const std::size_t at : {col_end > line_end + 1 ? col_end : std::string::npos, line_end})
      if (at != std::string::npos && s.compare(at, 2, ": ") == 0 && error_at(s, at + 2, "fatal ")) return at + 2;
    return std::string::npos;
  }, out);
}

// nvcc's front ends: ^(.+?)\((\d+)\): ((?:catastrophic )?error\b.*)$
bool edg_error(const std::string& s, Diagnostic* out) {
  return first_match(s, '(', [&](std::size_t line_end) {
    return s.compare(line_end, 3, "): ") == 0 && error_at(s, line_end + 3, "catastrophic ") ? line_end + 3 : std::string::npos;
  }, out);
}

// gcc's notes that name where a macro was expanded or a template required:
// ^(.+?):(\d+):\d+:? +(?:note: in expansion of macro|required from)\b.*$
bool macro_context(const std::string& s, Diagnostic* out) {
  return first_match(s, ':', [&](std::size_t line_end) {
    if (line_end >= s.size()) return std::string::npos;
    std::size_t at = line_number_end(s, line_end, ':');  // the column
    if (at == std::string::npos) return std::string::npos;
    if (at < s.size() && s[at] == ':') ++at;
    const std::size_t blanks = at;
    while (at < s.size() && s[at] == ' ') ++at;
    if (at == blanks || !(word_at(s, at, "note: in expansion of macro") || word_at(s, at, "required from"))) return std::string::npos;
    return at;
  }, out);
}

// The cause a failed compile's message leads with, in the user's terms: the compiler's first error in
// the request's own sources ("path:line:col: error: ..." from gcc and clang, "path(line): error: ..."
// from nvcc), else its first error about a wrapper, named by its field, export name and expression
// (gcc reports an error in a wrapper's expression inside export.h's macro, with the wrapper's line in
// a note beside it), else its first error outside the generated sources and the toolchain, else its
// first error; empty if there is none.
std::string first_error(const std::string& log, const plan::Plan& p, const std::string& scratch) {
  const auto lines = text::split_lines(log);
  const auto absolute = [&](const std::string& file) { return file[0] == '/' ? file : scratch + "/" + file; };
  std::vector<std::size_t> errors;
  std::vector<Diagnostic> found;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("nvcc fatal", 0) == 0) return lines[i];  // nvcc refused the command itself (an arch, a flag)
    Diagnostic d;
    if (gcc_error(lines[i], &d) || edg_error(lines[i], &d)) errors.push_back(i), found.push_back(d);
  }
  std::string wrapper, outside, any;
  for (std::size_t k = 0; k < errors.size(); ++k) {
    const Diagnostic& d = found[k];
    const std::string file = absolute(d.file);
    if (std::find(p.sources.begin(), p.sources.end(), file) != p.sources.end()) return lines[errors[k]];
    const plan::Plan::WrapperLine* w = wrapper_at(p, scratch, file, d.line);
    // The notes between the previous error and the next name the wrapper line it came from.
    for (std::size_t i = k == 0 ? 0 : errors[k - 1] + 1, end = k + 1 < errors.size() ? errors[k + 1] : lines.size(); !w && i < end; ++i) {
      Diagnostic c;
      if (macro_context(lines[i], &c)) w = wrapper_at(p, scratch, absolute(c.file), c.line);
    }
    if (w != nullptr && wrapper.empty()) wrapper = w->field + " '" + w->name + "' (" + w->expr + "): " + d.message;
    if (outside.empty() && file.rfind(scratch + "/", 0) != 0 && !under_any(file, p.dep_exclude_prefixes)) outside = lines[errors[k]];
    if (any.empty()) any = lines[errors[k]];
  }
  return !wrapper.empty() ? wrapper : !outside.empty() ? outside : any;
}

// Whether a compiler's output blames the disk (the linker's "No space left on device").
bool blames_the_disk(const std::string& log) {
  return log.find("No space left on device") != std::string::npos || log.find("Disk quota exceeded") != std::string::npos;
}

// A failed compile: remembered (BuildError) when the compiler ran to completion and rejected the
// sources, reported without remembering (Transient) otherwise. The message leads with the module and
// the first error, then the compiler's output, the commands, and where the full log is kept.
[[noreturn]] void fail_build(const plan::Plan& p, const store::Entry& entry, const Compile& compile, int rc, const std::string& scratch,
                             double timeout_s) {
  const std::string full_log = compile.output();
  const bool full = blames_the_disk(full_log) || entry.out_of_space();  // checked after the failure: the link may have filled it
  std::string cause = first_error(full_log, p, scratch);
  if (rc == fs::kTimedOut)
    cause = "took longer than JITKERN_COMPILE_TIMEOUT=" + std::to_string(static_cast<long>(timeout_s)) + " s; its processes were killed";
  else if (full)
    cause = "No space left on device for " + entry.dir() + " (the compiler's output may be cut short)";
  else if (cause.empty())
    cause = "the compiler ended with " + fs::describe_status(rc);
  if (cause.find("Unsupported gpu architecture") != std::string::npos)
    cause += " (this nvcc cannot target " + p.cuda_arch + ": point CUDA_HOME at a newer CUDA toolkit, or set JITKERN_CUDA_ARCH to an arch it supports)";
  std::string commands;
  for (const auto& c : compile.commands) commands += "command: " + c + "\n";
  const std::string kept_log = full_log + "\n" + commands + generated_sources(p);
  // The scratch directory is gone when the message is read: the generated sources go by their names
  // (host.cc, device.cu), under which the kept log holds them.
  std::string msg = "jitkern: module '" + p.name + "' failed to compile: " + cause + "\ncompiler output (" +
                    fs::describe_status(rc) + "):\n" + erase_all(truncated(full_log), scratch + "/") + commands;
  const bool transient = rc < 0 || full;
  if (transient) {
    const bool kept = entry.keep_failure_log(kept_log);
    msg += kept ? "full log, commands and generated source: " + entry.failure_log_path() + "\n" : generated_sources(p);
    throw Transient(msg);
  }
  msg += "full log, commands and generated source: " + entry.failure_log_path() + "\n";
  Failure f;
  f.request_key = p.request_key;
  f.config_key = p.config_key;
  f.message = msg;
  f.deps = hash_files(dependency_paths(p, compile.depfiles, scratch));
  for (const auto& d : search_directories(p)) f.deps.push_back(d);
  try {
    entry.remember_failure(f, kept_log);
  } catch (const std::exception&) {
    // a read-only or full cache: reported, not remembered
  }
  throw BuildError(msg);
}

store::Found build_locked(const plan::Plan& p, const store::Entry& entry, const std::vector<toolchain::Compiler>& compilers,
                          const store::ToolchainCheck& toolchain_ok, double timeout_s, bool parallel_build, bool* compiled) {
  std::string why;
  if (auto found = entry.lookup(p, toolchain_ok, &why)) return std::move(*found);  // published while we waited
  entry.remove_stale_scratch(timeout_s);
  Failure failure;
  if (!settings::flag("JITKERN_RETRY_FAILED") && entry.remembered_failure(p.request_key, p.config_key, &failure))
    throw BuildError(failure.message +
                     "\n(jitkern remembered this failure: the inputs have not changed since. Edit the sources or set "
                     "JITKERN_RETRY_FAILED=1 to try again.)");
  std::map<std::string, std::string> before;  // path -> hash of the previous build's inputs
  if (auto found = entry.reuse(p, new_manifest(p, compilers, 0), &before)) return std::move(*found);

  if (on_miss() == OnMiss::kWarn)
    log::emit(log::kWarning, "module '" + p.name + "' is not cached; compiling it (JITKERN_ON_MISS=warn)");
  const std::string cwd = current_dir();
  const auto t0 = std::chrono::steady_clock::now();
  log::emit(log::kInfo, "compiling " + p.name + (p.has_cuda ? " for " + p.cuda_arch : "") + " ...");
  // An input edited while the compiler runs may or may not be in the library: compile again.
  for (int attempt = 0;; ++attempt) {
    const std::string scratch = entry.new_scratch();
    struct Cleanup {
      std::string dir;
      ~Cleanup() { fs::remove_tree(dir); }
    } cleanup{scratch};
    const std::string out = scratch + "/module.so";
    // Dependency mtimes at or after this instant (less the kernel's coarse timestamp granularity) mean
    // the file may have changed while it was being read.
    const int64_t started_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count() - 10'000'000;
    Compile compile(p, scratch, cwd, timeout_s, parallel_build);
    const int rc = compile.run(out);
    if (rc != 0) fail_build(p, entry, compile, rc, scratch, timeout_s);

    Manifest m = new_manifest(p, compilers, seconds_since(t0));
    m.deps = hash_files(dependency_paths(p, compile.depfiles, scratch));
    const int64_t hashed_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    // Changed while the compiler ran: modified at or after its start, or hashed differently before it.
    // The status-change time too: an edit that back-dates the mtime (cp -p, rsync -a, tar x) sets it.
    const bool changed_meanwhile = std::any_of(m.deps.begin(), m.deps.end(), [&](const Dep& d) {
      const auto b = before.find(d.path);
      struct stat st {};
      const bool touched = ::stat(d.path.c_str(), &st) == 0 && fs::ns_of(st.st_ctim) >= started_ns;
      // A modification time past the hashing was set before the compile (ctime tells an edit during it).
      const bool modified = d.sig.mtime_ns >= started_ns && d.sig.mtime_ns <= hashed_ns;
      return modified || touched || (b != before.end() && b->second != d.sha);
    });
    if (changed_meanwhile && attempt < 3) {
      for (const auto& d : m.deps) before[d.path] = d.sha;  // what the next attempt starts from
      log::emit(log::kWarning, "an input of " + p.name + " changed while it compiled; compiling again");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the timestamp granularity
      continue;
    }
    if (changed_meanwhile)
      throw Transient("jitkern: the inputs of module '" + p.name + "' kept changing while it compiled; not publishing it");
    for (const auto& d : m.deps)
      if (d.sha == manifest::kMissing)
        log::emit(log::kWarning, p.name + ": its compiler read " + d.path + ", which is not there now (removed since, or nvcc run as one " +
                                     "command misspelled a path holding '\"' or '\\'): edits to it cannot be seen, so every process compiles the " +
                                     "module again; move it to a plainer path, or leave JITKERN_NVCC_PIPELINE at 1");
    for (auto& d : m.deps) {  // valid wherever the roots are
      d.path = plan::portable_path(p, d.path);
      if (!d.resolved.empty()) d.resolved = plan::portable_path(p, d.resolved);
    }
    store::Found found;
    try {
      found = entry.publish(p, out, m);
    } catch (const std::runtime_error& e) {
      throw Transient("jitkern: the compiler reported success for module '" + p.name + "' but " + e.what() + "\ncommand: " +
                      (compile.commands.empty() ? "" : compile.commands.back()) + "\ncompiler output:\n" + truncated(compile.output()));
    }
    *compiled = true;
    log::emit(log::kInfo, "compiled " + p.name + " in " + format_seconds(seconds_since(t0)) + " (" + compile.phases + ")");
    return found;
  }
}

}  // namespace

const std::string& engine_lib_dir() {
  static const std::string dir = [] {
    std::string d = fs::loaded_object_dir(reinterpret_cast<const void*>(&engine_lib_dir));
    if (d.empty()) {  // linked into the main program
      Dl_info info{};
      if (::dladdr(reinterpret_cast<void*>(&engine_lib_dir), &info) && info.dli_fname && *info.dli_fname)
        d = fs::dirname(info.dli_fname[0] == '/' ? std::string(info.dli_fname) : fs::realpath_or(info.dli_fname));
    }
    return d.empty() ? std::string(".") : d;
  }();
  return dir;
}

std::string build(const BuildRequest& request, const EngineConfig& config) {
  bool compiled = false;
  return find_or_build(request, config, &compiled).path;
}

store::Found find_or_build(const BuildRequest& request, const EngineConfig& config, bool* compiled) {
  *compiled = false;
  settings::check();  // every setting, so that a bad one is a ValueError on every load, not only on a miss
  const plan::Config cfg = plan::resolve(config, request.build_directory, engine_lib_dir());
  add_library_dirs({cfg.runtime_lib_dir, cfg.tvm_ffi_lib_dir});
  plan::validate(request);
  plan::Toolchain tc;  // for the lookup: no compilers (the key does not depend on them)
  tc.sources = plan::sources(request, cfg);  // a missing file is reported before any compiler or GPU is looked for
  if (!request.cuda_files.empty()) tc.cuda_arch = toolchain::cuda_arch(request.cuda_arch, request.cuda_device);
  const std::string cwd = current_dir();
  const plan::Plan lookup = plan::make(request, cfg, tc, cwd);
  const store::Store cache = store::Store::writable(cfg);
  const store::ToolchainCheck toolchain_ok = [&](const Manifest& m) { return toolchain::accepts(m, cache, lookup.has_cuda); };
  // Warm path, never a compiler or a subprocess: the read-only prebuilt layers, then the writable
  // cache under the entry's load lock (no removal while it is held; a build or removal in progress
  // is waited for). Readers never see a partial file: publishing is by rename.
  std::vector<std::string> misses;
  for (const store::Store& layer : store::Store::prebuilt_layers()) {
    if (const std::string why = layer.layer_distrust(); !why.empty()) {
      misses.push_back(layer.root() + ": " + why);
      continue;
    }
    const store::Entry entry = layer.entry(lookup);
    std::string why;
    if (auto found = entry.lookup(lookup, toolchain_ok, &why)) return std::move(*found);
    misses.push_back(entry.dir() + ": " + why);
  }
  cache.ensure_writable(false);
  const store::Entry entry = cache.entry(lookup);
  struct stat st;
  if (::lstat(entry.dir().c_str(), &st) == 0) {
    auto lock = entry.lock_for_load();
    std::string why;
    if (auto found = entry.lookup(lookup, toolchain_ok, &why)) {
      found->lock = std::move(lock);
      return std::move(*found);
    }
    misses.push_back(entry.dir() + ": " + why);
  } else {
    misses.push_back(entry.dir() + ": not cached");
  }
  refuse_miss_if_strict(lookup, misses);

  cache.ensure_writable(true);  // a build creates the cache: before the compilers' records and the lock directory
  const std::vector<toolchain::Compiler> compilers = [&] {
    std::vector<toolchain::Compiler> out = {toolchain::identify(toolchain::cxx_program(), cache, "C++ compiler")};
    if (!request.cuda_files.empty()) out.push_back(toolchain::identify(toolchain::nvcc_program(), cache, "CUDA compiler"));
    return out;
  }();
  tc.cxx = compilers[0];
  if (compilers.size() > 1) tc.nvcc = compilers[1];
  const plan::Plan p = plan::make(request, cfg, tc, cwd);  // the same key, now with the commands
  const double timeout_s = compile_timeout_s();
  fs::CancelScope cancel;  // Ctrl-C and SIGTERM end the compile (and its compilers) at once
  auto lock = entry.lock_for_build("waiting for another process that is compiling " + p.name + " ...");
  entry.prepare();  // under the lock: `cache prune` may have removed it
  try {
    store::Found found = build_locked(p, entry, compilers, toolchain_ok, timeout_s, config.parallel_build, compiled);
    found.lock = std::move(lock);
    return found;
  } catch (const Transient& e) {
    throw BuildError(std::string(e.what()) + "\n(not remembered: the next call compiles again)");
  }
}

std::vector<std::string> export_names(const BuildRequest& request) {
  plan::validate(request);
  return plan::export_names(request);
}

}  // namespace jitkern
