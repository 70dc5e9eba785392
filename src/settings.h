// Every environment variable the engine reads, in one table (rendered into the README and printed by
// `python -m jitkern config`), and the only functions that read them.
#pragma once

#include <cstddef>
#include <string>

namespace jitkern::settings {

struct Setting {
  const char* name;
  const char* fallback;  // what applies when unset, in words
  const char* meaning;
};

extern const Setting kAll[];
extern const std::size_t kCount;

// The variable's value ("" when unset or empty). `name` must be in kAll (checked: a typo throws).
std::string get(const char* name);
// True for a set value other than 0/false/no.
bool flag(const char* name);
// Every variable's current value, one "NAME=value" line each: part of the in-process memo key.
std::string fingerprint();
// The table as Markdown (the README's copy is tested against it).
std::string markdown();

}  // namespace jitkern::settings
