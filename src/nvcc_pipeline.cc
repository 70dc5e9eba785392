#include "nvcc_pipeline.h"

#include "fs_util.h"
#include "text.h"

namespace jitkern::nvcc {

bool plan(const std::string& dryrun, const std::string& depfile, Pipeline* out) {
  *out = Pipeline{};
  for (const auto& line : text::split_lines(dryrun)) {
    if (line.rfind("#$ ", 0) != 0) continue;
    std::string cmd = line.substr(3);
    const std::string first = cmd.substr(0, cmd.find(' '));
    const auto eq = first.find('=');
    if (eq != std::string::npos && eq > 0 && text::is_identifier(first.substr(0, eq))) {
      const std::string name = first.substr(0, eq);
      // List-valued variables are nvcc-internal and already expanded into the commands.
      if (name != "INCLUDES" && name != "SYSTEM_INCLUDES" && name != "LIBRARIES") out->env.push_back(cmd);
      continue;
    }
    if (first.find("cudafe++") != std::string::npos) {
      const std::string gen = " --gen_module_id_file";
      const auto g = cmd.find(gen);
      if (g == std::string::npos) return false;
      cmd.erase(g, gen.size());
      const std::string key = "--module_id_file_name \"";
      const auto m = cmd.find(key);
      if (m == std::string::npos) return false;
      const auto end = cmd.find('"', m + key.size());
      if (end == std::string::npos) return false;
      out->module_id_path = cmd.substr(m + key.size(), end - m - key.size());
      out->host_chain.push_back(cmd);
    } else if (cmd.find(" -E ") != std::string::npos && cmd.find(".cpp4.ii\"") != std::string::npos) {
      out->host_chain.insert(out->host_chain.begin(), cmd + " -MD -MF " + fs::shell_quote(depfile));
    } else if (cmd.find(" -E ") != std::string::npos && cmd.find(".cpp1.ii\"") != std::string::npos) {
      out->device_chain.insert(out->device_chain.begin(), cmd);
    } else if (first.find("cicc") != std::string::npos || first == "ptxas" || first == "fatbinary") {
      out->device_chain.push_back(cmd);
    } else if (cmd.find(" -c ") != std::string::npos && cmd.find(".cudafe1.cpp") != std::string::npos) {
      out->finish.push_back(cmd);
    } else if (first == "rm") {
      out->finish.push_back(cmd);
    } else {
      return false;  // a phase we do not know how to order
    }
  }
  return out->host_chain.size() == 2 && out->device_chain.size() == 4 && !out->finish.empty() && !out->module_id_path.empty();
}

}  // namespace jitkern::nvcc
