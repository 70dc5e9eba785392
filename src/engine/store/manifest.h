// What a cache entry records: the manifest of a published library (the request's key, the content
// key, the library and every file the compiler read, with hashes) and the record of a failed build.
// Formats and parsers only: no file system access beyond hashing dependencies.
#pragma once

#include <string>
#include <vector>

#include "base/fs_util.h"

namespace jitkern::manifest {

struct Dep {
  std::string path;      // as the compiler opened it: absolute, or "@token/..." under a relocatable root (plan::portable)
  std::string resolved;  // where `path` led through symbolic links or "..", when elsewhere; empty otherwise
  std::string sha;       // the content's SHA-256, kDirectory for a directory (compared by its signature), or
                         // kMissing for a file the compiler listed that was not there (never unchanged)
  fs::FileSig sig;
};
inline constexpr const char* kDirectory = "directory";
inline constexpr const char* kMissing = "missing";

struct Manifest {
  std::string request_key;  // the request (sources' text, flags, target): names the entry
  std::string toolchain;    // the compilers' versions (plan::toolchain_id)
  std::string full_key;     // request_key, toolchain and every dependency's content: names the library
  std::string lib_name, lib_sha;
  fs::FileSig lib_sig;
  std::vector<Dep> deps;
  // The compilers that built it, by the path they were found at and the signature of the file it
  // leads to: a machine whose compilers are these (or that has none) serves the library without
  // running them (toolchain::accepts).
  std::vector<Dep> compilers;  // path and sig only
  // What the compilers were searched with (toolchain::search_key); empty in older manifests.
  std::string compiler_search;
  // For people and `jitkern cache ls` (no part of any check): the module's name, its CUDA arch ("-"
  // for host code), when it was built (Unix seconds) and how long the build took (ms).
  std::string module, arch = "-";
  int64_t built_unix = 0, build_ms = 0;
  // The JitSpec's name, which `module` starts with (a "spec" line; older manifests have none): what
  // `jitkern cache rm <spec>` selects by, as "fill" is no prefix test that tells fill_1 from fill_rows_1.
  std::string spec;
};

// The content key of a request built by `toolchain` from `deps` (paths and hashes, in order).
std::string full_key_of(const std::string& request_key, const std::string& toolchain, const std::vector<Dep>& deps);
// The library's file name in its entry: derived from the content key, so never a path.
std::string library_name(const std::string& full_key);
// What the entry's "<library>.sha256" holds: the library's hash bound to its content key, so that a
// library and record copied from another entry do not match.
std::string library_record(const std::string& full_key, const std::string& lib_sha);

std::string serialize(const Manifest& m);
// False for anything but a complete, self-consistent manifest: wrong magic, a missing or malformed
// line, no end marker (a truncated file), a library name that is not library_name(full_key), or a
// content key that does not follow from the request key and the dependencies.
bool parse(const std::string& text, Manifest* m);

// A failed build: the compiler's message and the inputs it was built from (a failure is remembered
// only while they are unchanged).
struct Failure {
  std::string request_key;
  std::string config_key;  // the commands as run (real directories) and the toolchain: what produced it
  std::string spec;        // the JitSpec's name, as a manifest's (empty: a record without it)
  std::string message;
  std::vector<Dep> deps;
};
std::string serialize(const Failure& f);
bool parse(const std::string& text, Failure* f);

// True when every dependency still has the recorded content: stat first (following links), rehash on
// change; a dependency recorded with `resolved` is also rehashed when its path now leads elsewhere
// (a retargeted symbolic link). A kDirectory entry only compares its signature. With `refreshed`,
// dependencies whose content matched after a rehash get their new signature and resolution there
// (and it is set to true if any did), so the caller can record them and skip the rehash next time.
// `changed` gets the first dependency that differs and how ("<path> changed", "<path> is gone").
bool deps_unchanged(std::vector<Dep>& deps, bool* refreshed = nullptr, std::string* changed = nullptr);

// Make-style dependency output as gcc, clang and nvcc write it: the prerequisites of every rule,
// with make's escapes undone: 2n+1 backslashes before a space or tab are n backslashes and a
// character of the name (2n: n backslashes, then a separator), "\#" is '#', "$$" is '$', and a
// backslash-newline continues the line.
std::vector<std::string> parse_depfile(const std::string& text);

}  // namespace jitkern::manifest
