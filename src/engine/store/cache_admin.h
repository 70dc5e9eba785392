// Cache administration (`jitkern cache ls | du | show | stats | verify | prune | clear | rm`) through the store: an
// entry is checked under its lock taken shared (loaders go on) and removed under its lock taken
// exclusively without waiting: an entry being built or loaded is skipped and reported as busy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/store.h"

namespace jitkern::cache {

struct Entry : store::Summary {
  std::string stem;
};

// One line of a report: an entry (or file) and what was done with it.
struct Outcome {
  std::string stem, action, detail;  // action: "kept", "removed", "busy", "would remove"
  int64_t bytes = 0;
};

std::vector<Entry> list(const store::Store& store);
// verify, prune, clear and remove throw std::invalid_argument for a store that belongs to another user
// (root included): they would judge its entries by the wrong owner and leave lock files there.
// Checks every entry as a load would (rehashing each library); removes the entries a load would refuse.
std::vector<Outcome> verify(const store::Store& store);
// Removes superseded libraries inside entries, then entries unused for longer than `older_than_s`
// (< 0: no age limit), then the least recently used until the entries total at most `max_bytes`
// (< 0: no size limit). `dry_run`: report only.
std::vector<Outcome> prune(const store::Store& store, int64_t max_bytes, double older_than_s, bool dry_run);
// Removes every entry that is not busy, and the toolchain records. `dry_run`: report only.
std::vector<Outcome> clear(const store::Store& store, bool dry_run);

// The entries each of `what` names, each once: a module's name (every arch and variant of it), an
// entry's name, or at least kMinKeyPrefix hex digits that start its request key. std::invalid_argument
// naming the first that names none.
inline constexpr std::size_t kMinKeyPrefix = 4;
std::vector<Entry> find(const store::Store& store, const std::vector<std::string>& what);
// Removes the entries `what` names (find) as `clear` does; nothing when one names none. `dry_run`: report only.
std::vector<Outcome> remove(const store::Store& store, const std::vector<std::string>& what, bool dry_run);

// `jitkern cache stats`: one store's counts, from its manifests, failure records and use marks.
struct Stats {
  int64_t entries = 0, bytes = 0;
  int64_t compiles = 0, build_ms = 0;  // published libraries and the time their builds took
  int64_t failures = 0, incomplete = 0;
  // Entries loaded in the last day / week (the manifest's access time, set by a load at most hourly);
  // -1 for a prebuilt layer, which a load never writes.
  int64_t used_day = -1, used_week = -1;
};
Stats stats(const store::Store& store);

}  // namespace jitkern::cache
