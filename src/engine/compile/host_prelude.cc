#include "compile/host_prelude.h"

#include "config/compile_env.h"

#include "base/fs_util.h"
#include "base/log.h"
#include "store/manifest.h"
#include "base/text.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace jitkern::host_prelude {
namespace {

constexpr int kMaxFlagSets = 4;  // precompiled preludes a process makes at most (each ~40 MB)
constexpr const char* kDirPrefix = "jitkern-prelude-";

// What identifies a file's contents without reading it (fs::FileSig lacks the inode and ctime): an
// edit, a replacement or a back-dated copy (cp -p sets the mtime back, never the ctime) changes one.
struct Sig {
  dev_t dev = 0;
  ino_t ino = 0;
  int64_t size = -1, mtime_ns = 0, ctime_ns = 0;
  bool operator==(const Sig&) const = default;
};

bool sig_now(const std::string& path, Sig* out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  *out = {st.st_dev, st.st_ino, st.st_size, fs::ns_of(st.st_mtim), fs::ns_of(st.st_ctim)};
  return true;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

enum class State { kCompiling, kReady, kUnusable };

struct Entry {
  State state = State::kCompiling;
  std::string dir;
  int pid = -1;                                         // the compiler's, while it runs
  int lock_fd = -1;  // held for the process's life: a directory whose lock is free belongs to a dead process
  std::vector<std::pair<std::string, Sig>> files;       // the headers it read, then its own two files
  std::string what;     // "host prelude", "shared host prefix"
  std::string header;   // its file's name in dir (the .gch beside it)
  std::string outcome;  // for the log, said by the next build that asks (never from the compile's thread:
                        // Python's log sink may be gone when it ends at exit)
};

struct Registry {
  std::mutex mutex;
  std::condition_variable compiled;
  std::map<std::string, Entry> entries;  // by flags and prelude
  int compiling = 0;
  bool once_started = false;  // the entry of Start::kOnce, not counted against kMaxFlagSets
  pid_t owner = ::getpid();
};

// Never destroyed: a compile's thread may still run while static objects are destroyed at exit.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// A forked child starts with none: its parent's directories go when the parent exits.
void fork_prepare() { registry().mutex.lock(); }
void fork_parent() { registry().mutex.unlock(); }
void fork_child() {
  Registry& r = registry();
  for (auto& [key, e] : r.entries)
    if (e.lock_fd >= 0) ::close(e.lock_fd);  // the parent's descriptions stay locked by the parent
  r.entries.clear();
  r.compiling = 0;
  r.once_started = false;
  r.owner = ::getpid();
  r.mutex.unlock();
}

// At exit: stops a compile still running and removes the directories (in the process that made them).
void remove_at_exit() {
  Registry& r = registry();
  std::unique_lock lock(r.mutex);
  if (::getpid() != r.owner) return;
  for (auto& [key, e] : r.entries)
    if (e.state == State::kCompiling && e.pid > 0) ::kill(-e.pid, SIGKILL);
  r.compiled.wait_for(lock, std::chrono::seconds(5), [&] { return r.compiling == 0; });
  for (auto& [key, e] : r.entries)
    if (e.state != State::kCompiling && !e.dir.empty()) fs::remove_tree(e.dir);
}


// Removes the directories of processes that died without removing theirs (their lock is free).
void sweep(const std::string& root) {
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(kDirPrefix, 0) != 0) continue;
    const std::string dir = root + "/" + name;
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    const int fd = ::open((dir + "/lock").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // being made right now (or not ours to judge)
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) fs::remove_tree(dir);
    ::close(fd);
  }
  ::closedir(d);
}

// What one precompile writes and runs in its directory: `header` (named `name`) compiled by `argv` into
// name.gch; `depfile`: argv writes the headers it read to prelude.d (they are checked on every use).
struct Job {
  std::string name, header;
  std::vector<std::string> argv;
  bool depfile = false;
  std::string what;  // for the log: "the host prelude", "the shared host prefix"
};

