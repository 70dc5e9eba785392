#include "store/store.h"

#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "base/log.h"
#include "config/settings.h"
#include "base/sha256.h"
#include "base/text.h"

namespace jitkern::store {
namespace {

using manifest::Dep;
using manifest::Failure;
using manifest::Manifest;

constexpr const char* kManifest = "manifest";
constexpr const char* kFailure = "failed";
constexpr const char* kFailureLog = "failed.log";
constexpr const char* kRecordSuffix = ".sha256";
constexpr const char* kScratchPrefix = "build-";  // build-<pid>@<host>-XXXXXX
constexpr const char* kLockSuffix = ".lock";
// Published files are readable by everyone (a prebuilt cache serves other users) and writable by
// their owner alone, whatever the umask; the writable cache's top directory keeps it private.
constexpr mode_t kFileMode = 0644, kEntryDirMode = 0755;
// Below this much free space a failed build is blamed on the disk, not on the sources.
constexpr uint64_t kMinFreeBytes = 64ull << 20;

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#else
#error "jitkern: unknown host machine"
#endif
static_assert(sizeof(void*) == 8, "jitkern's engine is 64-bit only");

std::string mode_text(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// Who may own a file of a store, and that no one else may write it: ours in the writable cache; ours
// or root's in a prebuilt layer.
// An entry's file opened for reading; a process out of descriptors is an error saying so, never a miss.
int open_entry_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && (errno == EMFILE || errno == ENFILE))
    throw std::runtime_error("jitkern: cannot open " + path + ": " + std::strerror(errno) +
                             " (too many open files: raise the limit, e.g. ulimit -n, or close descriptors)");
  return fd;
}

bool trusted_owner(const struct stat& st, bool read_only) {
  return (st.st_uid == ::geteuid() || (read_only && st.st_uid == 0)) && !(st.st_mode & 022);
}

std::string distrust_text(const std::string& what, const std::string& path, const struct stat& st, bool read_only) {
  return what + " " + path + " is owned by uid " + std::to_string(st.st_uid) + " with mode " + mode_text(st.st_mode) +
         "; it must belong to " + (read_only ? "root or the current user" : "the current user") + " (uid " +
         std::to_string(::geteuid()) + ") and be writable by no one else";
}

// Why directory `real` (a real path) and those above it could have their entries swapped by someone
// else, or "": each must be ours or root's and writable by no one else, except a root-owned sticky
// directory (/tmp) above it, which protects what others own in it. `check_top`: `real` itself too.
std::string path_distrust(const std::string& real, bool check_top) {
  struct stat st;
  for (std::string dir = real;; dir = fs::dirname(dir)) {
    const bool top = dir == real;
    if (top && !check_top) continue;
    if (::lstat(dir.c_str(), &st) != 0) return "cannot read " + dir;
    const bool sticky_root = !top && st.st_uid == 0 && (st.st_mode & S_ISVTX);
    if (!((st.st_uid == ::geteuid() || st.st_uid == 0) && (!(st.st_mode & 022) || sticky_root)))
      return distrust_text(top ? "its directory" : "its parent directory", dir, st, true);
    if (dir == "/") return "";
  }
}

// Why the first bytes of a file (the whole file is `size` bytes) are not a shared object this
// process can load, or "".
std::string elf_problem(const std::string& head, int64_t size) {
  if (head.size() < sizeof(Elf64_Ehdr) || std::memcmp(head.data(), ELFMAG, SELFMAG) != 0)
    return "not an ELF file (" + std::to_string(size) + " bytes)";
  Elf64_Ehdr eh;
  std::memcpy(&eh, head.data(), sizeof eh);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return "a 32-bit ELF file; this machine loads 64-bit shared objects";
  if (eh.e_ident[EI_DATA] != ELFDATA2LSB) return "a big-endian ELF file; this machine is little-endian";
  if (eh.e_type != ET_DYN) return "not a shared object (ELF type " + std::to_string(eh.e_type) + ")";
  if (eh.e_machine != kHostMachine)
    return "built for another machine (ELF machine " + std::to_string(eh.e_machine) + ", this one is " + std::to_string(kHostMachine) + ")";
  if (eh.e_shoff + uint64_t{eh.e_shnum} * eh.e_shentsize > static_cast<uint64_t>(size))
    return "truncated (its section table lies past its end)";
  return "";
}

std::string elf_problem_of(int fd, int64_t size) {
  std::string head(sizeof(Elf64_Ehdr), '\0');
  const ssize_t n = ::pread(fd, head.data(), head.size(), 0);
  head.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return elf_problem(head, size);
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Bytes under `path` (not following links) and the newest modification time in it.
void measure(const std::string& path, int64_t* bytes, int64_t* newest_unix) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  *newest_unix = std::max<int64_t>(*newest_unix, st.st_mtim.tv_sec);
  if (!S_ISDIR(st.st_mode)) {
    *bytes += st.st_size;
    return;
  }
  for (const auto& n : names_in(path)) measure(path + "/" + n, bytes, newest_unix);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// This host's name as scratch names carry it (no '-' or '/').
const std::string& host_name() {
  static const std::string name = [] {
    char buf[256] = {0};
    ::gethostname(buf, sizeof buf - 1);
    std::string n = text::sanitize(buf);
    std::replace(n.begin(), n.end(), '-', '_');
    return n.empty() ? std::string("host") : n;
  }();
  return name;
}

bool read_manifest_fd(int fd, Manifest* m) {
  std::string text;
  return fs::read_fd(fd, &text) && manifest::parse(text, m);
}

// The entry's last use, for `jitkern cache prune`: the manifest's access time, set at most hourly.
void mark_used(int manifest_fd, const struct stat& st) {
  if (st.st_atim.tv_sec + 3600 > ::time(nullptr)) return;
  const struct timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
  ::futimens(manifest_fd, times);  // best effort: a read-only cache stays as it is
}

// Dependencies recorded under root tokens, as paths of this machine.
std::vector<Dep> localized(const plan::Plan& p, std::vector<Dep> deps) {
  for (auto& d : deps) {
    d.path = plan::local(p, d.path);
    if (!d.resolved.empty()) d.resolved = plan::local(p, d.resolved);
  }
  return deps;
}

// What to do about a cache that a build cannot write: one wording wherever that is found.
std::string unwritable_advice() {
  return "; a build needs a cache it can write: set JITKERN_CACHE_DIR to a writable directory of your own, serve modules prebuilt "
         "elsewhere from a read-only cache through JITKERN_PREBUILT_DIRS (with JITKERN_ON_MISS=error), or, where only the locks "
         "cannot be written, move JITKERN_LOCK_DIR to a writable directory";
}

}  // namespace

// ------------------------------------------------------------------------------------------- Store

Store::Store(std::string root, std::string lock_dir, bool read_only, std::string label)
    : m_root(std::move(root)), m_lock_dir(std::move(lock_dir)), m_label(std::move(label)), m_read_only(read_only) {}

Store Store::writable(const plan::Config& config) { return Store(config.cache_dir, config.lock_dir, false); }

Store Store::prebuilt(const std::string& dir, const std::string& label) { return Store(dir, "", true, label); }

namespace {
std::mutex package_layers_mutex;
std::vector<std::pair<std::string, std::string>> package_layers;  // (label, dir)
}  // namespace

void Store::set_package_layers(std::vector<std::pair<std::string, std::string>> layers) {
  std::lock_guard<std::mutex> lock(package_layers_mutex);
  package_layers = std::move(layers);
}

std::string Store::package_layers_text() {
  std::lock_guard<std::mutex> lock(package_layers_mutex);
  std::string out;
  for (const auto& [label, dir] : package_layers) out += label + "\t" + dir + "\n";
  return out;
}

std::vector<Store> Store::prebuilt_layers(const std::vector<std::string>& dirs) {
  std::vector<Store> out;
  for (const auto& dir : dirs)
    if (!dir.empty()) out.push_back(prebuilt(dir));
  std::lock_guard<std::mutex> lock(package_layers_mutex);
  for (const auto& [label, dir] : package_layers) out.push_back(prebuilt(dir, label));
  return out;
}

std::string Store::stem_of(const std::string& name, const std::string& request_key) {
  return text::sanitize(name) + "-" + request_key.substr(0, 20);
}

bool Store::is_stem(const std::string& name) {
  const std::size_t dash = name.rfind('-');
  if (dash == std::string::npos || dash == 0 || name.size() - dash - 1 != 20) return false;
  return name.find_first_not_of("0123456789abcdef", dash + 1) == std::string::npos;
}

bool Store::exists() const {
  struct stat st {};
  return ::stat(m_root.c_str(), &st) == 0;
}

std::vector<std::string> Store::stems() const {
  std::vector<std::string> out;
  for (const auto& n : names_in(m_root)) {
    struct stat st {};
    if (is_stem(n) && ::lstat((m_root + "/" + n).c_str(), &st) == 0) out.push_back(n);  // a stray file too: verify removes it
  }
  return out;
}

void Store::ensure_writable(bool create) const {
  struct stat st;
  if (::lstat(m_root.c_str(), &st) != 0) {
    if (errno != ENOENT || !create) {
      if (errno == ENOENT) return;
      throw std::runtime_error("jitkern: cannot access cache directory " + m_root + ": " + std::strerror(errno) + unwritable_advice());
    }
    try {
      fs::make_dirs(m_root, 0700, "cache directory");
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(e.what() + unwritable_advice());
    }
    if (::lstat(m_root.c_str(), &st) != 0) throw std::runtime_error("jitkern: cannot access cache directory " + m_root);
  }
  if (S_ISLNK(st.st_mode))
    throw std::runtime_error("jitkern: refusing cache directory " + m_root + ": it is a symbolic link (to " + fs::realpath_or(m_root) +
                             "), which another user could redirect; give the real directory instead");
  if (!S_ISDIR(st.st_mode)) throw std::runtime_error("jitkern: cache directory " + m_root + " is not a directory");
  if (st.st_uid != ::geteuid())
    throw std::runtime_error("jitkern: refusing cache directory " + m_root + ": it is owned by uid " + std::to_string(st.st_uid) +
                             ", not by the current user (uid " + std::to_string(::geteuid()) +
                             "); loading shared objects from it would run someone else's code");
  if (st.st_mode & 022)
    throw std::runtime_error("jitkern: refusing cache directory " + m_root + ": it is writable by group/others (mode " +
                             mode_text(st.st_mode) + "), so anyone could plant code in it; run `chmod go-w " + m_root +
                             "` or point JITKERN_CACHE_DIR elsewhere");
  // What a build publishes is loaded from here later: a parent someone else may write could swap it.
  if (create)
    if (const std::string why = path_distrust(fs::realpath_or(m_root), false); !why.empty())
      throw std::runtime_error("jitkern: refusing cache directory " + m_root + ": " + why +
                               ", so another user could replace what is built there; point JITKERN_CACHE_DIR at a directory of yours "
                               "(under your home, or directly in /tmp)");
  // A read-only mount or a directory of ours without write permission: found here, not at the first file written.
  if (create && ::access(m_root.c_str(), W_OK | X_OK) != 0)
    throw std::runtime_error("jitkern: cannot write cache directory " + m_root + ": " + std::strerror(errno) + unwritable_advice());
}

std::string Store::layer_distrust() const {
  // Checked once per process and layer: a few lstat calls up to /.
  static std::mutex mutex;
  static std::unordered_map<std::string, std::string> memo;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = memo.find(m_root); it != memo.end()) return it->second;
  }
  std::string why;
  const std::string real = fs::realpath_or(m_root);
  struct stat st;
  if (::stat(real.c_str(), &st) != 0) {
    why = errno == ENOENT || errno == ENOTDIR ? "it does not exist" : std::string("cannot read it: ") + std::strerror(errno);
  } else if (!S_ISDIR(st.st_mode)) {
    why = "it is not a directory";
  } else if (::access(real.c_str(), R_OK | X_OK) != 0) {
    why = std::string("cannot read it: ") + std::strerror(errno);  // its entries would all look missing
  } else {
    why = path_distrust(real, true);
  }
  if (!why.empty() && why != "it does not exist")
    log::emit(log::kWarning, "ignoring prebuilt cache " + describe() + ": " + why + (m_label.empty() ? " (see JITKERN_PREBUILT_DIRS)" : ""));
  std::lock_guard<std::mutex> lock(mutex);
  return memo.emplace(m_root, why).first->second;
}

