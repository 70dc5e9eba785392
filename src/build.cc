// jitkern::build: the cache protocol around a plan. Warm path: read the manifest, check it and the
// files it names, no lock and no subprocess. Cold path: take the key's lock, compile in a scratch
// directory, check the library, record what the compiler read, publish by rename. See DESIGN.md,
// "Cache: correct first, then fast".
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <regex>
#include <stdexcept>
#include <thread>

#include "build.h"
#include "fs_util.h"
#include "log.h"
#include "manifest.h"
#include "nvcc_pipeline.h"
#include "plan.h"
#include "settings.h"
#include "sha256.h"
#include "text.h"

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

double compile_timeout_s() {
  const std::string v = settings::get("JITKERN_COMPILE_TIMEOUT");
  if (v.empty()) return 900;
  char* end = nullptr;
  const double s = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end != '\0' || !(s > 0))
    throw std::invalid_argument("jitkern: JITKERN_COMPILE_TIMEOUT must be a positive number of seconds, got '" + v + "'");
  return s;
}

const std::string& engine_lib_dir() {
  static const std::string dir = [] {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&engine_lib_dir), &info) && info.dli_fname)
      return fs::dirname(info.dli_fname[0] == '/' ? std::string(info.dli_fname) : fs::realpath_or(info.dli_fname));
    return std::string(".");
  }();
  return dir;
}

std::string current_dir() {
  char buf[PATH_MAX];
  if (::getcwd(buf, sizeof buf) == nullptr) throw std::runtime_error("jitkern: cannot read the current directory");
  return buf;
}

// The library a manifest names, if safe to load (private to us; in a read-only prebuilt cache, ours or
// root's and writable by no one else) and intact: one lstat, a rehash only on a changed size or mtime.
bool library_intact(const std::string& lib, const Manifest& m, bool read_only) {
  fs::FileSig now;
  if (!(read_only ? fs::trusted_file_sig(lib, &now) : fs::private_file_sig(lib, "cached library", &now))) return false;
  if (now == m.lib_sig) return true;
  std::string sha;
  return sha256_file(lib, &sha) && sha == m.lib_sha;
}

// The warm path: a complete manifest for this request, built by this machine's toolchain (by any, when
// `local_toolchain` is empty: no compiler here), whose dependencies and library are unchanged. A
// read-only (prebuilt) entry is never written.
bool lookup_published(const plan::Plan& p, const std::string& entry_dir, bool read_only, const std::string& local_toolchain,
                      std::string* lib_path) {
  std::string text;
  Manifest m;
  if (!fs::read_file(entry_dir + "/manifest", &text) || !manifest::parse(text, &m) || m.request_key != p.request_key) return false;
  if (!local_toolchain.empty() && m.toolchain != local_toolchain) return false;
  if (read_only) {
    if (!fs::trusted_dir(entry_dir)) return false;
  } else {
    fs::ensure_private_dir(entry_dir, "cache entry directory");
  }
  std::vector<Dep> here = m.deps;  // recorded under root tokens; this machine's paths
  for (auto& d : here) d.path = plan::local(p, d.path);
  bool refreshed = false;
  if (!manifest::deps_unchanged(here, &refreshed)) return false;
  const std::string lib = entry_dir + "/" + m.lib_name;
  if (!library_intact(lib, m, read_only)) return false;
  if (!read_only) {
    // A touched but unchanged header: record its new mtime, so that the next load need not rehash it.
    if (refreshed) {
      for (std::size_t i = 0; i < here.size(); ++i) m.deps[i].sig = here[i].sig;
      try {
        fs::write_file_atomic(entry_dir + "/manifest", manifest::serialize(m));
      } catch (const std::exception&) {
        // an unwritable cache: the rehash repeats next time, nothing else is lost
      }
    }
    fs::mark_used(entry_dir + "/manifest");  // for `jitkern cache prune`'s least-recently-used order
  }
  *lib_path = lib;
  return true;
}