// The compile, in a thread of its own; its outcome goes into the registry's entry `key`.
void compile(std::string key, Job job, double timeout_s, std::vector<std::string> env, std::string temp_dir) {
  Registry& r = registry();
  const auto t0 = std::chrono::steady_clock::now();
  std::string dir, why;
  std::vector<std::pair<std::string, Sig>> files;
  const std::string root = fs::realpath_or(temp_dir);
  try {
    sweep(root);
    char name[64];
    std::snprintf(name, sizeof name, "%s%d-", kDirPrefix, static_cast<int>(::getpid()));
    dir = fs::make_temp_dir(root, name);
    const int lock_fd = ::open((dir + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) throw std::runtime_error("cannot lock " + dir + "/lock");
    {
      std::lock_guard lock(r.mutex);
      r.entries[key].dir = dir;
      r.entries[key].lock_fd = lock_fd;
    }
    fs::write_file_atomic(dir + "/" + job.name, job.header);
    // A header modified at or after this instant (less the timestamps' granularity) may have changed while it was read.
    const int64_t started_ns = now_ns() - 10'000'000;
    const fs::Process p = fs::spawn(job.argv, dir + "/prelude.log", compile_env::with(env, {"TMPDIR=" + dir}), dir);  // GCC's temporaries in its directory too
    {
      std::lock_guard lock(r.mutex);
      r.entries[key].pid = p.pid;
    }
    const int rc = fs::wait(p, timeout_s);
    std::string deps;
    if (rc != 0) {
      std::string output;
      fs::read_file(dir + "/prelude.log", &output);
      why = "the host compiler: " + fs::describe_status(rc) + ": " + text::error_lines(output, 1);
    } else if (job.depfile && !fs::read_file(dir + "/prelude.d", &deps)) {
      why = "it wrote no list of the headers it read";
    } else {
      for (const auto& raw : job.depfile ? manifest::parse_depfile(deps) : std::vector<std::string>{}) {
        const std::string path = raw[0] == '/' ? raw : dir + "/" + raw;
        if (path.rfind(dir + "/", 0) == 0) continue;  // the forwarding header
        Sig sig;
        if (!sig_now(path, &sig)) {
          why = path + " is gone";
          break;
        }
        if (sig.mtime_ns >= started_ns || sig.ctime_ns >= started_ns) {
          why = path + " changed while it compiled";
          break;
        }
        files.emplace_back(path, sig);
      }
      for (const auto& own : {"/" + job.name, "/" + job.name + ".gch"}) {  // last: not dependencies, but needed
        Sig sig;
        if (why.empty() && !sig_now(dir + own, &sig)) why = dir + own + " is gone";
        files.emplace_back(dir + own, sig);
      }
    }
  } catch (const std::exception& e) {
    why = e.what();
    if (why.rfind("jitkern: ", 0) == 0) why.erase(0, 9);
  }
  char took[32];
  std::snprintf(took, sizeof took, "%.2f s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  {
    std::lock_guard lock(r.mutex);
    Entry& e = r.entries[key];
    e.state = why.empty() ? State::kReady : State::kUnusable;
    e.pid = -1;
    e.files = std::move(files);
    e.outcome = why.empty() ? "precompiled " + job.what + " in " + took + " (" + dir + ") for the host compiles of later builds"
                            : "could not precompile " + job.what + " in " + root + " (" + why + "): host compiles parse it";
    --r.compiling;
  }
  r.compiled.notify_all();
}

}  // namespace