bool Store::read_toolchain_record(const std::string& name, std::string* text) const {
  if (m_read_only) return false;
  const std::string dir = toolchain_dir(), path = dir + "/" + name;
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return false;
  if (!S_ISDIR(st.st_mode) || !trusted_owner(st, false))
    throw std::runtime_error("jitkern: refusing toolchain cache directory " + dir + ": " +
                             (S_ISDIR(st.st_mode) ? "it is writable by group/others or not ours (mode " + mode_text(st.st_mode) + ")"
                                                  : std::string("not a directory")) +
                             "; it names the compilers jitkern runs");
  fs::Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return false;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || !trusted_owner(st, false))
    throw std::runtime_error("jitkern: refusing toolchain record " + path + ": owned by uid " + std::to_string(st.st_uid) + " with mode " +
                             mode_text(st.st_mode) + "; it must belong to the current user and not be writable by others");
  return fs::read_fd(fd.get(), text);
}

void Store::write_toolchain_record(const std::string& name, const std::string& text) const {
  struct stat st;
  if (m_read_only || ::lstat(m_root.c_str(), &st) != 0) return;  // a lookup never creates the cache
  try {
    ensure_writable(false);
    fs::make_dirs(toolchain_dir(), 0700, "toolchain cache directory");
    std::string ignored;
    read_toolchain_record(name, &ignored);  // the directory's checks
    fs::write_file_atomic(toolchain_dir() + "/" + name, text, 0600);
  } catch (const std::exception&) {
    // a full disk, a read-only or refused cache: the next process probes the compiler again
  }
}

