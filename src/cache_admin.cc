#include "cache_admin.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "fs_util.h"
#include "manifest.h"
#include "plan.h"
#include "sha256.h"

namespace jitkern::cache {
namespace {

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.push_back(e->d_name);
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

// Reads without touching the access time (which records the entry's last load).
bool read_manifest(const std::string& entry_dir, manifest::Manifest* m) {
  std::string text;
  return fs::read_file(entry_dir + "/manifest", &text, true) && manifest::parse(text, m);
}

Entry describe(const std::string& cache_dir, const std::string& stem) {
  Entry e;
  e.stem = stem;
  const std::string dir = cache_dir + "/" + stem;
  measure(dir, &e.bytes, &e.last_use_unix);
  struct stat st {};
  const bool has_manifest = ::stat((dir + "/manifest").c_str(), &st) == 0;
  manifest::Manifest m;
  if (has_manifest && read_manifest(dir, &m)) {
    e.status = "ok";
    e.module = m.module, e.arch = m.arch, e.built_unix = m.built_unix, e.build_ms = m.build_ms;
    e.last_use_unix = st.st_atim.tv_sec > 0 ? st.st_atim.tv_sec : m.built_unix;  // set by every load (fs::mark_used)
    return e;
  }
  std::string text;
  manifest::Failure f;
  e.status = fs::read_file(dir + "/failed", &text) && manifest::parse(text, &f) ? "failed" : "incomplete";
  return e;
}

std::vector<std::string> entry_stems(const std::string& cache_dir) {
  std::vector<std::string> out;
  for (const auto& n : names_in(cache_dir)) {
    struct stat st {};
    if (plan::is_entry_stem(n) && ::lstat((cache_dir + "/" + n).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) out.push_back(n);
  }
  return out;
}

std::unique_ptr<fs::FileLock> lock_entry(const std::string& lock_dir, const std::string& stem) {
  return fs::FileLock::try_lock(plan::lock_path(lock_dir, stem), false);
}

Outcome remove_entry(const std::string& cache_dir, const Entry& e, const std::string& why) {
  fs::remove_tree(cache_dir + "/" + e.stem);
  return {e.stem, "removed", why, e.bytes};
}

int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::vector<Entry> list(const std::string& cache_dir) {
  std::vector<Entry> out;
  for (const auto& stem : entry_stems(cache_dir)) out.push_back(describe(cache_dir, stem));
  return out;
}

std::vector<Outcome> verify(const std::string& cache_dir, const std::string& lock_dir) {
  fs::ensure_private_dir(lock_dir, "lock directory");
  std::vector<Outcome> out;
  for (const auto& stem : entry_stems(cache_dir)) {
    const auto lock = lock_entry(lock_dir, stem);
    const Entry e = describe(cache_dir, stem);
    if (!lock) {
      out.push_back({stem, "busy", "being built or loaded; not checked", e.bytes});
      continue;
    }
    const std::string dir = cache_dir + "/" + stem;
    manifest::Manifest m;
    if (!read_manifest(dir, &m)) {
      if (e.status == "failed") out.push_back({stem, "kept", "a remembered failed build", e.bytes});
      else out.push_back(remove_entry(cache_dir, e, "no complete manifest"));
      continue;
    }
    std::string sha, record;
    const std::string lib = dir + "/" + m.lib_name;
    if (!sha256_file(lib, &sha)) out.push_back(remove_entry(cache_dir, e, "library " + m.lib_name + " is missing"));
    else if (sha != m.lib_sha) out.push_back(remove_entry(cache_dir, e, "library " + m.lib_name + " does not match its manifest's hash"));
    else if (!fs::read_file(lib + ".sha256", &record) || record != manifest::library_record(m.full_key, sha))
      out.push_back(remove_entry(cache_dir, e, "library record missing or not this library's"));
    else out.push_back({stem, "kept", "library hash verified", e.bytes});
  }
  return out;
}

std::vector<Outcome> prune(const std::string& cache_dir, const std::string& lock_dir, int64_t max_bytes, double older_than_s,
                           bool dry_run) {
  fs::ensure_private_dir(lock_dir, "lock directory");
  std::vector<Outcome> out;
  std::vector<Entry> entries = list(cache_dir);
  // 1. Libraries of earlier contents, which no manifest names any more.
  for (auto& e : entries) {
    manifest::Manifest m;
    const std::string dir = cache_dir + "/" + e.stem;
    if (e.status != "ok" || !read_manifest(dir, &m)) continue;
    for (const auto& n : names_in(dir)) {
      const bool library = n.size() > 3 && (n.compare(n.size() - 3, 3, ".so") == 0 || n.find(".so.sha256") != std::string::npos);
      if (!library || n == m.lib_name || n == m.lib_name + ".sha256") continue;
      const auto lock = lock_entry(lock_dir, e.stem);
      if (!lock) break;
      int64_t bytes = 0, newest = 0;
      measure(dir + "/" + n, &bytes, &newest);
      if (!dry_run) ::unlink((dir + "/" + n).c_str());
      e.bytes -= bytes;
      out.push_back({e.stem + "/" + n, dry_run ? "would remove" : "removed", "superseded by a later build", bytes});
    }
  }
  // 2. By age, then least recently used first until the size fits.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.last_use_unix < b.last_use_unix; });
  int64_t total = 0;
  for (const auto& e : entries) total += e.bytes;
  const int64_t now = now_unix();
  for (const auto& e : entries) {
    const bool old = older_than_s >= 0 && now - e.last_use_unix > older_than_s;
    const bool over = max_bytes >= 0 && total > max_bytes;
    if (!old && !over) continue;
    const std::string why = old ? "unused for more than the age limit" : "least recently used, over the size limit";
    if (dry_run) {
      out.push_back({e.stem, "would remove", why, e.bytes});
      total -= e.bytes;
      continue;
    }
    const auto lock = lock_entry(lock_dir, e.stem);
    if (!lock) {
      out.push_back({e.stem, "busy", "being built or loaded; kept", e.bytes});
      continue;
    }
    out.push_back(remove_entry(cache_dir, e, why));
    total -= e.bytes;
  }
  return out;
}

std::vector<Outcome> clear(const std::string& cache_dir, const std::string& lock_dir) {
  fs::ensure_private_dir(lock_dir, "lock directory");
  std::vector<Outcome> out;
  for (const auto& e : list(cache_dir)) {
    const auto lock = lock_entry(lock_dir, e.stem);
    if (!lock) out.push_back({e.stem, "busy", "being built or loaded; kept", e.bytes});
    else out.push_back(remove_entry(cache_dir, e, "cleared"));
  }
  int64_t bytes = 0, newest = 0;
  measure(cache_dir + "/toolchains", &bytes, &newest);
  if (bytes > 0) fs::remove_tree(cache_dir + "/toolchains"), out.push_back({"toolchains", "removed", "compiler identity records", bytes});
  return out;
}

}  // namespace jitkern::cache
