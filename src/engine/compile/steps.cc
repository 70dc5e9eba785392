#include "compile/steps.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "config/compile_env.h"
#include "base/log.h"
#include "base/text.h"

namespace jitkern::compile {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

Steps::Steps(const plan::Plan& plan, const config::Config& config, const std::string& scratch_dir, bool parallel_build)
    : p(plan), cfg(config), env(compile_env::make(config)), scratch(scratch_dir), timeout(config.compile_timeout_s), parallel(parallel_build),
      nvrtc(!plan.nvrtc_options.empty() && (plan.nvrtc_asked || parallel_build)) {}

std::string Steps::output() const {
  std::string text, other;
  fs::read_file(log(), &text);
  // The device passes' outputs, each once (under the passes that printed it, where several ran), then the stub's.
  std::vector<std::pair<std::string, std::vector<int>>> outputs;
  for (int part = 0; part < device_passes; ++part) {
    if (!fs::read_file(device_log(part), &other) || other.empty() || text.find(other) != std::string::npos) continue;
    auto same = std::find_if(outputs.begin(), outputs.end(), [&](const auto& o) { return o.first == other; });
    if (same == outputs.end()) outputs.push_back({other, {part}});
    else same->second.push_back(part);
  }
  for (const auto& [output, parts] : outputs) text += (device_passes > 1 ? device_passes_name(parts) + ":\n" : "") + output;
  if (fs::read_file(stub_log(), &other) && text.find(other) == std::string::npos) text += other;
  return text;
}

std::string Steps::device_passes_name(const std::vector<int>& parts) const {
  std::string list;
  for (const int part : parts) list += (list.empty() ? "" : ", ") + std::to_string(part);
  return (parts.size() == 1 ? "the device pass of JITKERN_DEVICE_PART=" : "the device passes of JITKERN_DEVICE_PART=") + list + " (of " +
         std::to_string(device_passes) + ")";
}

std::string Steps::device_pass_of(const std::string& diagnostic) const {
  std::string text;
  if (device_passes == 1 || diagnostic.empty() || (fs::read_file(log(), &text) && text.find(diagnostic) != std::string::npos)) return "";
  std::vector<int> parts;
  for (int part = 0; part < device_passes; ++part)
    if (fs::read_file(device_log(part), &text) && text.find(diagnostic) != std::string::npos) parts.push_back(part);
  return parts.size() == 1 ? device_passes_name(parts) : "";  // the host pass's or several passes': the module's, not one pass's
}

void Steps::record(const std::string& command) {
  commands.push_back(command);
  log::emit(log::kDebug, "run: " + command);
}

int Steps::run_argv(const std::vector<std::string>& argv, const std::string& cwd) {
  record(cwd.empty() ? fs::join_command(argv) : "(cd " + fs::shell_quote(cwd) + " && " + fs::join_command(argv) + ")");
  return fs::wait(start(argv, log(), cwd), timeout);
}

int Steps::run_link(std::vector<std::string> argv) {
  argv.push_back("-Wl,--trace");
  record(in_dir(fs::join_command(argv)));
  const std::string link_log = scratch + "/link.log";
  const int rc = fs::wait(start(argv, link_log, scratch), timeout);
  std::string text, rest;
  fs::read_file(link_log, &text);
  Depfile inputs{"", ""};
  for (const auto& line : text::split_lines(text)) {
    std::string path = line[0] == '/' ? line : scratch + "/" + line;
    if (!line.empty() && line.back() == ')' && ::access(path.c_str(), F_OK) != 0) path = path.substr(0, path.rfind('('));  // gold: archive(member)
    struct stat st;
    if (!line.empty() && line.find(": ") == std::string::npos && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
      inputs.paths.push_back(path);
    else
      rest += line + "\n";
  }
  if (!rest.empty()) fs::append_file(log(), rest);
  depfiles.push_back(inputs);
  return rc;
}

fs::Process Steps::start(const std::vector<std::string>& argv, const std::string& log_path, const std::string& cwd,
                          std::vector<std::string> step_env) const {
  step_env.push_back(cwd == scratch ? "TMPDIR=tmp" : "TMPDIR=" + scratch + "/tmp");
  return fs::spawn(argv, log_path, compile_env::with(env, step_env), cwd);
}

void Steps::refuse_a_path_a_shell_would_run() const {
  if (scratch.find('`') == std::string::npos && scratch.find("$(") == std::string::npos && scratch.find("${") == std::string::npos)
    return;
  throw Transient("jitkern: module '" + p.name + "': nvcc compiles it as one command (JITKERN_NVCC_PIPELINE=0, or a CUDA flag " +
                  "holding one of $ ` \" \\ !), which passes the cache path " + scratch + " through a shell, where its ` or $( or ${ " +
                  "would run: use another JITKERN_CACHE_DIR, or leave JITKERN_NVCC_PIPELINE at 1 and such flags out");
}

int Steps::run_shell_chain(const std::vector<std::string>& cmds, const std::vector<std::string>& step_env, const std::string& log_path) {
  for (const auto& c : cmds) {
    const int rc = fs::wait(start({"/bin/sh", "-c", c}, log_path, scratch, step_env), timeout);
    if (rc != 0) return rc;
  }
  return 0;
}

bool Steps::dry_run(std::vector<std::string> argv, std::string* text, const std::string& keep_dir) {
  const bool shell_safe = std::none_of(p.cuda_compile.begin(), p.cuda_compile.end(),
                                       [](const std::string& a) { return a.find_first_of("$`\"\\!") != std::string::npos; });
  if (!shell_safe || !cfg.nvcc_pipeline) return false;
  ::mkdir((scratch + "/" + keep_dir).c_str(), 0700);
  argv.insert(argv.end(), {"--dryrun", "--keep", "--keep-dir", keep_dir});
  const std::string log_path = scratch + "/" + keep_dir + ".dryrun.txt";
  if (fs::wait(start(argv, log_path, scratch), timeout) != 0 || !fs::read_file(log_path, text)) return false;
  *text = jitkern::text::erase_all(*text, scratch + "/");
  return text->find(scratch) == std::string::npos;
}

std::string Steps::head_of(const std::string& path) {
  std::string text;
  fs::read_file(path, &text);
  return text::error_lines(text);
}

}  // namespace jitkern::compile
