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

bool stat_sig(const std::string& path, FileSig* sig);
// `keep_atime`: leave the access time alone (O_NOATIME where permitted), for readers that are not a use.
bool read_file(const std::string& path, std::string* out, bool keep_atime = false);
// Writes via a temporary name in the same directory, fsync, rename, fsync of the directory. The
// temporary name is unique per call (threads of one process and processes in other PID namespaces
// sharing the directory never collide).
void write_file_atomic(const std::string& path, const std::string& data);
// A name no other thread or process will pick: "<prefix>.<pid>.<tid>.<counter>.<random>".
std::string unique_name(const std::string& prefix);
void fsync_path(const std::string& path);
std::string dirname(const std::string& path);
std::string realpath_or(const std::string& path);
bool is_executable_file(const std::string& path);
std::string which(const std::string& program);  // PATH lookup; empty if not found
// Creates `path` (and missing parents) with mode 0700 and refuses an existing directory that is
// not ours or is writable by group/others: loading a shared object from it is running code.
void ensure_private_dir(const std::string& path, const char* what);
// Refuses a file that is not ours or is writable by group/others.
void check_private_file(const std::string& path, const char* what);
// The same check and the file's signature from one lstat; false (nothing thrown) when it is missing.
bool private_file_sig(const std::string& path, const char* what, FileSig* sig);
// For read-only prebuilt caches: a regular file (a directory) that belongs to us or to root and is
// writable by no one else; false (nothing thrown) otherwise.
bool trusted_file_sig(const std::string& path, FileSig* sig);
bool trusted_dir(const std::string& path);
void remove_tree(const std::string& path);
// Sets the file's access time to now (its modification time stays) unless it is less than an hour
// old: a cache entry's last use. Best effort: a read-only cache stays as it is.
void mark_used(const std::string& path);
std::string make_temp_dir(const std::string& parent, const std::string& prefix);

// Runs argv in its own process group with stdout+stderr appended to log_path.
struct Process {
  int pid = -1;
};
// `env_overrides` ("NAME=value") are added to (or replace entries of) the current environment.
// `cwd`: the directory it runs in (empty: ours).
Process spawn(const std::vector<std::string>& argv, const std::string& log_path,
              const std::vector<std::string>& env_overrides = {}, const std::string& cwd = {});
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
// re-delivered to the process's previous handlers, so that Ctrl-C ends a compile at once.
bool cancel_requested();
class CancelScope {
 public:
  CancelScope();
  ~CancelScope();
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;
};

// An advisory lock (flock) held until destruction; the kernel drops it if we die. Builds hold a key's
// lock exclusively; loads hold it shared from the cache lookup until the library is mapped, so that
// `jitkern cache prune` (exclusive, never waiting) cannot remove a library being loaded.
class FileLock {
 public:
  // Exclusive; logs `waiting_message` (if any) and waits while another holder has it.
  FileLock(const std::string& path, const std::string& waiting_message);
  // Shared or exclusive without waiting: nullptr if another process holds it incompatibly or the
  // lock file cannot be opened.
  static std::unique_ptr<FileLock> try_lock(const std::string& path, bool shared);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  explicit FileLock(int fd) : m_fd(fd) {}
  int m_fd = -1;
};

}  // namespace jitkern::fs
