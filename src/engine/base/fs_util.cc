#include "base/fs_util.h"


#include "base/log.h"
#include "base/text.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <mutex>
#include <utility>
#include <unordered_set>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <thread>


namespace jitkern::fs {
namespace {
[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("jitkern: " + what + ": " + std::strerror(errno)); }
}  // namespace

FileSig sig_of(const struct stat& st) { return {st.st_size, ns_of(st.st_mtim)}; }

bool stat_sig(const std::string& path, FileSig* sig) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  *sig = sig_of(st);
  return true;
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (m_fd >= 0) ::close(m_fd);
    m_fd = o.release();
  }
  return *this;
}

Fd::~Fd() {
  if (m_fd >= 0) ::close(m_fd);
}

bool read_fd(int fd, std::string* out) {
  out->clear();
  char buf[1 << 14];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out->append(buf, static_cast<std::size_t>(n));
    at += n;
    if (static_cast<std::size_t>(n) < sizeof buf) return true;  // a regular file's short read is its end
  }
}

Fd open_for_reading(const std::string& path, bool keep_atime) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | (keep_atime ? O_NOATIME : 0));
  if (fd < 0 && keep_atime && errno == EPERM) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);  // not our file
  return Fd(fd);
}

bool read_file(const std::string& path, std::string* out, bool keep_atime) {
  const Fd fd = open_for_reading(path, keep_atime);
  return fd && read_fd(fd.get(), out);
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open " + path + " for fsync");
  ::fsync(fd);
  ::close(fd);
}

std::string unique_name(const std::string& prefix) {
  static std::atomic<unsigned long> counter{0};
  static thread_local std::mt19937_64 rng{std::random_device{}() ^ (uint64_t(::getpid()) << 32) ^ uint64_t(::gettid())};
  char buf[96];
  std::snprintf(buf, sizeof buf, ".%d.%d.%lu.%016llx", static_cast<int>(::getpid()), static_cast<int>(::gettid()),
                counter.fetch_add(1), static_cast<unsigned long long>(rng()));
  return prefix + buf;
}

int temp_name_pid(const std::string& name) {
  const auto at = name.find(".tmp.");
  return at == std::string::npos ? 0 : std::max(1, std::atoi(name.c_str() + at + 5));
}

namespace {
// Writes all of `data` to `fd` (retrying interrupted writes); false on an error, errno set.
bool write_all(int fd, const std::string& data) {
  for (std::size_t done = 0; done < data.size();) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}
}  // namespace

void write_file_atomic(const std::string& path, const std::string& data, mode_t mode) {
  const std::string tmp = unique_name(path + ".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) fail("cannot create " + tmp);
  ::fchmod(fd, mode);
  if (!write_all(fd, data)) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    errno = err;
    fail("cannot write " + tmp);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    errno = err;
    fail("cannot fsync " + tmp);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    errno = err;
    fail("cannot rename " + tmp + " to " + path);
  }
  fsync_path(dirname(path));
}

std::string dirname(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string realpath_or(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}

namespace {
// Why getcwd failed, for a message.
std::string cwd_problem(int err) {
  if (err == ENOENT) return "it was removed while this process was in it";
  return std::strerror(err);
}
}  // namespace

std::string WorkingDir::absolute(const std::string& path, const std::string& field) const {
  if (path.empty() || path[0] == '/') return path;
  if (!m_read) {
    char buf[PATH_MAX];
    if (::getcwd(buf, sizeof buf) == nullptr)
      throw std::invalid_argument("jitkern: " + field + ": '" + path + "' is a relative path, and the working directory it is relative to " +
                                  "cannot be read (" + cwd_problem(errno) + "): give an absolute path, or change to an existing directory");
    m_dir = buf, m_read = true;
  }
  return m_dir + "/" + path;
}

std::string current_dir_or_why() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof buf) != nullptr ? std::string(buf) : "(unreadable: " + cwd_problem(errno) + ")";
}

std::string loaded_object_dir(const void* addr) {
  const char* name = nullptr;
#if __GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35)
  // A lookup in the loader's sorted table: dladdr and dl_iterate_phdr visit every loaded object
  // (hundreds in a process that imported torch), cold on a process's first load.
  dl_find_object found{};
  if (::_dl_find_object(const_cast<void*>(addr), &found) == 0 && found.dlfo_link_map != nullptr) name = found.dlfo_link_map->l_name;
#else
  Dl_info info{};
  if (::dladdr(addr, &info) != 0) name = info.dli_fname;
#endif
  if (name == nullptr || *name == '\0') return "";
  return dirname(name[0] == '/' ? std::string(name) : realpath_or(name));
}

