// Cache administration (`jitkern cache ls | du | verify | prune | clear`) through the store: an
// entry is checked under its lock taken shared (loaders go on) and removed under its lock taken
// exclusively without waiting: an entry being built or loaded is skipped and reported as busy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store.h"

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
// Checks every entry as a load would (rehashing each library); removes the entries a load would refuse.
std::vector<Outcome> verify(const store::Store& store);
// Removes superseded libraries inside entries, then entries unused for longer than `older_than_s`
// (< 0: no age limit), then the least recently used until the entries total at most `max_bytes`
// (< 0: no size limit). `dry_run`: report only.
std::vector<Outcome> prune(const store::Store& store, int64_t max_bytes, double older_than_s, bool dry_run);
// Removes every entry that is not busy, and the toolchain records. `dry_run`: report only.
std::vector<Outcome> clear(const store::Store& store, bool dry_run);

}  // namespace jitkern::cache
