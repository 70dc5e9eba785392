// The cache store: the only code that knows how a cache lies on disk, which of its files may be
// trusted, which lock guards what, and how a library is published. The build path, the prebuilt
// layers and `jitkern cache ...` all go through it. docs/cache-store.md states the protocol.
//
//   <root>/                       a store: the writable cache (ours, writable by no one else), or a
//                                 read-only prebuilt layer (ours or root's, and so is every parent)
//     <stem>/                     an entry: "<sanitized module name>-<20 hex digits of the request key>"
//       manifest                  what the library was built from (manifest.h); renamed into place last
//       <24 hex>.so               the library, named by its content key
//       <24 hex>.so.sha256        its hash bound to its content key
//       failed, failed.log        a remembered compile failure, and its full log
//       build-<pid>@<host>-XXXXXX/  a build's scratch directory
//       *.tmp.<pid>.<tid>.*       a file being written (published by rename)
//     toolchains/<24 hex>.txt     compiler identity records (toolchain.cc writes their contents)
//   <lock dir>/<stem>.lock        the entry's lock (writable store only)
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/fs_util.h"
#include "store/manifest.h"
#include "plan/plan.h"

namespace jitkern::store {

// A held entry lock, or none where the lock file can be neither opened nor created (a read-only
// cache: no one can remove its entries either). Released on destruction.
class Lock {
 public:
  explicit Lock(std::unique_ptr<fs::FileLock> lock) : m_lock(std::move(lock)) {}

 private:
  std::unique_ptr<fs::FileLock> m_lock;
};

// A library that passed every check, open on the very file that was checked: the loader maps it
// through `fd` (a rename between check and load cannot swap it), holding `lock` until then.
struct Found {
  std::string path;
  fs::Fd fd;
  std::unique_ptr<Lock> lock;
};

// Whether a manifest's compilers may stand in for this machine's (toolchain::accepts).
using ToolchainCheck = std::function<bool(const manifest::Manifest&)>;

class Store;

// What `jitkern cache ls` shows of an entry.
struct Summary {
  std::string status;  // "ok" (a published library), "failed" (a remembered failure), "incomplete"
  std::string module, arch;
  std::string spec;  // the JitSpec's name, where the manifest records it
  std::string key;  // the request key (the manifest's or failure's; else the digits the entry's name holds)
  int64_t bytes = 0, built_unix = 0, build_ms = 0;
  int64_t last_use_unix = 0;  // the last load (the manifest's access time), else the newest file
};

// What `jitkern cache show` adds: the manifest's facts (empty where the entry has no manifest).
struct Details : Summary {
  std::string content_key, toolchain, library;  // library: its path
  int64_t library_bytes = 0;
  std::vector<std::string> compilers;  // the paths they were found at
  std::size_t dependencies = 0;
  std::string failure;  // a remembered failure's message
};

class Entry {
 public:
  const std::string& stem() const { return m_stem; }
  const std::string& dir() const { return m_dir; }
  // Where a remembered failure's full log is kept (for the error message).
  std::string failure_log_path() const { return m_dir + "/failed.log"; }

  // ---- lookups (any store) ----
  // The library for `plan`, if the entry holds a complete manifest naming this request, built by
  // compilers `toolchain_ok` accepts, from dependencies that are unchanged, with a library that is
  // trusted, intact and for this machine. Otherwise empty, with *why_not saying which check failed.
  // A writable entry records refreshed dependency signatures and the entry's last use.
  std::optional<Found> lookup(const plan::Plan& plan, const ToolchainCheck& toolchain_ok, std::string* why_not) const;
  // The request-independent part of what a lookup checks, rehashing the library whatever its
  // signature (`jitkern cache verify`): "" when a lookup could serve it, else why not.
  std::string verify() const;

  // ---- locks (writable store) ----
  // Loads: shared, waiting for an exclusive holder (a build or a removal) to finish.
  std::unique_ptr<Lock> lock_for_load() const;
  // Builds: exclusive, waiting (logs `waiting_message` once when it has to).
  std::unique_ptr<Lock> lock_for_build(const std::string& waiting_message) const;
  // Administration, never waiting: nullptr while someone holds it incompatibly.
  std::unique_ptr<Lock> try_lock(bool shared) const;

