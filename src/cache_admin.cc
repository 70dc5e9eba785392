#include "cache_admin.h"

#include <algorithm>
#include <chrono>

#include "fs_util.h"

namespace jitkern::cache {
namespace {

int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const char* removed(bool dry_run) { return dry_run ? "would remove" : "removed"; }

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
    const auto lock = store.entry(e.stem).try_lock(false);
    if (!lock) {
      out.push_back({e.stem, "busy", "being built or loaded; kept", e.bytes});
      continue;
    }
    if (!dry_run) store.entry(e.stem).remove();
    out.push_back({e.stem, removed(dry_run), why, e.bytes});
    total -= e.bytes;
  }
  return out;
}

std::vector<Outcome> clear(const store::Store& store, bool dry_run) {
  std::vector<Outcome> out;
  for (const auto& e : list(store)) {
    const auto lock = store.entry(e.stem).try_lock(false);
    if (!lock) {
      out.push_back({e.stem, "busy", "being built or loaded; kept", e.bytes});
      continue;
    }
    if (!dry_run) store.entry(e.stem).remove();
    out.push_back({e.stem, removed(dry_run), "cleared", e.bytes});
  }
  int64_t bytes = store.toolchain_records_bytes();
  if (bytes > 0) {
    if (!dry_run) store.remove_toolchain_records();
    out.push_back({"toolchains", removed(dry_run), "compiler identity records", bytes});
  }
  return out;
}

}  // namespace jitkern::cache
