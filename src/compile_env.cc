#include "compile_env.h"

#include "settings.h"
#include "sha256.h"

namespace jitkern::compile_env {

const Variable kDeclared[] = {
    {"PATH", nullptr, "where nvcc finds its host compiler and the compilers find as and ld"},
    {"LD_LIBRARY_PATH", nullptr, "the shared libraries a compiler installed outside the system's paths runs with"},
    {"LC_ALL", "C", "diagnostics in one language and quoting, which the engine parses"},
};
const std::size_t kDeclaredCount = sizeof(kDeclared) / sizeof(kDeclared[0]);

std::vector<std::string> make(const std::vector<std::string>& step) {
  std::vector<std::string> env;
  const auto overridden = [&](const std::string& name) {
    for (const auto& s : step)
      if (s.compare(0, s.find('='), name) == 0 && s.find('=') == name.size()) return true;
    return false;
  };
  for (const Variable& v : kDeclared) {
    if (overridden(v.name)) continue;
    const std::string value = v.value != nullptr ? std::string(v.value) : settings::get(v.name);
    if (v.value != nullptr || !value.empty()) env.push_back(std::string(v.name) + "=" + value);
  }
  env.insert(env.end(), step.begin(), step.end());
  return env;
}

std::string key() {
  Sha256 h;
  h.field("compile-env-1");
  for (const Variable& v : kDeclared)
    if (v.value == nullptr) h.field(v.name).field(settings::get(v.name));
  return h.hex();
}

}  // namespace jitkern::compile_env