// A shared object as far as its headers tell: ELF, 64-bit, ET_DYN, section table within the file.
// Catches a truncated or bogus output that a compiler reported as success.
bool plausible_shared_object(const std::string& path, std::string* why) {
  std::string data;
  if (!fs::read_file(path, &data)) return *why = "cannot read it", false;
  if (data.size() < sizeof(Elf64_Ehdr) || std::memcmp(data.data(), ELFMAG, SELFMAG) != 0)
    return *why = "not an ELF file (" + std::to_string(data.size()) + " bytes)", false;
  Elf64_Ehdr eh;
  std::memcpy(&eh, data.data(), sizeof eh);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_type != ET_DYN) return *why = "not a 64-bit shared object", false;
  if (eh.e_shoff + uint64_t{eh.e_shnum} * eh.e_shentsize > data.size()) return *why = "truncated (its section table lies past its end)", false;
  return true;
}

void remove_stale_scratch(const std::string& entry_dir, double timeout_s) {
  DIR* dir = ::opendir(entry_dir.c_str());
  if (dir == nullptr) return;
  std::vector<std::string> stale;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    const bool scratch = name.rfind("build-", 0) == 0, temp = name.find(".tmp.") != std::string::npos;
    if (!scratch && !temp) continue;
    const std::string path = entry_dir + "/" + name;
    // Holding the key's lock, no build of ours is running here: a scratch directory whose process is
    // gone, or older than a compile may take, is a leftover.
    const int pid = scratch ? std::atoi(name.c_str() + 6) : std::atoi(name.substr(name.find(".tmp.") + 5).c_str());
    fs::FileSig sig;
    const bool old = fs::stat_sig(path, &sig) &&
                     std::chrono::nanoseconds(now).count() - sig.mtime_ns > static_cast<int64_t>(timeout_s * 1e9);
    const bool dead = pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
    if (old || dead) stale.push_back(path);
  }
  ::closedir(dir);
  for (const auto& path : stale) fs::remove_tree(path), ::unlink(path.c_str());
}

std::vector<Dep> hash_files(const std::vector<std::string>& paths) {
  std::vector<Dep> deps;
  for (const auto& path : paths) {
    Dep d;
    d.path = path;
    if (fs::stat_sig(path, &d.sig) && sha256_file(path, &d.sha)) deps.push_back(d);
  }
  return deps;
}

// A dependency file and the directory its compiler ran in (what its relative names are relative to).
struct Depfile {
  std::string path, base;
};

// Every file the compiler read according to its dependency output, outside the generated sources
// and the toolchain's own headers.
std::vector<std::string> dependency_paths(const plan::Plan& p, const std::vector<Depfile>& depfiles, const std::string& scratch) {
  std::map<std::string, bool> unique;
  for (const auto& df : depfiles) {
    std::string text;
    if (!fs::read_file(df.path, &text)) continue;
    for (const auto& raw : manifest::parse_depfile(text)) {
      const std::string path = fs::realpath_or(raw[0] == '/' ? raw : df.base + "/" + raw);
      if (path.rfind(scratch + "/", 0) == 0) continue;  // the generated source: its text is in the key
      bool excluded = false;
      for (const auto& prefix : p.dep_exclude_prefixes) excluded = excluded || path.rfind(prefix, 0) == 0;
      if (!excluded) unique.emplace(path, true);
    }
  }
  std::vector<std::string> out;
  for (const auto& [path, _] : unique) out.push_back(path);
  return out;
}

std::string read_log(const std::string& path) {
  std::string text;
  fs::read_file(path, &text);
  constexpr std::size_t kMax = 20000;
  if (text.size() > kMax) text = text.substr(0, kMax) + "\n[... compiler output truncated ...]\n";
  return text;
}

