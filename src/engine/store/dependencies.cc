#include "store/dependencies.h"

#include <algorithm>
#include <map>

#include "base/fs_util.h"
#include "base/sha256.h"
#include "base/text.h"
#include "plan/command_line.h"

namespace jitkern::deps {

using manifest::Dep;

bool under_any(const std::string& path, const std::vector<std::string>& prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& pre) { return path.rfind(pre, 0) == 0; });
}

std::vector<Dep> hash_files(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<Dep> deps;
  for (const auto& [path, resolved] : files) {
    Dep d;
    d.path = path;
    d.resolved = resolved;
    if (!fs::stat_sig(path, &d.sig) || !sha256_file(path, &d.sha)) d.sig = {}, d.sha = manifest::kMissing;
    deps.push_back(d);
  }
  return deps;
}


// "a//b/./c" -> "a/b/c"; ".." stays (through a symbolic link it is not the lexical parent).
namespace {
std::string clean_path(const std::string& path) {
  std::string out;
  for (const auto& part : text::split(path, '/')) {
    if (part.empty() || part == ".") continue;
    out += "/" + part;
  }
  return out.empty() ? "/" : out;
}
}  // namespace

std::vector<std::pair<std::string, std::string>> dependency_paths(const plan::Plan& p, const std::vector<Depfile>& depfiles,
                                                                  const std::string& scratch) {
  const std::string scratch_real = fs::realpath_or(scratch);
  std::map<std::string, std::string> unique;
  for (const auto& df : depfiles) {
    std::string text;
    if (!df.path.empty() && !fs::read_file(df.path, &text)) continue;
    for (const auto& raw : df.path.empty() ? df.paths : manifest::parse_depfile(text)) {
      const std::string used = clean_path(raw[0] == '/' ? raw : df.base + "/" + raw);
      const std::string resolved = fs::realpath_or(used);
      // the generated source (its text is in the key) and the toolchain's own headers
      if (used.rfind(scratch + "/", 0) == 0 || resolved.rfind(scratch_real + "/", 0) == 0) continue;
      if (under_any(resolved, p.dep_exclude_prefixes)) continue;  // where the file really is decides
      unique.emplace(used, resolved == used ? "" : resolved);
    }
  }
  for (const auto& file : p.link_option_files) {
    const std::string used = clean_path(file), resolved = fs::realpath_or(used);
    unique.emplace(used, resolved == used ? "" : resolved);
  }
  for (const auto& source : p.sources) {
    const std::string used = clean_path(source), resolved = fs::realpath_or(used);
    unique.emplace(used, resolved == used ? "" : resolved);
  }
  return {unique.begin(), unique.end()};
}

std::vector<Dep> search_directories(const plan::Plan& p) {
  std::vector<Dep> dirs;
  auto add = [&](const std::string& dir) {
    Dep dep;
    dep.path = dir;
    dep.sha = manifest::kDirectory;
    if (fs::stat_sig(dir, &dep.sig) &&
        std::none_of(dirs.begin(), dirs.end(), [&](const Dep& e) { return e.path == dep.path; }))
      dirs.push_back(dep);
  };
  for (const auto& s : p.sources) add(fs::dirname(s));
  for (const auto* cmd : {&p.cpp_compile, &p.cuda_compile, &p.host_pass})
    for (const auto& dir : command_line::header_directories(*cmd)) add(dir);
  return dirs;
}

}  // namespace jitkern::deps
