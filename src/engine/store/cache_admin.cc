#include "store/cache_admin.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "base/fs_util.h"

namespace jitkern::cache {
namespace {

int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const char* removed(bool dry_run) { return dry_run ? "would remove" : "removed"; }

// Removes one entry unless someone holds its lock (never waits: a build or load in progress wins).
Outcome remove_unless_busy(const store::Store& store, const Entry& e, const std::string& why, bool dry_run) {
  const auto lock = store.entry(e.stem).try_lock(false);
  if (!lock) return {e.stem, "busy", "being built or loaded; kept", e.bytes};
  if (!dry_run) store.entry(e.stem).remove();
  return {e.stem, removed(dry_run), why, e.bytes};
}

// Judging another user's entries by our uid would remove them, and our lock files would stay there.
void refuse_foreign(const store::Store& store, const std::string& op) {
  struct stat st;
  if (::lstat(store.root().c_str(), &st) == 0 && st.st_uid != ::geteuid())
    throw std::invalid_argument("jitkern: cache directory " + store.root() + " belongs to uid " + std::to_string(st.st_uid) +
                                ", not to the current user (uid " + std::to_string(::geteuid()) + "); run `jitkern cache " + op +
                                "` as its owner (e.g. sudo -u '#" + std::to_string(st.st_uid) + "' ...)");
}

}  // namespace

std::vector<Entry> list(const store::Store& store) {
  std::vector<Entry> out;
  for (const auto& stem : store.stems()) {
    Entry e;
    static_cast<store::Summary&>(e) = store.entry(stem).summary();
    e.stem = stem;
    out.push_back(e);
  }
  return out;
}

std::vector<Outcome> verify(const store::Store& store) {
  refuse_foreign(store, "verify");
  std::vector<Outcome> out;
  for (const auto& e : list(store)) {
    const store::Entry entry = store.entry(e.stem);
    std::string problem;
    {
      const auto shared = entry.try_lock(true);  // beside loaders; only a build holds it exclusively
      if (!shared) {
        out.push_back({e.stem, "busy", "being built; not checked", e.bytes});
        continue;
      }
      problem = entry.verify();
    }
    if (problem.empty()) {
      out.push_back({e.stem, "kept", "library hash verified", e.bytes});
    } else if (e.status == "failed") {
      out.push_back({e.stem, "kept", "a remembered failed build", e.bytes});
    } else if (const auto exclusive = entry.try_lock(false); !exclusive) {
      out.push_back({e.stem, "busy", "in use; not removed although " + problem, e.bytes});
    } else if (const std::string now = entry.verify(); now.empty()) {
      out.push_back({e.stem, "kept", "library hash verified (rebuilt meanwhile)", e.bytes});
    } else {
      entry.remove();
      out.push_back({e.stem, "removed", now, e.bytes});
    }
  }
  return out;
}

std::vector<Outcome> prune(const store::Store& store, int64_t max_bytes, double older_than_s, bool dry_run) {
  refuse_foreign(store, "prune");
  std::vector<Outcome> out;
  std::vector<Entry> entries = list(store);
  // 1. Libraries of earlier contents, which no manifest names any more.
  for (auto& e : entries) {
    const store::Entry entry = store.entry(e.stem);
    const auto lock = entry.try_lock(false);  // listed under the lock: a reverted edit may reuse one meanwhile
    if (!lock) continue;
    for (const auto& [name, bytes] : entry.superseded_libraries()) {
      if (!dry_run) entry.remove_file(name);
      e.bytes -= bytes;
      out.push_back({e.stem + "/" + name, removed(dry_run), "superseded by a later build", bytes});
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
    const Outcome o = remove_unless_busy(store, e, why, dry_run);
    if (o.action != "busy") total -= e.bytes;
    out.push_back(o);
  }
  return out;
}

std::vector<Outcome> clear(const store::Store& store, bool dry_run) {
  refuse_foreign(store, "clear");
  std::vector<Outcome> out;
  for (const auto& e : list(store)) out.push_back(remove_unless_busy(store, e, "cleared", dry_run));
  int64_t bytes = store.toolchain_records_bytes();
  if (bytes > 0) {
    if (!dry_run) store.remove_toolchain_records();
    out.push_back({"toolchains", removed(dry_run), "compiler identity records", bytes});
  }
  return out;
}

// The entry that `path` lies in (an entry's directory or a file in it, as the library path that a build
// returns), or "" where it names none of the store's.
std::string stem_of_path(const store::Store& store, const std::string& path) {
  if (path.find('/') == std::string::npos) return "";
  for (const std::string& root : {store.root(), fs::realpath_or(store.root())})
    for (const std::string& p : {path, fs::realpath_or(path)})
      if (p.size() > root.size() + 1 && p.compare(0, root.size(), root) == 0 && p[root.size()] == '/') {
        const std::string rest = p.substr(root.size() + 1);
        return rest.substr(0, rest.find('/'));
      }
  return "";
}

std::vector<Entry> find(const store::Store& store, const std::vector<std::string>& what) {
  const std::vector<Entry> all = list(store);
  std::vector<Entry> out;
  for (const auto& w : what) {
    const bool key_prefix = w.size() >= kMinKeyPrefix && w.find_first_not_of("0123456789abcdef") == std::string::npos;
    const std::string path_stem = stem_of_path(store, w);
    bool any = false;
    for (const auto& e : all) {
      // A module's entries are named after it (the store's rule), also those without a manifest.
      const bool named = e.module == w || e.stem == w || store::Store::stem_of(w, e.key) == e.stem || (!path_stem.empty() && path_stem == e.stem);
      if (!named && !(key_prefix && e.key.rfind(w, 0) == 0)) continue;
      any = true;
      if (std::none_of(out.begin(), out.end(), [&](const Entry& o) { return o.stem == e.stem; })) out.push_back(e);
    }
    if (!any)
      throw std::invalid_argument("jitkern: no entry of " + store.root() + " is named by '" + w + "' (give a module name, an entry's name, a path in it or at least " +
                                  std::to_string(kMinKeyPrefix) + " hex digits of its key, as `jitkern cache ls` shows them)");
  }
  return out;
}

std::vector<Outcome> remove(const store::Store& store, const std::vector<std::string>& what, bool dry_run) {
  refuse_foreign(store, "rm");
  std::vector<Outcome> out;
  for (const auto& e : find(store, what)) out.push_back(remove_unless_busy(store, e, "removed on request", dry_run));
  return out;
}

Stats stats(const store::Store& store) {
  Stats s;
  const int64_t now = now_unix();
  if (!store.read_only()) s.used_day = s.used_week = 0;
  for (const auto& e : list(store)) {
    ++s.entries;
    s.bytes += e.bytes;
    s.failures += e.status == "failed";
    s.incomplete += e.status == "incomplete";
    if (e.status == "ok") ++s.compiles, s.build_ms += e.build_ms;
    if (store.read_only() || e.status != "ok") continue;
    s.used_day += now - e.last_use_unix <= 86400;
    s.used_week += now - e.last_use_unix <= 7 * 86400;
  }
  return s;
}

}  // namespace jitkern::cache
