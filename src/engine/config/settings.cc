#include "config/settings.h"

#include <limits.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "base/text.h"
#include "compile/toolchain.h"

extern char** environ;

namespace jitkern::settings {

const Setting kAll[] = {
    {"JITKERN_CACHE_DIR", "~/.cache/jitkern", "where compiled modules are cached (private to the user: mode 0700)", Kind::kPath, nullptr},
    {"JITKERN_PREBUILT_DIRS", "none", "colon-separated read-only caches (from `jitkern prebuild`) searched before JITKERN_CACHE_DIR; verified, never written", Kind::kPathList, nullptr},
    {"JITKERN_LOCK_DIR", "$JITKERN_CACHE_DIR/locks", "where per-module build locks live (keep it on a local file system)", Kind::kPath, nullptr},
    {"JITKERN_CUDA_ARCH", "the device's, e.g. sm_90a", "the CUDA target (sm_XY, sm_XYa, sm_XYf); set it to compile without a GPU", Kind::kArch, nullptr},
    {"JITKERN_RETRY_FAILED", "0", "1: retry a build whose failure was remembered although its inputs are unchanged", Kind::kFlag, nullptr},
    {"JITKERN_COMPILE_TIMEOUT", "900", "seconds after which a compile's processes are killed and the call fails (not remembered)", Kind::kSeconds, nullptr},
    {"JITKERN_ON_MISS", "compile", "what a load does when its module is not cached: compile; warn (log one line naming it, then compile); error (raise CacheMissError)", Kind::kChoice, "compile|warn|error"},
    {"JITKERN_FORCE_REBUILD", "0", "modules to compile again although cached, once per process: 1 or all (every module), or comma-separated module names (as `jitkern cache ls` shows them); ignored with JITKERN_ON_MISS=error", Kind::kText, nullptr},
    {"JITKERN_QUIET", "0", "1: no 'compiling ...' lines on stderr (the `jitkern` logger's default handler)", Kind::kFlag, nullptr},
    {"JITKERN_VERBOSE", "0", "1: also log every compiler command (the `jitkern` logger at DEBUG)", Kind::kFlag, nullptr},
    {"JITKERN_DEVICE_COMPILER", "auto", "what compiles the kernels of host_without_nvcc modules (jitkern's ops but add_constant): nvrtc (after the host pass, a process per module: a quarter less compile work, a longer wait for one module; one NVRTC cannot compile goes to nvcc with a warning); nvcc (beside the host pass: the shortest wait for one module); auto: nvrtc for builds run many at once (warmup, jitkern prebuild), nvcc for one (a first call), their kernels measured alike", Kind::kChoice, "auto|nvrtc|nvcc"},
    {"JITKERN_NVCC_PIPELINE", "1", "0: run nvcc as one command instead of its host and device phases in parallel", Kind::kFlag, nullptr},
    {"JITKERN_INCLUDE_DIR", "the package's include/", "the kernel headers (point it at a checkout's include/ to edit them without reinstalling)", Kind::kPath, nullptr},
    {"JITKERN_CSRC_DIR", "the package's csrc/", "jitkern's kernel sources (point it at a checkout's csrc/ to edit them without reinstalling)", Kind::kPath, nullptr},
    {"JITKERN_TVM_FFI_INCLUDE", "include/ beside the loaded libtvm_ffi.so's lib/", "tvm-ffi's headers (for a tvm-ffi laid out otherwise, or C++ programs that do not load it)", Kind::kPath, nullptr},
    {"JITKERN_TVM_FFI_LIB", "the loaded libtvm_ffi.so's directory", "the directory of libtvm_ffi.so (likewise)", Kind::kPath, nullptr},
    {"CUDA_HOME", "CUDA_PATH, else nvcc on PATH", "the CUDA toolkit whose bin/nvcc compiles CUDA sources", Kind::kPath, nullptr},
    {"CUDA_PATH", "unset", "used when CUDA_HOME is unset", Kind::kPath, nullptr},
    {"CXX", "c++ on PATH", "the host C++ compiler (also nvcc's -ccbin)", Kind::kText, nullptr},
    {"PATH", "the process's", "where compilers named without a directory are found", Kind::kText, nullptr},
    {"HOME", "the user's", "the default cache's parent", Kind::kText, nullptr},
    {"LD_LIBRARY_PATH", "unset", "forwarded to the compilers (whose environment is otherwise the engine's own: docs/cache-store.md)", Kind::kText, nullptr},
    {"TMPDIR", "/tmp", "where the compiler probe, precompiled host preludes and shared host prefixes keep temporary files", Kind::kPath, nullptr},
};
const std::size_t kCount = sizeof(kAll) / sizeof(kAll[0]);

namespace {

const Setting& find(const char* name) {
  for (const Setting& s : kAll)
    if (std::strcmp(s.name, name) == 0) return s;
  throw std::logic_error(std::string("jitkern: internal error: undeclared setting ") + name);
}

const Setting& find(const char* name, Kind kind) {
  const Setting& s = find(name);
  if (s.kind != kind) throw std::logic_error(std::string("jitkern: internal error: setting ") + name + " read as another kind");
  return s;
}

std::string raw(const Setting& s) {
  const char* v = std::getenv(s.name);
  return v != nullptr ? std::string(v) : std::string();
}

[[noreturn]] void invalid(const char* name, const std::string& value, const std::string& expected) {
  throw std::invalid_argument(std::string("jitkern: ") + name + "='" + value + "': " + expected);
}

[[noreturn]] void invalid(const Setting& s, const std::string& value, const std::string& expected) { invalid(s.name, value, expected); }

// `value` as an absolute path: "~" and "~/..." are the home directory, "~user/..." that user's;
// a relative path is taken from the working directory.
std::string absolute(const char* name, const std::string& value) {
  std::string out = value;
  if (!out.empty() && out[0] == '~') {
    const std::size_t slash = out.find('/');
    const std::string user = out.substr(1, slash == std::string::npos ? std::string::npos : slash - 1);
    std::string home;
    if (user.empty() && std::getenv("HOME") != nullptr && *std::getenv("HOME") != '\0') {
      home = std::getenv("HOME");
    } else {
      struct passwd pw, *found = nullptr;
      char buf[4096];
      const int rc = user.empty() ? ::getpwuid_r(::geteuid(), &pw, buf, sizeof buf, &found)
                                  : ::getpwnam_r(user.c_str(), &pw, buf, sizeof buf, &found);
      if (rc != 0 || found == nullptr || pw.pw_dir == nullptr) invalid(name, value, "no home directory for '~" + user + "'");
      home = pw.pw_dir;
    }
    out = home + (slash == std::string::npos ? "" : out.substr(slash));
  }
  if (!out.empty() && out[0] != '/') {
    char buf[PATH_MAX];
    if (::getcwd(buf, sizeof buf) == nullptr) invalid(name, value, "a relative path, and the working directory cannot be read");
    out = std::string(buf) + "/" + out;
  }
  return out;
}

std::string lower(std::string v) {
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return v;
}

bool parse_flag(const Setting& s, const std::string& value) {
  const std::string v = lower(value);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) return false;
  invalid(s, value, "expected 1, true, yes, on or 0, false, no, off");
}

double parse_seconds(const Setting& s, const std::string& value) {
  constexpr double kMax = 1e6;  // beyond this a limit is a typo, and it must stay a representable deadline
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(v) || !(v > 0) || v > kMax)
    invalid(s, value, "expected a positive number of seconds up to 1000000");
  return v;
}