int64_t Store::toolchain_records_bytes() const {
  int64_t bytes = 0, newest = 0;
  measure(toolchain_dir(), &bytes, &newest);
  return bytes;
}

void Store::remove_toolchain_records() const { fs::remove_tree(toolchain_dir()); }

std::unique_ptr<Lock> Store::lock(const Entry& e, fs::FileLock::Kind kind, bool wait, const std::string& waiting_message) const {
  if (m_read_only) return std::make_unique<Lock>(nullptr);
  // A build must hold its lock; a load from a read-only cache goes without (no one can remove its entries either).
  const bool required = kind == fs::FileLock::kExclusive && wait;
  struct stat st;
  if (::lstat(m_lock_dir.c_str(), &st) != 0) {
    try {
      fs::make_dirs(m_lock_dir, 0700, "lock directory");  // gone after a reboot (/tmp), or never shipped
    } catch (const std::runtime_error& e) {
      if (required) throw std::runtime_error(e.what() + unwritable_advice());
      return std::make_unique<Lock>(nullptr);
    }
    ::lstat(m_lock_dir.c_str(), &st);
  }
  // Someone else's lock directory could hold our locks forever: go without locks, as for a read-only
  // cache (builds publish by rename; only `cache prune` beside a load could then race it), and say so once.
  if (!S_ISDIR(st.st_mode) || !trusted_owner(st, false)) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      log::emit(log::kWarning, "not locking: lock directory " + m_lock_dir + " is refused (" +
                                   (S_ISLNK(st.st_mode)  ? std::string("it is a symbolic link")
                                    : !S_ISDIR(st.st_mode) ? std::string("it is not a directory")
                                                           : distrust_text("it", m_lock_dir, st, false)) +
                                   "); point JITKERN_LOCK_DIR at a directory of your own");
    });
    return std::make_unique<Lock>(nullptr);
  }
  const std::string path = m_lock_dir + "/" + e.stem() + kLockSuffix;
  fs::FileLock::Outcome outcome;
  std::unique_ptr<fs::FileLock> held = fs::FileLock::acquire(path, kind, false, "", &outcome);
  if (outcome == fs::FileLock::kBusy && wait) {
    fs::CancelScope cancel;  // Ctrl-C ends the wait
    held = fs::FileLock::acquire(path, kind, true, waiting_message, &outcome);
  }
  if (outcome == fs::FileLock::kBusy) return nullptr;
  if (outcome == fs::FileLock::kUnavailable && required)
    throw std::runtime_error("jitkern: cannot create lock file " + path + ": " + std::strerror(errno) + unwritable_advice());
  return std::make_unique<Lock>(std::move(held));
}