// True when the file system under `dir` has no room left (the usual cause of a failure with no log).
bool disk_full(const std::string& dir) {
  const std::string probe = dir + "/space-probe";
  try {
    fs::write_file_atomic(probe, std::string(64 * 1024, '\0'));
  } catch (const std::exception&) {
    return errno == ENOSPC || errno == EDQUOT;
  }
  ::unlink(probe.c_str());
  return false;
}

class Compile {
 public:
  Compile(const plan::Plan& p, const std::string& scratch, const std::string& cwd, double timeout_s)
      : m_p(p), m_scratch(scratch), m_cwd(cwd), m_timeout(timeout_s) {}

  // Runs every compile and the link; returns the first non-zero status (fs::wait's encoding).
  int run(const std::string& out) {
    const std::string cuda_src = m_scratch + "/device.cu", cuda_obj = m_scratch + "/device.o";
    if (m_p.has_cuda) fs::write_file_atomic(cuda_src, m_p.cuda_source);
    if (m_p.has_cpp) fs::write_file_atomic(m_scratch + "/host.cc", m_p.cpp_source);
    if (m_p.has_cpp && !m_p.has_cuda) {  // host code alone: compile and link in one command
      auto cmd = m_p.cpp_compile;
      cmd.insert(cmd.end(), {"-MMD", "-MF", m_scratch + "/host.d", m_scratch + "/host.cc", "-o", out});
      cmd.insert(cmd.end(), m_p.link.begin(), m_p.link.end());
      depfiles.push_back({m_scratch + "/host.d", m_cwd});
      const auto t0 = std::chrono::steady_clock::now();
      const int rc = run_argv(cmd);
      phases = "compile and link " + format_seconds(seconds_since(t0));
      return rc;
    }
    // Host glue (if any) compiles while the CUDA pipeline runs; then the host compiler links.
    std::vector<fs::Process> host;
    std::vector<std::string> objects;
    if (m_p.has_cpp) {
      auto cpp = m_p.cpp_compile;
      cpp.insert(cpp.end(), {"-MMD", "-MF", m_scratch + "/host.d", "-c", m_scratch + "/host.cc", "-o", m_scratch + "/host.o"});
      record(fs::join_command(cpp));
      depfiles.push_back({m_scratch + "/host.d", m_cwd});
      objects.push_back(m_scratch + "/host.o");
      host.push_back(fs::spawn(cpp, log()));
    }
    const auto t0 = std::chrono::steady_clock::now();
    int rc = compile_cuda();
    phases = "CUDA " + format_seconds(seconds_since(t0));
    for (auto& pr : host) rc = first_failure(rc, fs::wait(pr, m_timeout));
    if (!host.empty()) phases += ", C++ " + format_seconds(seconds_since(t0));
    objects.push_back(cuda_obj);
    if (rc != 0) return rc;
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<std::string> link = {m_p.host_cxx};
    link.insert(link.end(), objects.begin(), objects.end());
    link.insert(link.end(), {"-o", out});
    link.insert(link.end(), m_p.link.begin(), m_p.link.end());
    link.insert(link.end(), {"-L" + m_cuda_lib, "-lcudart", "-Wl,-rpath," + m_cuda_lib});
    rc = run_argv(link);
    phases += ", link " + format_seconds(seconds_since(t1));
    return rc;
  }

