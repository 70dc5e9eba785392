#include "store/manifest.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "base/sha256.h"
#include "base/text.h"

namespace jitkern::manifest {
namespace {

constexpr const char* kManifestMagic = "jitkern-manifest 5";
constexpr const char* kFailureMagic = "jitkern-failure 3";

std::string sig_text(const fs::FileSig& g) { return std::to_string(g.size) + " " + std::to_string(g.mtime_ns) + " "; }

// "<int> <int> <word> <rest of line>", single spaces, a non-empty rest (parsed by hand: sscanf's code
// is 4 KB that a warm load would run cold once per process).
bool parse_ints_word_rest(const std::string& s, long long* a, long long* b, std::string* word, std::string* rest) {
  const char* p = s.c_str();
  char* end = nullptr;
  errno = 0;
  *a = std::strtoll(p, &end, 10);
  if (end == p || *end != ' ' || errno != 0) return false;
  p = end + 1;
  *b = std::strtoll(p, &end, 10);
  if (end == p || *end != ' ' || errno != 0) return false;
  p = end + 1;
  const char* space = std::strchr(p, ' ');
  if (space == nullptr || space == p || space[1] == '\0') return false;
  *word = std::string(p, space);
  *rest = std::string(space + 1);
  return true;
}

// "<size> <mtime_ns> <sha> <rest of line>"
bool parse_sig_line(const std::string& s, fs::FileSig* sig, std::string* sha, std::string* rest) {
  long long size = 0, mtime_ns = 0;
  if (!parse_ints_word_rest(s, &size, &mtime_ns, sha, rest)) return false;
  if (sha->size() != 64 && *sha != kDirectory && *sha != kMissing) return false;
  sig->size = size, sig->mtime_ns = mtime_ns;
  return true;
}

bool is_hex_key(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// The "<prefix><64 hex digits>" lines of a record, each allowed once.
struct KeyField {
  const char* prefix;
  std::string* value;
  bool seen = false;
};

// If `line` is one of `fields` (not seen before), stores it and returns whether it is well formed;
// nullopt when it is none of them.
std::optional<bool> take_key(const std::string& line, std::vector<KeyField>& fields) {
  for (auto& f : fields) {
    const std::size_t n = std::strlen(f.prefix);
    if (f.seen || line.compare(0, n, f.prefix) != 0) continue;
    *f.value = line.substr(n);
    return f.seen = is_hex_key(*f.value);
  }
  return std::nullopt;
}

bool all_seen(const std::vector<KeyField>& fields) {
  return std::all_of(fields.begin(), fields.end(), [](const KeyField& f) { return f.seen; });
}

bool is_recorded_path(const std::string& p) { return !p.empty() && (p[0] == '/' || p[0] == '@'); }

std::string serialize_deps(const std::vector<Dep>& deps) {
  std::string out;
  for (const auto& d : deps) {
    out += "dep " + sig_text(d.sig) + d.sha + " " + d.path + "\n";
    if (!d.resolved.empty()) out += "link " + d.resolved + "\n";
  }
  return out;
}

// Parses the lines between the magic and "end"; calls on_line for lines other than dep and link lines.
template <typename OnLine>
bool parse_body(const std::vector<std::string>& lines, std::size_t first, std::size_t last, std::vector<Dep>* deps,
                OnLine on_line) {
  for (std::size_t i = first; i < last; ++i) {
    const std::string& line = lines[i];
    if (line.rfind("dep ", 0) == 0) {
      Dep d;
      if (!parse_sig_line(line.substr(4), &d.sig, &d.sha, &d.path) || !is_recorded_path(d.path)) return false;
      deps->push_back(d);
    } else if (line.rfind("link ", 0) == 0) {
      if (deps->empty() || !deps->back().resolved.empty() || !is_recorded_path(line.substr(5))) return false;
      deps->back().resolved = line.substr(5);
    } else if (!on_line(line)) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string full_key_of(const std::string& request_key, const std::string& toolchain, const std::vector<Dep>& deps) {
  Sha256 h;
  h.field(request_key).field(toolchain);
  for (const auto& d : deps) h.field(d.path).field(d.sha);
  return h.hex();
}

std::string library_name(const std::string& full_key) { return full_key.substr(0, 24) + ".so"; }

std::string library_record(const std::string& full_key, const std::string& lib_sha) {
  return Sha256().field("jitkern-library").field(full_key).field(lib_sha).hex();
}

namespace {
// "search <key>", then "compiler <size> <mtime_ns> <path>" per compiler.
std::string compilers_text(const std::vector<Dep>& compilers, const std::string& search) {
  std::string out = search.empty() ? "" : "search " + search + "\n";
  for (const auto& c : compilers) out += "compiler " + sig_text(c.sig) + c.path + "\n";
  return out;
}

bool parse_compiler(const std::string& s, Dep* c) {
  char* end = nullptr;
  errno = 0;
  c->sig.size = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != ' ' || errno != 0) return false;
  const char* p = end + 1;
  c->sig.mtime_ns = std::strtoll(p, &end, 10);
  if (end == p || *end != ' ' || errno != 0) return false;
  c->path = end + 1;
  return c->path.size() > 1 && c->path[0] == '/';
}
}  // namespace

std::string serialize(const Manifest& m) {
  return std::string(kManifestMagic) + "\nrequest " + m.request_key + "\ntoolchain " + m.toolchain + "\nkey " + m.full_key + "\nlib " + sig_text(m.lib_sig) +
         m.lib_sha + " " + m.lib_name + "\ninfo " + std::to_string(m.built_unix) + " " + std::to_string(m.build_ms) + " " +
         (m.arch.empty() ? "-" : m.arch) + " " + m.module + "\n" + (m.spec.empty() ? "" : "spec " + m.spec + "\n") + compilers_text(m.compilers, m.compiler_search) + serialize_deps(m.deps) + "end\n";
}

bool parse(const std::string& text, Manifest* m) {
  const auto lines = text::split_lines(text);
  if (lines.size() < 7 || lines[0] != kManifestMagic || lines.back() != "end" || text.back() != '\n') return false;
  std::vector<KeyField> keys = {{"request ", &m->request_key}, {"toolchain ", &m->toolchain}, {"key ", &m->full_key}};
  bool has_lib = false, has_info = false;
  const bool ok = parse_body(lines, 1, lines.size() - 1, &m->deps, [&](const std::string& line) {
    if (const auto key = take_key(line, keys)) return *key;
    if (line.rfind("lib ", 0) == 0 && !has_lib) {
      return has_lib = parse_sig_line(line.substr(4), &m->lib_sig, &m->lib_sha, &m->lib_name);
    }
    if (line.rfind("search ", 0) == 0 && m->compiler_search.empty() && m->compilers.empty()) {
      m->compiler_search = line.substr(7);
      return !m->compiler_search.empty();
    }
    if (line.rfind("compiler ", 0) == 0 && m->deps.empty() && m->compilers.size() < 2) {
      Dep compiler;
      if (!parse_compiler(line.substr(9), &compiler)) return false;
      m->compilers.push_back(compiler);
      return true;
    }
    if (line.rfind("info ", 0) == 0 && !has_info) {  // "info <built_unix> <build_ms> <arch> <module>"
      long long built = 0, ms = 0;
      if (!parse_ints_word_rest(line.substr(5), &built, &ms, &m->arch, &m->module) || m->arch.size() > 63) return false;
      m->built_unix = built, m->build_ms = ms;
      return has_info = !m->module.empty();
    }
    if (line.rfind("spec ", 0) == 0 && m->spec.empty()) {  // after info: the module's name starts with it
      m->spec = line.substr(5);
      return has_info && !m->spec.empty() && (m->module == m->spec || m->module.rfind(m->spec + "_", 0) == 0);
    }
    return false;
  });
  return ok && all_seen(keys) && has_lib && has_info && m->lib_name == library_name(m->full_key) &&
         m->full_key == full_key_of(m->request_key, m->toolchain, m->deps);
}

std::string serialize(const Failure& f) {
  return std::string(kFailureMagic) + "\nrequest " + f.request_key + "\nconfig " + f.config_key + "\n" +
         (f.spec.empty() ? "" : "spec " + f.spec + "\n") + serialize_deps(f.deps) + "end\n" + f.message;
}

bool parse(const std::string& text, Failure* f) {
  const auto end = text.find("\nend\n");
  if (end == std::string::npos) return false;
  const auto lines = text::split_lines(text.substr(0, end + 1));
  if (lines.size() < 2 || lines[0] != kFailureMagic) return false;
  std::vector<KeyField> keys = {{"request ", &f->request_key}, {"config ", &f->config_key}};
  const bool ok = parse_body(lines, 1, lines.size(), &f->deps, [&](const std::string& line) {
    if (line.rfind("spec ", 0) == 0 && f->spec.empty()) return !(f->spec = line.substr(5)).empty();  // optional, once
    return take_key(line, keys).value_or(false);
  });
  f->message = text.substr(end + 5);
  return ok && all_seen(keys);
}

bool deps_unchanged(std::vector<Dep>& deps, bool* refreshed, std::string* changed) {
  const auto differs = [&](const Dep& d, const char* how) {
    if (changed != nullptr) *changed = d.path + how;
    return false;
  };
  for (auto& d : deps) {
    fs::FileSig now;
    if (!fs::stat_sig(d.path, &now)) return differs(d, d.sha == kMissing ? " is still missing" : " is gone");
    // Only a path recorded as leading elsewhere pays for a realpath: the rest cannot be retargeted.
    const std::string resolved = d.resolved.empty() ? std::string() : fs::realpath_or(d.path);
    if (now == d.sig && resolved == d.resolved) continue;
    if (d.sha == kDirectory || d.sha == kMissing) return differs(d, " changed");  // a directory is compared by its signature alone
    std::string sha;
    if (!sha256_file(d.path, &sha) || sha != d.sha) return differs(d, " changed");
    if (refreshed != nullptr) d.sig = now, d.resolved = resolved, *refreshed = true;
  }
  return true;
}

std::vector<std::string> parse_depfile(const std::string& raw) {
  std::string text;  // logical lines: continuations joined, carriage returns dropped
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\\' && i + 1 < raw.size() && raw[i + 1] == '\n') {
      text += ' ', ++i;
    } else if (raw[i] == '\\' && i + 2 < raw.size() && raw[i + 1] == '\r' && raw[i + 2] == '\n') {
      text += ' ', i += 2;
    } else if (raw[i] != '\r') {
      text += raw[i];
    }
  }
  std::vector<std::string> out;
  for (const std::string& line : text::split_lines(text)) {
    std::vector<std::string> words;
    std::string cur;
    bool in_word = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (c == '\\') {
        std::size_t n = 0;
        while (i + n < line.size() && line[i + n] == '\\') ++n;
        const char next = i + n < line.size() ? line[i + n] : '\0';
        if (next == ' ' || next == '\t') {
          cur.append(n / 2, '\\');
          in_word = true;
          if (n % 2 == 1) cur += next, i += n;  // an escaped blank belongs to the name
          else i += n - 1;                      // the blank after them ends the name
        } else if (next == '#' && n == 1) {
          cur += '#', i += 1, in_word = true;
        } else {
          cur.append(n, '\\'), i += n - 1, in_word = true;
        }
      } else if (c == '$' && i + 1 < line.size() && line[i + 1] == '$') {
        cur += '$', ++i, in_word = true;
      } else if (c == ' ' || c == '\t') {
        if (in_word) words.push_back(cur);
        cur.clear(), in_word = false;
      } else {
        cur += c, in_word = true;
      }
    }
    if (in_word) words.push_back(cur);
    // The targets end at the first word that ends in ':' (or is ':'); the rest are prerequisites.
    std::size_t first = words.size();
    for (std::size_t w = 0; w < words.size() && first == words.size(); ++w)
      if (!words[w].empty() && words[w].back() == ':') first = w + 1;
    for (std::size_t w = first; w < words.size(); ++w) out.push_back(words[w]);
  }
  return out;
}

}  // namespace jitkern::manifest