  // ---- building (writable store, holding lock_for_build) ----
  // Creates the entry directory if needed.
  void prepare() const;
  // Removes scratch directories and temporary files of builds that died (their process is gone, or
  // they are older than `max_age_s`).
  void remove_stale_scratch(double max_age_s) const;
  // A new scratch directory for one build attempt.
  std::string new_scratch() const;
  // The remembered failure of `config_key`'s build of this request, if its inputs are unchanged.
  bool remembered_failure(const std::string& request_key, const std::string& config_key, manifest::Failure* out) const;
  void remember_failure(const manifest::Failure& failure, const std::string& full_log) const;
  // Keeps the full log of a failure that is not remembered; false where it cannot be written.
  bool keep_failure_log(const std::string& full_log) const;
  // Whether the entry's file system is (nearly) out of space or quota: then a failure is transient.
  bool out_of_space() const;
  // Content addressing across edits: if the dependencies of the entry's manifest, as they are now,
  // name a library this entry already holds (an edit reverted), a manifest naming it. `before` gets
  // those dependencies' paths and hashes (to tell whether one changes during the compile).
  std::optional<Found> reuse(const plan::Plan& plan, const manifest::Manifest& fresh, std::map<std::string, std::string>* before) const;
  // Moves the built library `built` into the entry under its content key with its record, then the
  // manifest; the library is this machine's shared object (else a runtime_error saying why).
  Found publish(const plan::Plan& plan, const std::string& built, manifest::Manifest m) const;

  // ---- administration ----
  Summary summary() const;
  Details details() const;
  // Removes the whole entry (hold try_lock(false)).
  void remove() const;
  // Libraries (and their records) that the manifest no longer names: (file name, bytes).
  std::vector<std::pair<std::string, int64_t>> superseded_libraries() const;
  void remove_file(const std::string& name) const;

 private:
  friend class Store;
  Entry(const Store& store, std::string stem);
  std::optional<Found> open_library(const manifest::Manifest& m, bool rehash, std::string* why_not) const;
  const Store* m_store;
  std::string m_stem, m_dir;
};

class Store {
 public:
  // The writable cache of `config` (created on first build, never on a lookup).
  static Store writable(const plan::Config& config);
  // A read-only prebuilt layer (never written, never locked); `label` names it in messages ("" for a
  // JITKERN_PREBUILT_DIRS directory, which its path names).
  static Store prebuilt(const std::string& dir, const std::string& label = "");
  // The layers of `dirs` (JITKERN_PREBUILT_DIRS), in order, then the package layers.
  static std::vector<Store> prebuilt_layers(const std::vector<std::string>& dirs);
  // The prebuilt layers installed as packages (prebuilt wheels, found by the Python layer): (label, dir).
  static void set_package_layers(std::vector<std::pair<std::string, std::string>> layers);
  // What set_package_layers set, one "label\tdir" line each (part of the in-process memo key).
  static std::string package_layers_text();

  const std::string& root() const { return m_root; }
  const std::string& label() const { return m_label; }
  // The label and directory, or the directory (for messages).
  std::string describe() const { return m_label.empty() ? m_root : m_label + " (" + m_root + ")"; }
  // Whether the store's directory exists (a nonexistent one named by an operator is a mistake).
  bool exists() const;
  const std::string& lock_dir() const { return m_lock_dir; }
  bool read_only() const { return m_read_only; }

  Entry entry(const plan::Plan& plan) const { return Entry(*this, stem_of(plan.name, plan.request_key)); }
  Entry entry(const std::string& stem) const { return Entry(*this, stem); }
  // The entries in the store (their stems), sorted.
  std::vector<std::string> stems() const;
  static std::string stem_of(const std::string& name, const std::string& request_key);
  static bool is_stem(const std::string& name);

  // Checks that the store may be used: for the writable cache, creates it (`create`) and refuses one
  // that is a symbolic link, not ours or writable by others; for a prebuilt layer, "" when it and
  // every parent directory are trusted, else why not (the layer is then skipped).
  void ensure_writable(bool create) const;
  std::string layer_distrust() const;

  // Compiler identity records (their text is toolchain.cc's): the record `name`, if trusted.
  bool read_toolchain_record(const std::string& name, std::string* text) const;
  void write_toolchain_record(const std::string& name, const std::string& text) const;
  // For `jitkern cache clear`.
  int64_t toolchain_records_bytes() const;
  void remove_toolchain_records() const;

 private:
  friend class Entry;
  Store(std::string root, std::string lock_dir, bool read_only, std::string label = "");
  std::string toolchain_dir() const { return m_root + "/toolchains"; }
  std::unique_ptr<Lock> lock(const Entry& e, fs::FileLock::Kind kind, bool wait, const std::string& waiting_message) const;
  std::string m_root, m_lock_dir, m_label;
  bool m_read_only;
};

}  // namespace jitkern::store