  std::string log() const { return m_scratch + "/build.log"; }
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
    return fs::wait(fs::spawn(argv, log(), {}, cwd), m_timeout);
  }

  int run_shell_chain(const std::vector<std::string>& cmds, const std::vector<std::string>& env) {
    for (const auto& c : cmds) {
      const int rc = fs::wait(fs::spawn({"/bin/sh", "-c", c}, log(), env, m_scratch), m_timeout);
      if (rc != 0) return rc;
    }
    return 0;
  }

  // nvcc runs its phases through a shell, so it runs in the scratch directory with relative names:
  // no cache path (quotes, spaces, $) ever reaches a command line.
  int compile_cuda() {
    m_cuda_lib = toolchain::cuda_lib_dir(m_p.nvcc);
    const std::string src = "device.cu", obj = "device.o", depfile = "device.d";
    depfiles.push_back({m_scratch + "/" + depfile, m_scratch});
    if (settings::get("JITKERN_NVCC_PIPELINE") != "0") {
      ::mkdir((m_scratch + "/nvcc").c_str(), 0700);
      auto dry = m_p.cuda_compile;
      dry.insert(dry.end(), {"--dryrun", "--keep", "--keep-dir", "nvcc", "-c", src, "-o", obj});
      const std::string dry_log = m_scratch + "/dryrun.txt";
      nvcc::Pipeline pipe;
      std::string text;
      if (fs::wait(fs::spawn(dry, dry_log, {}, m_scratch), m_timeout) == 0 && fs::read_file(dry_log, &text) &&
          nvcc::plan(text, depfile, &pipe)) {
        // Same shape as nvcc's own ids: _<hash>_<length>_<name>_<hash>.
        const std::string id_path = pipe.module_id_path[0] == '/' ? pipe.module_id_path : m_scratch + "/" + pipe.module_id_path;
        fs::write_file_atomic(id_path, "_" + m_p.request_key.substr(0, 8) + "_9_device_cu_" + m_p.request_key.substr(8, 8));
        for (const auto* chain : {&pipe.host_chain, &pipe.device_chain, &pipe.finish})
          for (const auto& c : *chain) record("(cd " + fs::shell_quote(m_scratch) + " && " + c + ")");
        int device_rc = 0;
        std::thread device([&] { device_rc = run_shell_chain(pipe.device_chain, pipe.env); });
        const int host_rc = run_shell_chain(pipe.host_chain, pipe.env);
        device.join();
        if (host_rc != 0 || device_rc != 0) return first_failure(host_rc, device_rc);
        return run_shell_chain(pipe.finish, pipe.env);
      }
    }
    auto cmd = m_p.cuda_compile;
    cmd.insert(cmd.end(), {"-MMD", "-MF", depfile, "-c", src, "-o", obj});
    return run_argv(cmd, m_scratch);
  }

  const plan::Plan& m_p;
  std::string m_scratch, m_cwd, m_cuda_lib;
  double m_timeout;
};

// Directories a missing header could appear in: a failure is remembered only while they are
// unchanged too (creating a file changes its directory's mtime).
std::vector<Dep> search_directories(const plan::Plan& p) {
  std::vector<Dep> dirs;
  auto add = [&](const std::string& d) {
    Dep dep;
    dep.path = fs::realpath_or(d);
    dep.sha = manifest::kDirectory;
    if (dep.path[0] == '/' && fs::stat_sig(dep.path, &dep.sig) &&
        std::none_of(dirs.begin(), dirs.end(), [&](const Dep& e) { return e.path == dep.path; }))
      dirs.push_back(dep);
  };
  for (const auto& s : p.sources) add(fs::dirname(s));
  for (const auto* cmd : {&p.cpp_compile, &p.cuda_compile})
    for (const auto& a : *cmd)
      if (a.rfind("-I", 0) == 0 && a.size() > 2) add(a.substr(2));
  return dirs;
}


// Throws the remembered failure of this request if its inputs are unchanged since.
void throw_if_remembered(const plan::Plan& p) {
  std::string text;
  Failure failure;
  if (!settings::flag("JITKERN_RETRY_FAILED") && fs::read_file(p.entry_dir + "/failed", &text) && manifest::parse(text, &failure) &&
      failure.request_key == p.request_key && manifest::deps_unchanged(failure.deps)) {
    throw BuildError(failure.message +
                     "\n(jitkern remembered this failure: the inputs have not changed since. Edit the sources or set "
                     "JITKERN_RETRY_FAILED=1 to try again.)");
  }
}

