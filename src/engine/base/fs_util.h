// Small POSIX helpers for the engine: files, directories, processes, locks.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace jitkern::fs {

struct FileSig {
  int64_t size = -1;
  int64_t mtime_ns = 0;
  bool operator==(const FileSig&) const = default;
};

// A file time (st_mtim, st_ctim) in nanoseconds since the epoch.
inline int64_t ns_of(const struct timespec& t) { return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec; }

FileSig sig_of(const struct stat& st);
bool stat_sig(const std::string& path, FileSig* sig);

// An owned file descriptor (closed on destruction; -1: none).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : m_fd(fd) {}
  Fd(Fd&& o) noexcept : m_fd(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  ~Fd();
  int get() const { return m_fd; }
  explicit operator bool() const { return m_fd >= 0; }
  int release() {
    const int fd = m_fd;
    m_fd = -1;
    return fd;
  }

 private:
  int m_fd = -1;
};
// Reads all of an open regular file from offset 0.
bool read_fd(int fd, std::string* out);
// Opens a file for reading without following a final symbolic link; `keep_atime` as read_file's.
Fd open_for_reading(const std::string& path, bool keep_atime);
// `keep_atime`: leave the access time alone (O_NOATIME where permitted), for readers that are not a use.
bool read_file(const std::string& path, std::string* out, bool keep_atime = false);
// Writes via a temporary name in the same directory, fsync, rename, fsync of the directory. The
// temporary name is unique per call (threads of one process and processes in other PID namespaces
// sharing the directory never collide).
// `mode` is set exactly (the umask does not apply).
void write_file_atomic(const std::string& path, const std::string& data, mode_t mode = 0600);
// Appends `data` to `path` (created 0600 if missing); false where it cannot.
bool append_file(const std::string& path, const std::string& data);
// A name no other thread or process will pick: "<prefix>.<pid>.<tid>.<counter>.<random>".
std::string unique_name(const std::string& prefix);
// Whether a directory entry's name is write_file_atomic's temporary name, and the pid in it (0: none).
int temp_name_pid(const std::string& name);
void fsync_path(const std::string& path);
std::string dirname(const std::string& path);
std::string realpath_or(const std::string& path);
// The caller's working directory, read when a relative path first needs it: a process whose directory
// was removed still serves requests that name no relative path.
class WorkingDir {
 public:
  WorkingDir() = default;
  WorkingDir(std::string dir) : m_dir(std::move(dir)), m_read(true) {}  // NOLINT: a fixed directory converts implicitly
  WorkingDir(const char* dir) : WorkingDir(std::string(dir)) {}        // NOLINT: so does a literal
  // `path` made absolute; std::invalid_argument naming `field` and `path` where the directory cannot be read.
  std::string absolute(const std::string& path, const std::string& field) const;

 private:
  mutable std::string m_dir;
  mutable bool m_read = false;
};
// The working directory, or why it cannot be read ("(unreadable: ...)"): for a memo of what relative paths resolved against.
std::string current_dir_or_why();
// The directory of the loaded shared object whose code or data holds `addr` ("" for none, or for the
// main program).
std::string loaded_object_dir(const void* addr);
bool is_executable_file(const std::string& path);
// Why no library under `path` (or under the directory it would be created in, its nearest existing
// parent) can be mapped executable, with the fix; "" where one can. Its file system mounted noexec.
std::string noexec_problem(const std::string& path);
// `program` looked up in `path` (a PATH value; empty: the default path); empty if not found.
std::string which(const std::string& program, const std::string& path);
// Creates `path` and its missing parents (parents 0755, `path` itself `mode`, whatever the umask);
// an existing directory is left as it is. Throws naming `what` on failure.
void make_dirs(const std::string& path, mode_t mode, const char* what);
// Removes `path` and, when it is a directory (not a link to one), everything in it.
void remove_tree(const std::string& path);
std::string make_temp_dir(const std::string& parent, const std::string& prefix);

// Runs argv in its own process group with stdout+stderr appended to log_path.
struct Process {
  int pid = -1;
};
// `env` ("NAME=value") is its whole environment (compile_env::make builds a compiler's); nothing of
// this process's is inherited. `cwd`: the directory it runs in (empty: ours).
Process spawn(const std::vector<std::string>& argv, const std::string& log_path,
              const std::vector<std::string>& env, const std::string& cwd = {});
// The exit status (0-255), -signal when killed by a signal, or kTimedOut after `timeout_s` seconds
// (> 0), when the process group was killed. Also kills the group when interrupted (kInterrupted:
// SIGINT or SIGTERM arrived while waiting, see CancelScope).
inline constexpr int kTimedOut = -1000;
inline constexpr int kInterrupted = -1001;
int wait(Process p, double timeout_s = 0);
// "exit status 1", "killed by signal 9 (Killed)", "timed out", "interrupted".
std::string describe_status(int status);
std::string join_command(const std::vector<std::string>& argv);
// A single-quoted word for /bin/sh.
std::string shell_quote(const std::string& s);

// While alive (in any thread), SIGINT and SIGTERM kill the compilers being waited for and are then
// re-delivered to the process's previous handlers, so that Ctrl-C ends a compile at once; either stays
// ignored where the process ignores it.
bool cancel_requested();
class CancelScope {
 public:
  CancelScope();
  ~CancelScope();
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;
};

// An advisory lock (flock) held until destruction; the kernel drops it if we die. The store decides
// who takes which kind when (src/engine/store/store.h).
class FileLock {
 public:
  enum Kind { kShared, kExclusive };
  enum Outcome { kLocked, kBusy, kUnavailable };
  // Opens `path` (creating it where it can; read-only where it cannot: flock works on either) and
  // locks it. `wait`: blocks while an incompatible holder has it, logging `waiting_message` once
  // (Ctrl-C ends the wait). Returns nullptr with *outcome kBusy (not waiting and held) or
  // kUnavailable (the file can be neither opened nor created, e.g. a read-only file system).
  static std::unique_ptr<FileLock> acquire(const std::string& path, Kind kind, bool wait, const std::string& waiting_message,
                                           Outcome* outcome);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  explicit FileLock(Fd fd) : m_fd(std::move(fd)) {}
  Fd m_fd;
};

}  // namespace jitkern::fs
