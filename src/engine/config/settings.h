// Every environment variable the engine reads, in one table (rendered into the README and printed by
// `jitkern config`), and the only functions that read and validate them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace jitkern::settings {

// How a value is read: a path is made absolute (against the working directory) with `~` expanded.
enum class Kind { kText, kPath, kPathList, kFlag, kSeconds, kChoice, kArch };

struct Setting {
  const char* name;
  const char* fallback;  // what applies when unset, in words
  const char* meaning;
  Kind kind;
  const char* choices;  // kChoice: the accepted values, "|"-separated, the first being the default
};

extern const Setting kAll[];
extern const std::size_t kCount;

// The variable's raw value ("" when unset or empty). `name` must be in kAll (checked: a typo throws).
std::string get(const char* name);
// A kPath setting as an absolute path ("" when unset); std::invalid_argument naming the variable
// when it cannot be made absolute.
std::string path(const char* name);
// `value` made absolute as path() makes a setting ("~" expanded, a relative path taken from the working
// directory); `what` names it in errors.
std::string absolute_path(const std::string& value, const char* what);
// A kPathList setting: its ':'-separated entries, each as path() makes it (empty entries dropped).
std::vector<std::string> path_list(const char* name);
// A kFlag setting: 1/true/yes/on or 0/false/no/off in any case; unset or empty is false. Anything
// else is std::invalid_argument naming the variable.
bool flag(const char* name);
// flag(), false for an invalid value (for code that must not throw, e.g. logging).
bool flag_or_false(const char* name) noexcept;
// A kSeconds setting: a finite number of seconds in (0, 1e6]; `fallback` when unset.
double seconds(const char* name, double fallback);
// A kChoice setting: one of its choices (the first when unset).
std::string choice(const char* name);

// One line per set variable whose value is invalid ("NAME=value: why"); empty when all are valid.
std::vector<std::string> problems();
// Throws std::invalid_argument listing problems() when there are any.
void check();
// JITKERN_* variables that are no setting, each with the closest setting's name when one is near
// ("JITKERN_CAHCE_DIR (did you mean JITKERN_CACHE_DIR?)").
std::vector<std::string> unknown();

// Every variable's current value, one "NAME=value" line each: part of the in-process memo key.
std::string fingerprint();
// The table as Markdown (the README's copy is tested against it).
std::string markdown();

}  // namespace jitkern::settings