bool is_executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::string noexec_problem(const std::string& path) {
  std::string dir = path;
  struct stat st;
  while (::stat(dir.c_str(), &st) != 0 && dir != "/" && dir != ".") dir = dirname(dir);
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) != 0 || (v.f_flag & ST_NOEXEC) == 0) return "";
  return "its file system is mounted noexec, so no module can be loaded from it: put the cache on one that allows executing, with "
         "JITKERN_CACHE_DIR or JITKERN_PREBUILT_DIRS, or remount it without noexec";
}

std::string which(const std::string& program, const std::string& path) {
  if (program.find('/') != std::string::npos) return is_executable_file(program) ? program : "";
  for (const auto& dir : text::split(!path.empty() ? path : "/usr/local/bin:/usr/bin:/bin", ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;  // an empty entry is the current directory
    if (is_executable_file(candidate)) return candidate;
  }
  return "";
}

void make_dirs(const std::string& path, mode_t mode, const char* what) {
  if (::access(path.c_str(), F_OK) == 0) return;
  std::vector<std::string> missing;
  for (std::string p = path; ::access(p.c_str(), F_OK) != 0 && p != "/" && p != "."; p = dirname(p)) missing.push_back(p);
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    const bool last = *it == path;
    if (::mkdir(it->c_str(), last ? mode : 0755) != 0) {
      if (errno == EEXIST) continue;
      fail(std::string("cannot create ") + (last ? std::string(what) + " " : "directory ") + *it);
    }
    ::chmod(it->c_str(), last ? mode : 0755);  // exactly, whatever the umask
  }
}

void remove_tree(const std::string& path) {
  struct stat top;
  if (::lstat(path.c_str(), &top) != 0) return;
  if (!S_ISDIR(top.st_mode)) {  // a file or a symbolic link: never what it points to
    ::unlink(path.c_str());
    return;
  }
  DIR* dir = ::opendir(path.c_str());
  if (dir != nullptr) {
    while (const dirent* e = ::readdir(dir)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      const std::string child = path + "/" + name;
      struct stat st;
      if (::lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        remove_tree(child);
      } else {
        ::unlink(child.c_str());
      }
    }
    ::closedir(dir);
  }
  ::rmdir(path.c_str());
}

bool append_file(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool written = write_all(fd, data);
  ::close(fd);
  return written;
}

std::string make_temp_dir(const std::string& parent, const std::string& prefix) {
  std::string templ = parent + "/" + prefix + "XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) fail("cannot create a temporary directory in " + parent);
  return buf.data();
}

Process spawn(const std::vector<std::string>& argv, const std::string& log_path,
              const std::vector<std::string>& env, const std::string& cwd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  // Its own process group, so that a timeout or an interrupt kills the whole compiler (nvcc's children too).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_storage = env;
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    errno = rc;
    fail("cannot run " + argv[0]);
  }
  return {pid};
}

namespace {
std::atomic<int> g_signal{0};  // the SIGINT/SIGTERM received while a CancelScope was alive
std::mutex g_scope_mutex;
int g_scopes = 0;
struct sigaction g_old_int, g_old_term;

void on_signal(int sig) { g_signal.store(sig); }

int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1;
}

int reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) fail("waitpid");
  return decode(status);
}
}  // namespace

CancelScope::CancelScope() {
  std::lock_guard<std::mutex> lock(g_scope_mutex);
  if (g_scopes++ > 0) return;
  g_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking wait returns EINTR and sees the signal
  // A signal the process ignores (a background job's SIGINT, a worker's whose parent takes Ctrl-C) stays ignored.
  for (auto [sig, old] : {std::pair{SIGINT, &g_old_int}, std::pair{SIGTERM, &g_old_term}}) {
    ::sigaction(sig, nullptr, old);
    if (old->sa_handler != SIG_IGN) ::sigaction(sig, &sa, nullptr);
  }
}

CancelScope::~CancelScope() {
  std::lock_guard<std::mutex> lock(g_scope_mutex);
  if (--g_scopes > 0) return;
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  if (const int sig = g_signal.exchange(0)) ::raise(sig);  // to the caller's handler (Python: KeyboardInterrupt)
}