std::string parse_choice(const Setting& s, const std::string& value) {
  const std::vector<std::string> choices = text::split(s.choices, '|');
  if (value.empty()) return choices.front();
  if (std::find(choices.begin(), choices.end(), value) != choices.end()) return value;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  invalid(s, value, "expected one of " + list);
}

// Checks `value` for `s` by reading it as its kind.
void validate(const Setting& s, const std::string& value) {
  switch (s.kind) {
    case Kind::kPath: absolute(s.name, value); break;
    case Kind::kPathList:
      for (const auto& entry : text::split(value, ':'))
        if (!entry.empty()) absolute(s.name, entry);
      break;
    case Kind::kFlag: parse_flag(s, value); break;
    case Kind::kSeconds: parse_seconds(s, value); break;
    case Kind::kChoice: parse_choice(s, value); break;
    case Kind::kArch:
      toolchain::validate_arch(value, s.name);
      break;
    case Kind::kText: break;
  }
}

std::size_t distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string get(const char* name) { return raw(find(name)); }

std::string absolute_path(const std::string& value, const char* what) { return value.empty() ? value : absolute(what, value); }

std::string path(const char* name) {
  const Setting& s = find(name, Kind::kPath);
  const std::string v = raw(s);
  return v.empty() ? v : absolute(s.name, v);
}

