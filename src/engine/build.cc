// jitkern::build: a request's way through the cache store. Warm path: the prebuilt layers, then the
// writable cache under the entry's load lock; no compiler runs. Cold path: the entry's build lock,
// compile in a scratch directory, record what the compiler read, publish through the store. The store
// (store.h) owns every file and lock; this file owns compiling and what a build's outcome means.
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "build.h"
#include "compile/steps.h"
#include "compile/compile_errors.h"
#include "config/config.h"
#include "store/dependencies.h"
#include "base/fs_util.h"
#include "base/log.h"
#include "store/manifest.h"
#include "plan/plan.h"
#include "base/text.h"
#include "compile/toolchain.h"

namespace jitkern {
namespace {

using compile::format_seconds;
using compile::seconds_since;
using compile::Transient;
using manifest::Dep;
using manifest::Failure;
using manifest::Manifest;

// A manifest for `p` with its descriptive fields filled in (the caller adds the library and deps).
Manifest new_manifest(const plan::Plan& p, const config::Config& cfg, const std::vector<toolchain::Compiler>& compilers,
                      double build_seconds) {
  Manifest m;
  m.request_key = p.request_key;
  m.toolchain = p.toolchain_id;
  for (const auto& c : compilers) {
    Dep stamp;
    stamp.path = c.path, stamp.sig = c.sig;
    m.compilers.push_back(stamp);
  }
  m.compiler_search = toolchain::search_key(cfg, p.has_cuda);
  m.module = p.name, m.spec = p.spec;
  m.arch = p.has_cuda ? p.cuda_arch : "-";
  m.built_unix = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  m.build_ms = static_cast<int64_t>(build_seconds * 1000);
  return m;
}

// JITKERN_FORCE_REBUILD (config.h): a forced module is compiled once per process, then served as usual.
std::mutex forced_mutex;
std::set<std::string> forced_keys;  // request keys compiled by force in this process

bool force_rebuild(const plan::Plan& p, const config::Config& cfg) {
  const auto& names = cfg.force_rebuild;
  const bool named = std::find(names.begin(), names.end(), "all") != names.end() || std::find(names.begin(), names.end(), p.name) != names.end();
  std::lock_guard<std::mutex> lock(forced_mutex);
  return named && !forced_keys.count(p.request_key);
}

void forced_done(const plan::Plan& p) {
  std::lock_guard<std::mutex> lock(forced_mutex);
  forced_keys.insert(p.request_key);
}

// `misses`: where the module was looked for and why each place could not serve it.
void refuse_miss_if_strict(const plan::Plan& p, const config::Config& cfg, const std::vector<std::string>& misses) {
  if (cfg.on_miss != config::OnMiss::kError) return;
  std::string where;
  for (const auto& m : misses) where += "\n  " + m;
  throw CacheMissError("jitkern: module '" + p.name + "'" + (p.has_cuda ? " for " + p.cuda_arch : "") +
                       " is not cached (or not intact) where jitkern looked, and JITKERN_ON_MISS=error "
                       "forbids compiling it; prebuild it into the cache (jitkern prebuild) or set JITKERN_ON_MISS=compile." + where);
}

// A failed compile: remembered (BuildError) when the compiler ran to completion and rejected the
// sources, reported without remembering (Transient) otherwise. The message leads with the module and
// the first error, then the compiler's output, the commands, and where the full log is kept.
[[noreturn]] void fail_build(const plan::Plan& p, const store::Entry& entry, const compile::Steps& compile, int rc, const std::string& scratch,
                             double timeout_s) {
  const std::string full_log = compile.output();
  const bool full = compile_errors::blames_the_disk(full_log) || entry.out_of_space();  // checked after the failure: the link may have filled it
  std::string cause = compile_errors::first_error(full_log, p, scratch);
  if (rc == fs::kTimedOut)
    cause = "took longer than JITKERN_COMPILE_TIMEOUT=" + std::to_string(static_cast<long>(timeout_s)) + " s; its processes were killed";
  else if (full)
    cause = "No space left on device for " + entry.dir() + " (the compiler's output may be cut short)";
  else if (cause.empty())
    cause = "the compiler ended with " + fs::describe_status(rc);
  cause = compile_errors::leading_cause(full_log, p, cause);
  if (const std::string pass = compile.device_pass_of(cause); !pass.empty()) cause += " (in " + pass + ")";
  if (cause.find("Unsupported gpu architecture") != std::string::npos)
    cause += " (this nvcc cannot target " + p.cuda_arch + ": point CUDA_HOME at a newer CUDA toolkit, or set JITKERN_CUDA_ARCH to an arch it supports)";
  std::string commands;
  for (const auto& c : compile.commands) commands += "command: " + c + "\n";
  const std::string kept_log = full_log + "\n" + commands + compile_errors::generated_sources(p);
  // The scratch directory is gone when the message is read: the generated sources go by their names
  // (host.cc, device.cu), under which the kept log holds them.
  // The message shows each diagnostic once; the commands are in the kept log, whose path ends it.
  std::string msg = "jitkern: module '" + p.name + "' failed to compile: " + cause + "\ncompiler output (" +
                    fs::describe_status(rc) + "):\n" + text::erase_all(compile_errors::truncated(compile_errors::each_diagnostic_once(full_log)), scratch + "/");
  const bool transient = rc < 0 || full;
  if (transient) {
    const bool kept = entry.keep_failure_log(kept_log);
    msg += kept ? "the commands, their full output and the generated source: " + entry.failure_log_path() + "\n" : commands + compile_errors::generated_sources(p);
    throw Transient(msg);
  }
  msg += "the commands, their full output and the generated source: " + entry.failure_log_path() + "\n";
  Failure f;
  f.request_key = p.request_key;
  f.config_key = p.config_key;
  f.spec = p.spec;
  f.message = msg;
  f.deps = deps::hash_files(deps::dependency_paths(p, compile.depfiles, scratch));
  for (const auto& d : deps::search_directories(p)) f.deps.push_back(d);
  try {
    entry.remember_failure(f, kept_log);
  } catch (const std::exception&) {
    // a read-only or full cache: reported, not remembered
  }
  throw BuildError(msg);
}

store::Found build_locked(const plan::Plan& p, const config::Config& cfg, const store::Entry& entry,
                          const std::vector<toolchain::Compiler>& compilers, const store::ToolchainCheck& toolchain_ok, bool parallel_build,
                          bool forced, bool* compiled) {
  const double timeout_s = cfg.compile_timeout_s;
  std::string why = "JITKERN_FORCE_REBUILD names it";
  if (!forced)
    if (auto found = entry.lookup(p, toolchain_ok, &why)) return std::move(*found);  // published while we waited
  entry.remove_stale_scratch(timeout_s);
  Failure failure;
  if (!forced && !cfg.retry_failed && entry.remembered_failure(p.request_key, p.config_key, &failure))
    throw BuildError(failure.message +
                     "\n(jitkern remembered this failure: the inputs have not changed since. Edit the sources or set "
                     "JITKERN_RETRY_FAILED=1 to try again.)");
  std::map<std::string, std::string> before;  // path -> hash of the previous build's inputs
  if (!forced)
    if (auto found = entry.reuse(p, new_manifest(p, cfg, compilers, 0), &before)) return std::move(*found);

  if (cfg.on_miss == config::OnMiss::kWarn)
    log::emit(log::kWarning, "module '" + p.name + "' is not cached; compiling it (JITKERN_ON_MISS=warn)");
  const auto t0 = std::chrono::steady_clock::now();
  // Why a module built before is compiled again (a changed dependency is named); a first build needs no reason.
  const bool first = why == "not cached" || why == "no complete manifest";
  log::emit(log::kInfo, "compiling " + p.name + (p.has_cuda ? " for " + p.cuda_arch : "") + (first ? "" : " (rebuilding: " + why + ")") + " ...");
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
    compile::Steps compile(p, cfg, scratch, parallel_build);
    const int rc = compile::run(compile, out);
    if (rc != 0) fail_build(p, entry, compile, rc, scratch, timeout_s);

    Manifest m = new_manifest(p, cfg, compilers, seconds_since(t0));
    m.deps = deps::hash_files(deps::dependency_paths(p, compile.depfiles, scratch));
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
                      (compile.commands.empty() ? "" : compile.commands.back()) + "\ncompiler output:\n" + compile_errors::truncated(compile.output()));
    }
    *compiled = true;
    log::emit(log::kInfo, "compiled " + p.name + " in " + format_seconds(seconds_since(t0)) + " (" + compile.phases + ")");
    return found;
  }
}

}  // namespace

