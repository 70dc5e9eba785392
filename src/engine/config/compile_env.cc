#include "config/compile_env.h"

#include <algorithm>

#include "base/sha256.h"

namespace jitkern::compile_env {

const Variable kDeclared[] = {
    {"PATH", nullptr, &config::Config::path, "where the compilers find as, ld and nvcc's own programs"},
    {"LD_LIBRARY_PATH", nullptr, &config::Config::ld_library_path, "the shared libraries a compiler installed outside the system's paths runs with"},
    {"LC_ALL", "C", nullptr, "diagnostics in one language and quoting, which the engine parses"},
};
const std::size_t kDeclaredCount = sizeof(kDeclared) / sizeof(kDeclared[0]);

std::vector<std::string> with(std::vector<std::string> env, const std::vector<std::string>& step) {
  for (const auto& s : step) {
    const std::string name = s.substr(0, s.find('=') + 1);  // "NAME="
    env.erase(std::remove_if(env.begin(), env.end(), [&](const std::string& e) { return e.compare(0, name.size(), name) == 0; }), env.end());
    env.push_back(s);
  }
  return env;
}

std::vector<std::string> make(const config::Config& c, const std::vector<std::string>& step) {
  std::vector<std::string> env;
  for (const Variable& v : kDeclared) {
    const std::string value = v.value != nullptr ? std::string(v.value) : c.*v.forwarded;
    if (v.value != nullptr || !value.empty()) env.push_back(std::string(v.name) + "=" + value);
  }
  return with(std::move(env), step);
}

std::string key(const config::Config& c) {
  Sha256 h;
  h.field("compile-env-1");
  for (const Variable& v : kDeclared)
    if (v.value == nullptr) h.field(v.name).field(c.*v.forwarded);
  return h.hex();
}

}  // namespace jitkern::compile_env
