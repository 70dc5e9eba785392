#include "host_prelude.h"

#include "fs_util.h"
#include "log.h"
#include "manifest.h"
#include "text.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace jitkern::host_prelude {
namespace {

// What identifies a header's contents without reading it: an edit, a replacement or a back-dated
// copy (cp -p sets the mtime back, never the ctime) changes one of these.
struct Sig {
  dev_t dev = 0;
  ino_t ino = 0;
  int64_t size = -1, mtime_ns = 0, ctime_ns = 0;
  bool operator==(const Sig&) const = default;
};

int64_t ns(const struct timespec& t) { return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec; }

bool sig_now(const std::string& path, Sig* out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  *out = {st.st_dev, st.st_ino, st.st_size, ns(st.st_mtim), ns(st.st_ctim)};
  return true;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

enum class State { kCompiling, kReady, kUnusable };

struct Entry {
  State state = State::kCompiling;
  std::string dir;
  int pid = -1;  // the compiler's, while it runs
  std::vector<std::pair<std::string, Sig>> headers;
  std::string outcome;  // for the log, said by the next build that asks (never from the compile's thread:
                        // Python's log sink may be gone when it ends at exit)
};

struct Registry {
  std::mutex mutex;
  std::condition_variable compiled;
  std::map<std::string, Entry> entries;  // by flags and prelude
  int compiling = 0;
  const pid_t owner = ::getpid();
};

// Never destroyed: a compile's thread may still run while static objects are destroyed at exit.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// At exit: stops a compile still running and removes the directories (in the process that made them:
// a forked child inherits the registry, not the compiles).
void remove_at_exit() {
  Registry& r = registry();
  if (::getpid() != r.owner) return;
  std::unique_lock lock(r.mutex);
  for (auto& [key, e] : r.entries)
    if (e.state == State::kCompiling && e.pid > 0) ::kill(-e.pid, SIGKILL);
  r.compiled.wait_for(lock, std::chrono::seconds(5), [&] { return r.compiling == 0; });
  for (auto& [key, e] : r.entries)
    if (e.state != State::kCompiling && !e.dir.empty()) fs::remove_tree(e.dir);
}

std::string temp_root() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp";
}

std::string first_line(const std::string& path) {
  std::string text;
  fs::read_file(path, &text);
  const auto lines = text::split_lines(text);
  return lines.empty() ? "no output" : lines.front();
}

// The compile, in a thread of its own; its outcome goes into the registry's entry `key`.
void compile(std::string key, std::vector<std::string> argv, std::string prelude, double timeout_s) {
  Registry& r = registry();
  const auto t0 = std::chrono::steady_clock::now();
  std::string dir, why;
  std::vector<std::pair<std::string, Sig>> headers;
  try {
    dir = fs::make_temp_dir(temp_root(), "jitkern-prelude-");
    {
      std::lock_guard lock(r.mutex);
      r.entries[key].dir = dir;
    }
    fs::write_file_atomic(dir + "/host_prelude.h", "#include \"" + prelude + "\"\n");
    // A header modified at or after this instant (less the timestamps' granularity) may have changed while it was read.
    const int64_t started_ns = now_ns() - 10'000'000;
    const fs::Process p = fs::spawn(argv, dir + "/prelude.log", {}, dir);
    {
      std::lock_guard lock(r.mutex);
      r.entries[key].pid = p.pid;
    }
    const int rc = fs::wait(p, timeout_s);
    std::string deps;
    if (rc != 0) {
      why = "the host compiler ended with " + fs::describe_status(rc) + ": " + first_line(dir + "/prelude.log");
    } else if (!fs::read_file(dir + "/prelude.d", &deps)) {
      why = "it wrote no list of the headers it read";
    } else {
      for (const auto& raw : manifest::parse_depfile(deps)) {
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
        headers.emplace_back(path, sig);
      }
    }
  } catch (const std::exception& e) {
    why = e.what();
  }
  char took[32];
  std::snprintf(took, sizeof took, "%.2f s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  {
    std::lock_guard lock(r.mutex);
    Entry& e = r.entries[key];
    e.state = why.empty() ? State::kReady : State::kUnusable;
    e.pid = -1;
    e.headers = std::move(headers);
    e.outcome = why.empty() ? std::string("precompiled the host prelude in ") + took + " for the host passes of builds run at once"
                            : "could not precompile the host prelude (" + why + "): host passes parse it";
    --r.compiling;
  }
  r.compiled.notify_all();
}

}  // namespace

std::optional<Precompiled> find(const std::vector<std::string>& flags, const std::string& prelude, bool gcc, bool start,
                                double timeout_s) {
  // A quote or a newline cannot be spelled in the forwarding header's #include.
  if (!gcc || prelude.find_first_of("\"\n") != std::string::npos) return std::nullopt;
  std::string key = prelude;
  for (const auto& f : flags) key += '\0' + f;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.entries.find(key);
  if (it == r.entries.end()) {
    if (!start) return std::nullopt;
    // The compile's flags are the host pass's, as a header: GCC uses a precompiled header only under the
    // options it was compiled with.
    std::vector<std::string> argv = flags;
    for (std::size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == "-x") argv[i + 1] = "c++-header";
    argv.insert(argv.end(), {"-MD", "-MF", "prelude.d", "host_prelude.h", "-o", "host_prelude.h.gch"});
    log::emit(log::kDebug, "run, in a temporary directory beside the builds: " + fs::join_command(argv));
    r.entries[key];
    ++r.compiling;
    static std::once_flag at_exit;
    std::call_once(at_exit, [] { std::atexit(remove_at_exit); });
    try {
      std::thread(compile, key, std::move(argv), prelude, timeout_s).detach();
    } catch (const std::exception&) {  // no thread to be had: the host passes parse the prelude
      r.entries[key].state = State::kUnusable;
      --r.compiling;
    }
    return std::nullopt;
  }
  Entry& e = it->second;
  if (!e.outcome.empty()) log::emit(log::kInfo, std::exchange(e.outcome, {}));
  if (e.state != State::kReady) return std::nullopt;
  for (const auto& [path, sig] : e.headers) {
    Sig now;
    if (!sig_now(path, &now) || !(now == sig)) {
      e.state = State::kUnusable;  // its directory stays until exit: a host pass may be reading it
      log::emit(log::kInfo, "the precompiled host prelude is out of date (" + path + " changed): host passes parse the prelude");
      return std::nullopt;
    }
  }
  return Precompiled{e.dir + "/host_prelude.h", e.dir + "/prelude.d", e.dir};
}

}  // namespace jitkern::host_prelude