// ------------------------------------------------------------------------------------------- Entry

Entry::Entry(const Store& store, std::string stem) : m_store(&store), m_stem(std::move(stem)), m_dir(store.root() + "/" + m_stem) {}

std::unique_ptr<Lock> Entry::lock_for_load() const {
  return m_store->lock(*this, fs::FileLock::kShared, true, "waiting for another process that holds " + m_stem + " ...");
}

std::unique_ptr<Lock> Entry::lock_for_build(const std::string& waiting_message) const {
  return m_store->lock(*this, fs::FileLock::kExclusive, true, waiting_message);
}

std::unique_ptr<Lock> Entry::try_lock(bool shared) const {
  return m_store->lock(*this, shared ? fs::FileLock::kShared : fs::FileLock::kExclusive, false, "");
}

std::optional<Found> Entry::open_library(const Manifest& m, bool rehash, std::string* why_not) const {
  const bool ro = m_store->read_only();
  const std::string path = m_dir + "/" + m.lib_name;
  fs::Fd fd(open_entry_file(path));
  struct stat st;
  if (!fd || ::fstat(fd.get(), &st) != 0) return *why_not = "its library " + m.lib_name + " is missing", std::nullopt;
  if (!S_ISREG(st.st_mode)) return *why_not = "its library " + path + " is not a regular file", std::nullopt;
  if (!trusted_owner(st, ro)) return *why_not = distrust_text("its library", path, st, ro), std::nullopt;
  if (const std::string elf = elf_problem_of(fd.get(), st.st_size); !elf.empty())
    return *why_not = "its library " + m.lib_name + " is " + elf, std::nullopt;
  if (rehash || fs::sig_of(st) != m.lib_sig) {
    std::string sha, record;
    if (!sha256_fd(fd.get(), &sha) || sha != m.lib_sha)
      return *why_not = "its library " + m.lib_name + " does not match its manifest's hash", std::nullopt;
    if (rehash && (!fs::read_file(path + kRecordSuffix, &record, true) || record != manifest::library_record(m.full_key, sha)))
      return *why_not = "its library record is missing or not this library's", std::nullopt;
  }
  Found found;
  found.path = path;
  found.fd = std::move(fd);
  return found;
}

