// Cache administration (`jitkern cache ls | du | verify | prune | clear`): what is in a cache
// directory, and removing entries safely beside running processes. An entry is only removed under
// its lock, taken exclusively without waiting: an entry being built (exclusive) or loaded (shared)
// is skipped and reported as busy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace jitkern::cache {

struct Entry {
  std::string stem;    // the directory name
  std::string status;  // "ok" (a published library), "failed" (a remembered failure), "incomplete"
  std::string module, arch;
  int64_t bytes = 0, built_unix = 0, build_ms = 0;
  int64_t last_use_unix = 0;  // the last load (the manifest's access time), else the newest file
};

// One line of a report: an entry (or file) and what was done with it.
struct Outcome {
  std::string stem, action, detail;  // action: "kept", "removed", "busy", "would remove"
  int64_t bytes = 0;
};

std::vector<Entry> list(const std::string& cache_dir);
// Rehashes every published library against its manifest and record; removes entries that do not match.
std::vector<Outcome> verify(const std::string& cache_dir, const std::string& lock_dir);
// Removes superseded libraries inside entries, then entries unused for longer than `older_than_s`
// (< 0: no age limit), then the least recently used until the entries total at most `max_bytes`
// (< 0: no size limit). `dry_run`: report only.
std::vector<Outcome> prune(const std::string& cache_dir, const std::string& lock_dir, int64_t max_bytes, double older_than_s,
                           bool dry_run);
// Removes every entry that is not busy, and the toolchain records.
std::vector<Outcome> clear(const std::string& cache_dir, const std::string& lock_dir);

}  // namespace jitkern::cache
