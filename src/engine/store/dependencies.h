// A build's dependencies: the files its compilers read (their dependency output, the linker's trace, the
// files options name), each recorded with its signature and hash so that an edit invalidates the
// library, and the directories a missing header was looked for in.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "store/manifest.h"
#include "plan/plan.h"

namespace jitkern::deps {

// A dependency file and the directory its compiler ran in (what its relative names are relative to).
struct Depfile {
  std::string path, base;
  std::vector<std::string> paths = {};  // where path is empty: the files themselves (relative ones to base)
};

bool under_any(const std::string& path, const std::vector<std::string>& prefixes);
// A file that cannot be read is kept as kMissing: the record it goes into is then never found valid.
std::vector<manifest::Dep> hash_files(const std::vector<std::pair<std::string, std::string>>& files);
// Every file the compiler read according to `depfiles`, as the compiler opened it, with where that led
// when elsewhere (a symbolic link, ".."), outside the generated sources (in `scratch`) and the
// toolchain's own files, and the module's own files whatever the output says (nvcc's -MD misspells a
// path holding '"' or '\\'): (path, resolved or "").
std::vector<std::pair<std::string, std::string>> dependency_paths(const plan::Plan& p, const std::vector<Depfile>& depfiles,
                                                                  const std::string& scratch);
// The directories a missing header would have been looked for in (a failure is retried when a file
// appears in one).
std::vector<manifest::Dep> search_directories(const plan::Plan& p);

}  // namespace jitkern::deps