std::vector<std::string> path_list(const char* name) {
  const Setting& s = find(name, Kind::kPathList);
  std::vector<std::string> out;
  for (const auto& entry : text::split(raw(s), ':'))
    if (!entry.empty()) out.push_back(absolute(s.name, entry));
  return out;
}

bool flag(const char* name) {
  const Setting& s = find(name, Kind::kFlag);
  const std::string v = raw(s);
  return parse_flag(s, v.empty() ? s.fallback : v);
}

bool flag_or_false(const char* name) noexcept {
  try {
    return flag(name);
  } catch (...) {
    return false;
  }
}

double seconds(const char* name, double fallback) {
  const Setting& s = find(name, Kind::kSeconds);
  const std::string v = raw(s);
  return v.empty() ? fallback : parse_seconds(s, v);
}

std::string choice(const char* name) {
  const Setting& s = find(name, Kind::kChoice);
  return parse_choice(s, raw(s));
}

std::vector<std::string> problems() {
  std::vector<std::string> out;
  for (const Setting& s : kAll) {
    const std::string v = raw(s);
    if (v.empty()) continue;
    try {
      validate(s, v);
    } catch (const std::invalid_argument& e) {
      out.push_back(std::string(e.what()).substr(std::strlen("jitkern: ")));
    }
  }
  return out;
}

void check() {
  const std::vector<std::string> bad = problems();
  if (bad.empty()) return;
  std::string text = "jitkern: invalid setting" + std::string(bad.size() > 1 ? "s" : "") + ": ";
  for (std::size_t i = 0; i < bad.size(); ++i) text += (i ? "; " : "") + bad[i];
  throw std::invalid_argument(text + " (`jitkern config` lists every setting)");
}

std::vector<std::string> unknown() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    if (entry.rfind("JITKERN_", 0) != 0) continue;
    const std::string name = entry.substr(0, entry.find('='));
    const Setting* closest = nullptr;
    std::size_t best = 4;  // at most three edits away
    bool known = false;
    for (const Setting& s : kAll) {
      known = known || name == s.name;
      const std::size_t d = distance(name, s.name);
      if (d < best) best = d, closest = &s;
    }
    if (!known) out.push_back(name + (closest ? std::string(" (did you mean ") + closest->name + "?)" : std::string()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string fingerprint() {
  std::string out;
  for (const Setting& s : kAll) {
    const char* v = std::getenv(s.name);
    out.append(s.name).append("=").append(v ? v : "").append("\n");
  }
  return out;
}

std::string markdown() {
  std::string out = "| variable | when unset | what it does |\n|---|---|---|\n";
  for (const Setting& s : kAll) out += std::string("| `") + s.name + "` | " + s.fallback + " | " + s.meaning + " |\n";
  return out;
}

}  // namespace jitkern::settings