// A manifest for `p` with its descriptive fields filled in (the caller adds the library and deps).
Manifest new_manifest(const plan::Plan& p, double build_seconds) {
  Manifest m;
  m.request_key = p.request_key;
  m.toolchain = p.toolchain_id;
  m.module = p.name;
  m.arch = p.has_cuda ? p.cuda_arch : "-";
  m.built_unix = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  m.build_ms = static_cast<int64_t>(build_seconds * 1000);
  return m;
}

// JITKERN_ON_MISS=error: CacheMissError before any compiler is looked for.
// JITKERN_ON_MISS, checked (a bad value is a ValueError on every load, not only on a miss).
enum class OnMiss { kCompile, kWarn, kError };
OnMiss on_miss() {
  const std::string mode = settings::get("JITKERN_ON_MISS");
  if (mode.empty() || mode == "compile") return OnMiss::kCompile;
  if (mode == "warn") return OnMiss::kWarn;
  if (mode == "error") return OnMiss::kError;
  throw std::invalid_argument("jitkern: JITKERN_ON_MISS must be compile, warn or error, got '" + mode + "'");
}

void refuse_miss_if_strict(const plan::Plan& p, const std::vector<std::string>& prebuilt) {
  if (on_miss() != OnMiss::kError) return;
  std::string where = p.entry_dir;
  for (const auto& dir : prebuilt) where += ", " + dir + "/" + p.stem;
  throw CacheMissError("jitkern: module '" + p.name + "' is not cached in " + where +
                       " (or not intact there) and JITKERN_ON_MISS=error forbids compiling it; prebuild it into the cache "
                       "(jitkern prebuild) or set JITKERN_ON_MISS=compile");
}

// Content addressing across edits: a header edited and then reverted maps back to the library already
// built for that content. Returns that library's path, or empty. `before` gets the previous build's
// inputs as they are now, to tell whether one changes during the compile.
std::string reuse_built_content(const plan::Plan& p, std::map<std::string, std::string>* before) {
  std::string text;
  Manifest old;
  if (!fs::read_file(p.entry_dir + "/manifest", &text) || !manifest::parse(text, &old) || old.request_key != p.request_key) return {};
  std::vector<Dep> now = old.deps;
  bool readable = true;
  for (auto& d : now) {
    const std::string path = plan::local(p, d.path);
    readable = readable && fs::stat_sig(path, &d.sig) && sha256_file(path, &d.sha);
    if (!d.sha.empty()) (*before)[path] = d.sha;
  }
  if (!readable) return {};
  Manifest m = new_manifest(p, 0);
  m.full_key = manifest::full_key_of(p.request_key, m.toolchain, now);
  m.lib_name = manifest::library_name(m.full_key);
  const std::string candidate = p.entry_dir + "/" + m.lib_name;
  std::string record;
  if (!fs::stat_sig(candidate, &m.lib_sig) || !sha256_file(candidate, &m.lib_sha) || !fs::read_file(candidate + ".sha256", &record) ||
      record != manifest::library_record(m.full_key, m.lib_sha))
    return {};
  fs::check_private_file(candidate, "cached library");
  m.deps = now;
  fs::write_file_atomic(p.entry_dir + "/manifest", manifest::serialize(m));
  return candidate;
}

bool under_any(const std::string& path, const std::vector<std::string>& prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& pre) { return path.rfind(pre, 0) == 0; });
}

// The compiler's first "file:line: error" (gcc and clang "path:line:col: error: ...", nvcc "path(line):
// error: ..."), preferring the request's own sources, then any file outside the generated wrapper and
// the toolchain; empty if there is none.
std::string first_error(const std::string& log, const plan::Plan& p, const std::string& scratch) {
  static const std::regex gcc(R"(^(.+?):(\d+)(:\d+)?: (fatal )?error\b.*$)");
  static const std::regex edg(R"(^(.+?)\((\d+)\): (catastrophic )?error\b.*$)");
  std::string outside, any;
  for (const auto& line : text::split_lines(log)) {
    if (line.rfind("nvcc fatal", 0) == 0) return line;  // nvcc refused the command itself (an arch, a flag)
    std::smatch m;
    if (!std::regex_match(line, m, gcc) && !std::regex_match(line, m, edg)) continue;
    const std::string file = m[1].str()[0] == '/' ? m[1].str() : scratch + "/" + m[1].str();
    if (std::find(p.sources.begin(), p.sources.end(), file) != p.sources.end()) return line;
    if (outside.empty() && file.rfind(scratch + "/", 0) != 0 && !under_any(file, p.dep_exclude_prefixes)) outside = line;
    if (any.empty()) any = line;
  }
  return !outside.empty() ? outside : any;
}