std::optional<Found> Entry::lookup(const plan::Plan& p, const ToolchainCheck& toolchain_ok, std::string* why_not) const {
  const bool ro = m_store->read_only();
  struct stat st;
  if (::lstat(m_dir.c_str(), &st) != 0) return *why_not = "not cached", std::nullopt;
  if (!S_ISDIR(st.st_mode)) return *why_not = "its entry is not a directory (a symbolic link or a file: refused)", std::nullopt;
  if (!trusted_owner(st, ro)) {
    if (!ro) throw std::runtime_error("jitkern: refusing cache entry directory: " + distrust_text("it", m_dir, st, false));
    return *why_not = distrust_text("its directory", m_dir, st, true), std::nullopt;
  }
  // Every directory up to the entry is its owner's alone (checked above and by the store), so the
  // path cannot be redirected between these steps.
  fs::Fd mfd(open_entry_file(m_dir + "/" + kManifest));
  Manifest m;
  if (!mfd || ::fstat(mfd.get(), &st) != 0 || !S_ISREG(st.st_mode) || !read_manifest_fd(mfd.get(), &m))
    return *why_not = "no complete manifest", std::nullopt;
  if (!trusted_owner(st, ro)) return *why_not = distrust_text("its manifest", m_dir + "/" + kManifest, st, ro), std::nullopt;
  const struct stat manifest_stat = st;
  if (m.request_key != p.request_key) return *why_not = "its manifest names another request", std::nullopt;
  if (!toolchain_ok(m)) return *why_not = "it was built by other compilers than this machine's", std::nullopt;
  std::vector<Dep> here = localized(p, m.deps);
  bool refreshed = false;
  if (std::string changed; !manifest::deps_unchanged(here, &refreshed, &changed))
    return *why_not = "a file it was built from changed: " + changed, std::nullopt;
  auto found = open_library(m, false, why_not);
  if (!found) return std::nullopt;
  if (!ro) {
    if (refreshed) {  // a touched but unchanged header: record it, so that the next load need not rehash it
      for (std::size_t i = 0; i < here.size(); ++i) {
        m.deps[i].sig = here[i].sig;
        if (!m.deps[i].resolved.empty()) m.deps[i].resolved = plan::portable_path(p, here[i].resolved);
      }
      try {
        fs::write_file_atomic(m_dir + "/" + kManifest, manifest::serialize(m), kFileMode);
      } catch (const std::exception&) {
        // an unwritable cache: the rehash repeats next time, nothing else is lost
      }
    }
    mark_used(mfd.get(), manifest_stat);
  }
  return found;
}