bool cancel_requested() { return g_signal.load() != 0; }

int wait(Process p, double timeout_s) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, p.pid, 0));
  int status = 0;
  for (int sleep_us = 200;;) {
    const pid_t r = ::waitpid(p.pid, &status, WNOHANG);
    if (r == p.pid) break;
    if (r < 0 && errno != EINTR) {
      if (pidfd >= 0) ::close(pidfd);
      fail("waitpid");
    }
    const bool timed_out = timeout_s > 0 && clock::now() >= deadline;
    if (timed_out || cancel_requested()) {
      ::kill(-p.pid, SIGKILL);
      reap(p.pid);
      if (pidfd >= 0) ::close(pidfd);
      return timed_out ? kTimedOut : kInterrupted;
    }
    int wait_ms = 100;  // re-check interrupts and the deadline at least this often
    if (timeout_s > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count() + 1;
      wait_ms = static_cast<int>(left < wait_ms ? left : wait_ms);
    }
    if (pidfd >= 0) {
      pollfd pfd{pidfd, POLLIN, 0};
      ::poll(&pfd, 1, wait_ms);
    } else {  // no pidfd (Linux < 5.3): poll with a growing sleep
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = sleep_us < 20000 ? sleep_us * 2 : sleep_us;
    }
  }
  if (pidfd >= 0) ::close(pidfd);
  return decode(status);
}

std::string describe_status(int status) {
  if (status == kTimedOut) return "timed out";
  if (status == kInterrupted) return "interrupted";
  if (status < 0) return "killed by signal " + std::to_string(-status) + " (" + ::strsignal(-status) + ")";
  return "exit status " + std::to_string(status);
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string join_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_of(" \t\n\"'\\$`;&|<>()*?[]{}#~!") == std::string::npos;
    out += plain ? a : shell_quote(a);
  }
  return out;
}

namespace {
// The descriptors of held locks. A flock belongs to the open file, which fork() shares: the child of a
// fork during a build would hold the build's lock after the build released it. In the child each is
// pointed at /dev/null (dropping the child's share; its FileLock objects later close that harmlessly).
std::mutex g_lock_fds_mutex;
std::unordered_set<int>* g_lock_fds = new std::unordered_set<int>;  // never destroyed: used at exit and in atfork

void locks_prepare() { g_lock_fds_mutex.lock(); }
void locks_parent() { g_lock_fds_mutex.unlock(); }
void locks_child() {
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (const int fd : *g_lock_fds)
    if (null >= 0) ::dup3(null, fd, O_CLOEXEC);
  if (null >= 0) ::close(null);
  g_lock_fds->clear();
  g_lock_fds_mutex.unlock();
}

void register_lock_fd(int fd) {
  static const bool registered = (::pthread_atfork(locks_prepare, locks_parent, locks_child), true);
  (void)registered;
  std::lock_guard<std::mutex> lock(g_lock_fds_mutex);
  g_lock_fds->insert(fd);
}
}  // namespace

FileLock::~FileLock() {
  std::lock_guard<std::mutex> lock(g_lock_fds_mutex);
  g_lock_fds->erase(m_fd.get());
}

std::unique_ptr<FileLock> FileLock::acquire(const std::string& path, Kind kind, bool wait, const std::string& waiting_message,
                                            Outcome* outcome) {
  int raw = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (raw < 0 && (errno == EROFS || errno == EACCES)) raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (raw < 0) {
    *outcome = kUnavailable;
    return nullptr;
  }
  Fd fd(raw);
  const int op = kind == kShared ? LOCK_SH : LOCK_EX;
  if (::flock(fd.get(), op | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) fail("cannot lock " + path);
    if (!wait) {
      *outcome = kBusy;
      return nullptr;
    }
    if (!waiting_message.empty()) log::emit(log::kInfo, waiting_message);
    while (::flock(fd.get(), op) != 0) {
      if (errno != EINTR) fail("cannot lock " + path);
      if (cancel_requested()) throw std::runtime_error("jitkern: interrupted while waiting for " + path);
    }
  }
  *outcome = kLocked;
  register_lock_fd(fd.get());
  return std::unique_ptr<FileLock>(new FileLock(std::move(fd)));
}

}  // namespace jitkern::fs