// A failed compile: remembered (BuildError) when the compiler ran to completion and rejected the
// sources, reported without remembering (Transient) otherwise. The message leads with the module and
// the first error, then the compiler's output, the commands, and where the full log is kept.
[[noreturn]] void fail_build(const plan::Plan& p, const Compile& compile, int rc, const std::string& scratch, double timeout_s) {
  std::string full_log;
  fs::read_file(compile.log(), &full_log);
  const bool full = disk_full(p.entry_dir);
  std::string cause = first_error(full_log, p, scratch);
  if (rc == fs::kTimedOut)
    cause = "took longer than JITKERN_COMPILE_TIMEOUT=" + std::to_string(static_cast<long>(timeout_s)) + " s; its processes were killed";
  else if (full)
    cause = "No space left on device in " + p.entry_dir + " (the compiler's output may be cut short)";
  else if (cause.empty())
    cause = "the compiler ended with " + fs::describe_status(rc);
  if (cause.find("Unsupported gpu architecture") != std::string::npos)
    cause += " (this nvcc cannot target " + p.cuda_arch + ": point CUDA_HOME at a newer CUDA toolkit, or set JITKERN_CUDA_ARCH to an arch it supports)";
  std::string commands;
  for (const auto& c : compile.commands) commands += "command: " + c + "\n";
  const std::string log_path = p.entry_dir + "/failed.log";
  bool kept = false;
  try {
    fs::write_file_atomic(log_path, full_log + "\n" + commands + "generated source:\n" + p.cpp_source + p.cuda_source);
    kept = true;
  } catch (const std::exception&) {
    // a full disk or a read-only cache: the message below still has everything but the untruncated output
  }
  std::string msg = "jitkern: module '" + p.name + "' failed to compile: " + cause + "\ncompiler output (" +
                    fs::describe_status(rc) + "):\n" + read_log(compile.log()) + commands;
  msg += kept ? "full log, commands and generated source: " + log_path + "\n" : "generated source:\n" + p.cpp_source + p.cuda_source;
  if (rc < 0 || full) throw Transient(msg);
  Failure f;
  f.request_key = p.request_key;
  f.message = msg;
  f.deps = hash_files(dependency_paths(p, compile.depfiles, scratch));
  for (const auto& d : hash_files(p.sources))
    if (std::none_of(f.deps.begin(), f.deps.end(), [&](const Dep& e) { return e.path == d.path; })) f.deps.push_back(d);
  for (const auto& d : search_directories(p)) f.deps.push_back(d);
  fs::write_file_atomic(p.entry_dir + "/failed", manifest::serialize(f));
  throw BuildError(msg);
}

// Moves the built library into the entry under its content key, then its record and the manifest.
std::string publish(const plan::Plan& p, const std::string& out, Manifest m) {
  m.full_key = manifest::full_key_of(p.request_key, m.toolchain, m.deps);
  m.lib_name = manifest::library_name(m.full_key);
  const std::string final_path = p.entry_dir + "/" + m.lib_name;
  if (!sha256_file(out, &m.lib_sha)) throw Transient("jitkern: cannot read the built library " + out);
  fs::fsync_path(out);
  if (::rename(out.c_str(), final_path.c_str()) != 0) throw Transient("jitkern: cannot publish " + final_path + ": " + std::strerror(errno));
  fs::stat_sig(final_path, &m.lib_sig);
  fs::write_file_atomic(final_path + ".sha256", manifest::library_record(m.full_key, m.lib_sha));
  fs::write_file_atomic(p.entry_dir + "/manifest", manifest::serialize(m));
  ::unlink((p.entry_dir + "/failed").c_str());
  ::unlink((p.entry_dir + "/failed.log").c_str());
  return final_path;
}