std::string Entry::verify() const {
  const bool ro = m_store->read_only();
  struct stat st;
  if (::lstat(m_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "not a directory";
  if (!trusted_owner(st, ro)) return distrust_text("its directory", m_dir, st, ro);
  Manifest m;
  fs::Fd mfd = fs::open_for_reading(m_dir + "/" + kManifest, true);
  if (!mfd || ::fstat(mfd.get(), &st) != 0 || !read_manifest_fd(mfd.get(), &m)) return "no complete manifest";
  if (!trusted_owner(st, ro)) return distrust_text("its manifest", m_dir + "/" + kManifest, st, ro);
  // A lookup computes the request key from the request; the entry's name holds its first digits.
  if (Store::stem_of(m.module, m.request_key) != m_stem) return "its manifest names another request (copied from another entry?)";
  std::string why;
  return open_library(m, true, &why) ? "" : why;
}

void Entry::prepare() const {
  m_store->ensure_writable(true);
  struct stat st;
  if (::lstat(m_dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) ::unlink(m_dir.c_str());  // a stray file or link in our cache
  if (::lstat(m_dir.c_str(), &st) != 0) {
    if (::mkdir(m_dir.c_str(), kEntryDirMode) != 0 && errno != EEXIST)
      throw std::runtime_error("jitkern: cannot create cache entry directory " + m_dir + ": " + std::strerror(errno));
    ::chmod(m_dir.c_str(), kEntryDirMode);
    if (::lstat(m_dir.c_str(), &st) != 0) throw std::runtime_error("jitkern: cannot access cache entry directory " + m_dir);
  }
  if (!S_ISDIR(st.st_mode) || !trusted_owner(st, false))
    throw std::runtime_error("jitkern: refusing cache entry directory: " + distrust_text("it", m_dir, st, false));
}

void Entry::remove_stale_scratch(double max_age_s) const {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  for (const auto& name : names_in(m_dir)) {
    const bool scratch = name.rfind(kScratchPrefix, 0) == 0;
    const int pid = scratch ? std::atoi(name.c_str() + std::strlen(kScratchPrefix)) : fs::temp_name_pid(name);
    if (!scratch && pid == 0) continue;
    const std::string path = m_dir + "/" + name;
    // Holding the build lock, no build on this host is running here: a scratch directory whose process
    // is gone, or older than a compile may take, is a leftover. Another host's (a cache shared over
    // NFS with local locks) goes by age alone; so does a temporary file less than a minute old.
    fs::FileSig sig;
    const int64_t age_ns = fs::stat_sig(path, &sig) ? std::chrono::nanoseconds(now).count() - sig.mtime_ns : 0;
    const bool old = age_ns > static_cast<int64_t>(max_age_s * 1e9);
    const bool ours = scratch ? name.find('@') == std::string::npos || name.find("@" + host_name() + "-") != std::string::npos
                              : age_ns > 60'000'000'000;
    const bool dead = ours && pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
    if (old || dead) fs::remove_tree(path), ::unlink(path.c_str());
  }
}

std::string Entry::new_scratch() const { return fs::make_temp_dir(m_dir, kScratchPrefix + std::to_string(::getpid()) + "@" + host_name() + "-"); }

bool Entry::remembered_failure(const std::string& request_key, const std::string& config_key, Failure* out) const {
  std::string text;
  if (!fs::read_file(m_dir + "/" + kFailure, &text) || !manifest::parse(text, out)) return false;
  return out->request_key == request_key && out->config_key == config_key && manifest::deps_unchanged(out->deps);
}

void Entry::remember_failure(const Failure& failure, const std::string& full_log) const {
  keep_failure_log(full_log);
  fs::write_file_atomic(m_dir + "/" + kFailure, manifest::serialize(failure), kFileMode);
}

bool Entry::keep_failure_log(const std::string& full_log) const {
  try {
    fs::write_file_atomic(failure_log_path(), full_log, kFileMode);
    return true;
  } catch (const std::exception&) {
    return false;  // a full disk or a read-only cache
  }
}

bool Entry::out_of_space() const {
  struct statvfs v {};
  if (::statvfs(m_dir.c_str(), &v) != 0) return false;
  return uint64_t{v.f_bavail} * v.f_frsize < kMinFreeBytes || (v.f_files > 0 && v.f_favail == 0);
}

std::optional<Found> Entry::reuse(const plan::Plan& p, const Manifest& fresh, std::map<std::string, std::string>* before) const {
  std::string text;
  Manifest old;
  if (!fs::read_file(m_dir + "/" + kManifest, &text) || !manifest::parse(text, &old) || old.request_key != p.request_key) return std::nullopt;
  std::vector<Dep> now = old.deps;  // recorded under root tokens; hashed where they are here
  bool readable = true;
  for (auto& d : now) {
    const std::string path = plan::local(p, d.path);
    readable = readable && fs::stat_sig(path, &d.sig) && sha256_file(path, &d.sha);
    if (!d.resolved.empty()) d.resolved = plan::portable_path(p, fs::realpath_or(path));
    if (!d.sha.empty()) (*before)[path] = d.sha;
  }
  if (!readable) return std::nullopt;
  Manifest m = fresh;
  m.deps = now;
  m.full_key = manifest::full_key_of(p.request_key, m.toolchain, m.deps);
  m.lib_name = manifest::library_name(m.full_key);
  std::string why;
  struct stat st;
  fs::Fd probe(::open((m_dir + "/" + m.lib_name).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!probe || ::fstat(probe.get(), &st) != 0 || !sha256_fd(probe.get(), &m.lib_sha)) return std::nullopt;
  m.lib_sig = fs::sig_of(st);
  auto found = open_library(m, true, &why);  // the record binds it to this content key
  if (!found) return std::nullopt;
  fs::write_file_atomic(m_dir + "/" + kManifest, manifest::serialize(m), kFileMode);
  return found;
}

Found Entry::publish(const plan::Plan& p, const std::string& built, Manifest m) const {
  m.full_key = manifest::full_key_of(p.request_key, m.toolchain, m.deps);
  m.lib_name = manifest::library_name(m.full_key);
  fs::Fd fd(::open(built.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (!fd || ::fstat(fd.get(), &st) != 0) throw std::runtime_error("cannot read the built library " + built);
  if (const std::string elf = elf_problem_of(fd.get(), st.st_size); !elf.empty())
    throw std::runtime_error("its output " + built + " is " + elf);
  if (!sha256_fd(fd.get(), &m.lib_sha)) throw std::runtime_error("cannot read the built library " + built);
  ::fchmod(fd.get(), kFileMode);  // the linker's mode follows the umask (0775 under umask 002)
  ::fsync(fd.get());
  const std::string final_path = m_dir + "/" + m.lib_name;
  if (::rename(built.c_str(), final_path.c_str()) != 0)
    throw std::runtime_error("cannot publish " + final_path + ": " + std::strerror(errno));
  ::fstat(fd.get(), &st);
  m.lib_sig = fs::sig_of(st);
  fs::write_file_atomic(final_path + kRecordSuffix, manifest::library_record(m.full_key, m.lib_sha), kFileMode);
  fs::write_file_atomic(m_dir + "/" + kManifest, manifest::serialize(m), kFileMode);
  ::unlink((m_dir + "/" + kFailure).c_str());
  ::unlink(failure_log_path().c_str());
  Found found;
  found.path = final_path;
  found.fd = std::move(fd);
  return found;
}

void Entry::remove() const { fs::remove_tree(m_dir); }

std::vector<std::pair<std::string, int64_t>> Entry::superseded_libraries() const {
  std::string text;
  Manifest m;
  if (!fs::read_file(m_dir + "/" + kManifest, &text, true) || !manifest::parse(text, &m)) return {};
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& n : names_in(m_dir)) {
    const bool library = ends_with(n, ".so") || ends_with(n, std::string(".so") + kRecordSuffix);
    int64_t bytes = 0, newest = 0;
    if (library && n != m.lib_name && n != m.lib_name + kRecordSuffix) measure(m_dir + "/" + n, &bytes, &newest), out.emplace_back(n, bytes);
  }
  return out;
}

Summary Entry::summary() const { return details(); }

Details Entry::details() const {
  Details s;
  measure(m_dir, &s.bytes, &s.last_use_unix);
  s.key = m_stem.substr(m_stem.rfind('-') + 1);
  std::string text;
  Manifest m;
  struct stat st {};
  // Read without touching the access time, which records the entry's last load.
  if (::stat((m_dir + "/" + kManifest).c_str(), &st) == 0 && fs::read_file(m_dir + "/" + kManifest, &text, true) && manifest::parse(text, &m)) {
    s.status = "ok";
    s.module = m.module, s.spec = m.spec, s.arch = m.arch, s.built_unix = m.built_unix, s.build_ms = m.build_ms, s.key = m.request_key;
    s.last_use_unix = st.st_atim.tv_sec > 0 ? st.st_atim.tv_sec : m.built_unix;
    s.content_key = m.full_key, s.toolchain = m.toolchain, s.library = m_dir + "/" + m.lib_name;
    s.library_bytes = ::stat(s.library.c_str(), &st) == 0 ? st.st_size : 0;
    for (const auto& c : m.compilers) s.compilers.push_back(c.path);
    s.dependencies = m.deps.size();
    return s;
  }
  Failure f;
  const bool failed = fs::read_file(m_dir + "/" + kFailure, &text, true) && manifest::parse(text, &f);
  s.status = failed ? "failed" : "incomplete";
  if (failed) s.key = f.request_key, s.spec = f.spec, s.failure = f.message, s.dependencies = f.deps.size();
  return s;
}

void Entry::remove_file(const std::string& name) const { ::unlink((m_dir + "/" + name).c_str()); }

}  // namespace jitkern::store