std::string build(const BuildRequest& request, const EngineConfig& config) {
  bool compiled = false;
  return find_or_build(request, config, &compiled).path;
}

store::Found find_or_build(const BuildRequest& request, const EngineConfig& config, bool* compiled) {
  *compiled = false;
  const config::Config cfg = config::resolve(config, request.build_directory, config::engine_lib_dir());
  note_library_sources(cfg);
  plan::validate(request);
  const auto sources = plan::sources(request, cfg);  // a missing file is reported before any compiler or GPU is looked for
  const std::string arch = request.cuda_files.empty() ? "" : toolchain::cuda_arch(request.cuda_arch, request.cuda_device, cfg);
  plan::Plan p = plan::make(request, cfg, sources, arch, fs::WorkingDir());  // the key, without compilers: a lookup runs none
  const store::Store cache = store::Store::writable(cfg);
  const store::ToolchainCheck toolchain_ok = [&](const Manifest& m) { return toolchain::accepts(m, cache, cfg, p.has_cuda); };
  // Warm path, never a compiler or a subprocess: the read-only prebuilt layers, then the writable
  // cache under the entry's load lock (no removal while it is held; a build or removal in progress
  // is waited for). Readers never see a partial file: publishing is by rename.
  std::vector<std::string> misses;
  const bool forced = force_rebuild(p, cfg);
  for (const store::Store& layer : forced ? std::vector<store::Store>{} : store::Store::prebuilt_layers(cfg.prebuilt_dirs)) {
    if (const std::string why = layer.layer_distrust(); !why.empty()) {
      misses.push_back(layer.describe() + ": " + why);
      continue;
    }
    const store::Entry entry = layer.entry(p);
    std::string why;
    if (auto found = entry.lookup(p, toolchain_ok, &why)) return std::move(*found);
    misses.push_back((layer.label().empty() ? "" : layer.label() + ": ") + entry.dir() + ": " + why);
  }
  cache.ensure_writable(false);
  const store::Entry entry = cache.entry(p);
  struct stat st;
  if (forced) {
    misses.push_back(entry.dir() + ": JITKERN_FORCE_REBUILD names it");
  } else if (::lstat(entry.dir().c_str(), &st) == 0) {
    auto lock = entry.lock_for_load();
    std::string why;
    if (auto found = entry.lookup(p, toolchain_ok, &why)) {
      found->lock = std::move(lock);
      return std::move(*found);
    }
    misses.push_back(entry.dir() + ": " + why);
  } else {
    misses.push_back(entry.dir() + ": not cached");
  }
  refuse_miss_if_strict(p, cfg, misses);

  cache.ensure_writable(true);  // a build creates the cache: before the compilers' records and the lock directory
  plan::Toolchain tc;
  tc.cxx = toolchain::identify(cfg.cxx, cache, "C++ compiler", cfg);
  if (p.has_cuda) tc.nvcc = toolchain::identify(toolchain::nvcc_program(cfg), cache, "CUDA compiler", cfg);
  plan::bind(p, cfg, tc);  // the same commands and key, with the compilers named
  const std::vector<toolchain::Compiler> compilers = p.has_cuda ? std::vector{tc.cxx, tc.nvcc} : std::vector{tc.cxx};
  fs::CancelScope cancel;  // Ctrl-C and SIGTERM end the compile (and its compilers) at once
  auto lock = entry.lock_for_build("waiting for another process that is compiling " + p.name + " ...");
  entry.prepare();  // under the lock: `cache prune` may have removed it
  try {
    store::Found found = build_locked(p, cfg, entry, compilers, toolchain_ok, config.parallel_build, forced, compiled);
    found.lock = std::move(lock);
    if (forced) forced_done(p);
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