std::string build_locked(const plan::Plan& p, double timeout_s, bool* compiled) {
  std::string lib_path;
  if (lookup_published(p, p.entry_dir, false, p.toolchain_id, &lib_path)) return lib_path;  // published while we waited
  remove_stale_scratch(p.entry_dir, timeout_s);
  throw_if_remembered(p);
  std::map<std::string, std::string> before;  // path -> hash of the previous build's inputs
  lib_path = reuse_built_content(p, &before);
  if (!lib_path.empty()) return lib_path;

  if (on_miss() == OnMiss::kWarn)
    log::emit(log::kWarning, "module '" + p.name + "' is not cached; compiling it (JITKERN_ON_MISS=warn)");
  const std::string cwd = current_dir();
  const auto t0 = std::chrono::steady_clock::now();
  log::emit(log::kInfo, "compiling " + p.name + (p.has_cuda ? " for " + p.cuda_arch : "") + " ...");
  // An input edited while the compiler runs may or may not be in the library: compile again.
  for (int attempt = 0;; ++attempt) {
    const std::string scratch = fs::make_temp_dir(p.entry_dir, "build-");
    struct Cleanup {
      std::string dir;
      ~Cleanup() { fs::remove_tree(dir); }
    } cleanup{scratch};
    const std::string out = scratch + "/module.so";
    // Dependency mtimes at or after this instant (less the kernel's coarse timestamp granularity) mean
    // the file may have changed while it was being read.
    const int64_t started_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count() - 10'000'000;
    Compile compile(p, scratch, cwd, timeout_s);
    const int rc = compile.run(out);
    if (rc != 0) fail_build(p, compile, rc, scratch, timeout_s);
    std::string why;
    if (!plausible_shared_object(out, &why))
      throw Transient("jitkern: the compiler reported success for module '" + p.name + "' but its output " + out + " is " + why +
                      "\ncommand: " + (compile.commands.empty() ? "" : compile.commands.back()) + "\ncompiler output:\n" +
                      read_log(compile.log()));

    Manifest m = new_manifest(p, seconds_since(t0));
    m.deps = hash_files(dependency_paths(p, compile.depfiles, scratch));
    // Changed while the compiler ran: modified at or after its start, or hashed differently before it.
    const bool changed_meanwhile = std::any_of(m.deps.begin(), m.deps.end(), [&](const Dep& d) {
      const auto b = before.find(d.path);
      return d.sig.mtime_ns >= started_ns || (b != before.end() && b->second != d.sha);
    });
    if (changed_meanwhile && attempt < 3) {
      for (const auto& d : m.deps) before[d.path] = d.sha;  // what the next attempt starts from
      log::emit(log::kWarning, "an input of " + p.name + " changed while it compiled; compiling again");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the timestamp granularity
      continue;
    }
    if (changed_meanwhile)
      throw Transient("jitkern: the inputs of module '" + p.name + "' kept changing while it compiled; not publishing it");
    for (auto& d : m.deps) d.path = plan::portable(p, d.path);  // valid wherever the roots are
    lib_path = publish(p, out, m);
    *compiled = true;
    log::emit(log::kInfo, "compiled " + p.name + " in " + format_seconds(seconds_since(t0)) + " (" + compile.phases + ")");
    return lib_path;
  }
}