namespace {

// The entry `key`, precompiled and unchanged; else none, and with `start` (and no such entry yet) the job
// that make_job() gives compiled in the background, one at a time and kMaxFlagSets at most (made only
// then: a shared prefix's job holds megabytes of text).
std::optional<Precompiled> find_or_start(const std::string& key, const std::function<Job()>& make_job, Start start, double timeout_s,
                                         const std::vector<std::string>& env, const std::string& temp_dir) {
  Registry& r = registry();
  std::string command, say;  // logged after the lock: the command at DEBUG, the rest at INFO
  std::optional<Precompiled> found;
  {
    std::lock_guard lock(r.mutex);
    const auto it = r.entries.find(key);
    if (it == r.entries.end()) {
      const int shared = static_cast<int>(r.entries.size()) - (r.once_started ? 1 : 0);
      const bool may = start == Start::kShared ? shared < kMaxFlagSets : start == Start::kOnce && !r.once_started;
      if (!may || r.compiling > 0) return std::nullopt;
      r.once_started = r.once_started || start == Start::kOnce;
      Job job = make_job();
      command = "run, in a temporary directory beside the builds: " + fs::join_command(job.argv);
      r.entries[key].what = job.what;
      r.entries[key].header = job.name;
      ++r.compiling;
      static std::once_flag once;
      std::call_once(once, [] {
        std::atexit(remove_at_exit);
        ::pthread_atfork(fork_prepare, fork_parent, fork_child);
      });
      try {
        std::thread(compile, key, std::move(job), timeout_s, env, temp_dir).detach();
      } catch (const std::exception&) {  // no thread to be had: the host compiles parse it
        r.entries[key].state = State::kUnusable;
        --r.compiling;
      }
    } else {
      Entry& e = it->second;
      say = std::exchange(e.outcome, {});
      if (e.state == State::kReady) {
        Precompiled p{e.dir + "/" + e.header, {}, key};
        for (const auto& [path, sig] : e.files) {
          Sig now;
          if (!sig_now(path, &now) || !(now == sig)) {
            e.state = State::kUnusable;  // its directory stays until exit: a host compile may be reading it
            say += std::string(say.empty() ? "" : "\n") + "the precompiled " + e.what + " is out of date (" + path +
                   (now.size < 0 ? " is gone" : " changed") + "): host compiles parse it";
            break;
          }
          if (path.rfind(e.dir + "/", 0) != 0) p.headers.push_back(path);
        }
        if (e.state == State::kReady) found = std::move(p);
      }
    }
  }
  if (!command.empty()) log::emit(log::kDebug, command);
  for (const auto& line : text::split_lines(say)) log::emit(log::kInfo, line);
  return found;
}

}  // namespace

std::optional<Precompiled> find(const std::vector<std::string>& flags, const std::string& prelude, bool gcc, Start start,
                                double timeout_s, const std::vector<std::string>& env, const std::string& temp_dir) {
  if (!gcc || text::include_line(prelude).empty()) return std::nullopt;  // (the forwarding header #includes it)
  std::string key = prelude;
  for (const auto& f : flags) key += '\0' + f;
  // The compile's flags are the host pass's, as a header: GCC uses a precompiled header only under the
  // options it was compiled with.
  const auto make_job = [&] {
    Job job{"host_prelude.h", text::include_line(prelude), flags, true, "host prelude"};
    for (std::size_t i = 0; i + 1 < job.argv.size(); ++i)
      if (job.argv[i] == "-x") job.argv[i + 1] = "c++-header";
    job.argv.insert(job.argv.end(), {"-MD", "-MF", "prelude.d", "host_prelude.h", "-o", "host_prelude.h.gch"});
    return job;
  };
  return find_or_start(key, make_job, start, timeout_s, env, temp_dir);
}

std::optional<Precompiled> find_prefix(const std::string& compile, std::string_view prefix, const std::string& prefix_sha256, bool gcc,
                                       bool start, double timeout_s, const std::vector<std::string>& env, const std::string& temp_dir) {
  const std::string in = "@prefix@", lang = " -x c++-cpp-output ";
  const auto at = compile.find(in);
  if (!gcc || at == std::string::npos || compile.find(lang) == std::string::npos || compile.rfind(" -o ") == std::string::npos) return std::nullopt;
  std::string key = "prefix";
  for (const auto& part : {compile, prefix_sha256}) key += '\0' + part;
  for (const auto& v : env) key += '\0' + v;
  // The host compile's command, on the prefix as a header (still preprocessed text), into prefix.h.gch.
  const auto make_job = [&] {
    std::string cmd = compile;
    cmd.replace(at, in.size(), "prefix.h");
    cmd.replace(cmd.find(lang), lang.size(), " -x c++-header -fpreprocessed ");
    cmd = cmd.substr(0, cmd.rfind(" -o ")) + " -o prefix.h.gch";
    return Job{"prefix.h", std::string(prefix), {"/bin/sh", "-c", cmd}, false, "shared host prefix"};
  };
  auto found = find_or_start(key, make_job, start ? Start::kShared : Start::kNone, timeout_s, env, temp_dir);
  if (found) found->header += ".gch";
  return found;
}

void retire(const Precompiled& precompiled, const std::string& why) {
  Registry& r = registry();
  std::string what;
  {
    std::lock_guard lock(r.mutex);
    const auto it = r.entries.find(precompiled.key);
    if (it == r.entries.end() || it->second.state != State::kReady) return;
    it->second.state = State::kUnusable;
    what = it->second.what;
  }
  log::emit(log::kInfo, "the precompiled " + what + " is retired (" + why + "): host compiles parse it");
}

}  // namespace jitkern::host_prelude