// The versions of the compilers this machine would use, or empty when one is missing: a machine with
// no compiler serves whatever a prebuilt cache holds.
std::string local_toolchain_id(const plan::Plan& p, const plan::Config& cfg) {
  try {
    plan::Toolchain tc;
    tc.cxx = toolchain::identify(toolchain::cxx_program(), cfg.cache_dir, "C++ compiler");
    if (p.has_cuda) tc.nvcc = toolchain::identify(toolchain::nvcc_program(), cfg.cache_dir, "CUDA compiler");
    return plan::toolchain_id(tc, p.has_cuda);
  } catch (const std::exception&) {
    return {};
  }
}

std::vector<std::string> prebuilt_dirs() {
  std::vector<std::string> out;
  for (auto& dir : text::split(settings::get("JITKERN_PREBUILT_DIRS"), ':'))
    if (!dir.empty()) out.push_back(std::move(dir));
  return out;
}

}  // namespace

std::string build(const BuildRequest& request, const EngineConfig& config) { return build_holding(request, config, nullptr); }

std::string build_holding(const BuildRequest& request, const EngineConfig& config, std::unique_ptr<fs::FileLock>* hold,
                          bool* compiled) {
  bool ignored = false;
  compiled = compiled != nullptr ? compiled : &ignored;
  *compiled = false;
  on_miss();  // validates the setting
  const plan::Config cfg = plan::resolve(config, request.build_directory, engine_lib_dir());
  plan::validate(request);
  plan::Toolchain tc;  // for the lookup: no compilers (the key does not depend on them)
  tc.sources = plan::sources(request, cfg);  // a missing file is reported before any compiler or GPU is looked for
  if (!request.cuda_files.empty()) tc.cuda_arch = toolchain::cuda_arch(request.cuda_arch, request.cuda_device);
  const std::string cwd = current_dir();
  const plan::Plan lookup = plan::make(request, cfg, tc, cwd);
  std::string lib_path;
  // Warm path, never a compiler or a subprocess: read-only prebuilt caches, then the writable cache
  // under its entry's lock taken shared (prune never removes an entry someone holds). Readers never
  // see a partial file: publishing is by rename.
  fs::ensure_private_dir(cfg.cache_dir, "cache directory");
  const std::string here = local_toolchain_id(lookup, cfg);
  const std::vector<std::string> prebuilt = prebuilt_dirs();
  for (const auto& dir : prebuilt)
    if (lookup_published(lookup, dir + "/" + lookup.stem, true, here, &lib_path)) return lib_path;
  if (auto shared = fs::FileLock::try_lock(lookup.lock_path, true);
      shared && lookup_published(lookup, lookup.entry_dir, false, here, &lib_path)) {
    if (hold != nullptr) *hold = std::move(shared);
    return lib_path;
  }
  refuse_miss_if_strict(lookup, prebuilt);
  tc.cxx = toolchain::identify(toolchain::cxx_program(), cfg.cache_dir, "C++ compiler");
  tc.cxx_from_env = !settings::get("CXX").empty();
  if (!request.cuda_files.empty()) tc.nvcc = toolchain::identify(toolchain::nvcc_program(), cfg.cache_dir, "CUDA compiler");
  const plan::Plan p = plan::make(request, cfg, tc, cwd);  // the same key, now with the commands
  const double timeout_s = compile_timeout_s();
  fs::ensure_private_dir(cfg.lock_dir, "lock directory");
  fs::CancelScope cancel;  // Ctrl-C and SIGTERM end the compile (and its compilers) at once
  auto lock = std::make_unique<fs::FileLock>(p.lock_path, "waiting for another process that is compiling " + p.name + " ...");
  fs::ensure_private_dir(p.entry_dir, "cache entry directory");  // under the lock: `cache prune` may have removed it
  try {
    lib_path = build_locked(p, timeout_s, compiled);
  } catch (const Transient& e) {
    throw BuildError(std::string(e.what()) + "\n(not remembered: the next call compiles again)");
  }
  if (hold != nullptr) *hold = std::move(lock);
  return lib_path;
}

std::vector<std::string> export_names(const BuildRequest& request) {
  plan::validate(request);
  return plan::export_names(request);
}

}  // namespace jitkern
