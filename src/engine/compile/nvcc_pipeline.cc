#include "compile/nvcc_pipeline.h"

#include <jitkern/detail/device_image.h>

#include "base/fs_util.h"
#include "base/text.h"

namespace jitkern::nvcc {

namespace {

// The quoted value after `open` (an option up to its opening quote: nvcc quotes every path it prints)
// in `cmd`: its position and length in `*at` and `*len`.
bool find_value(const std::string& cmd, const std::string& open, std::size_t* at, std::size_t* len) {
  const auto o = cmd.find(open);
  if (o == std::string::npos) return false;
  const auto end = cmd.find('"', o + open.size());
  if (end == std::string::npos) return false;
  *at = o + open.size(), *len = end - *at;
  return true;
}

bool value_of(const std::string& cmd, const std::string& open, std::string* value) {
  std::size_t at, len;
  if (!find_value(cmd, open, &at, &len)) return false;
  *value = cmd.substr(at, len);
  return true;
}

// Appends `suffix` to the quoted value after `open`.
bool suffix_value(std::string& cmd, const std::string& open, const std::string& suffix) {
  std::size_t at, len;
  if (!find_value(cmd, open, &at, &len)) return false;
  cmd.insert(at + len, suffix);
  return true;
}

// Removes the option `open`...`"` and the blank before it.
bool erase_option(std::string& cmd, const std::string& open) {
  std::size_t at, len;
  if (!find_value(cmd, open, &at, &len)) return false;
  std::size_t from = at - open.size();
  if (from > 0 && cmd[from - 1] == ' ') --from;
  cmd.erase(from, at + len + 1 - from);
  return true;
}

constexpr const char* kFatbinSymbol = "jitkern_fatbin_data";

// From cicc's command, the front-end-only run that writes the stub where nvcc planned it (and its
// other outputs beside their planned names), and the full run with its stub written to a side file.
bool split_cicc(const std::string& cicc, std::string* frontend, std::string* ptx) {
  const auto space = cicc.find(' ');
  if (space == std::string::npos) return false;
  *frontend = cicc.substr(0, space) + " --device-syntax-only" + cicc.substr(space);
  *ptx = cicc;
  return suffix_value(*frontend, "--gen_c_file_name \"", ".frontend") && suffix_value(*frontend, "--gen_device_file_name \"", ".frontend") &&
         suffix_value(*frontend, " -o \"", ".frontend") && suffix_value(*ptx, "--stub_file_name \"", ".unused");
}

// A dry run's variable assignment (NAME=value): true, and kept in `env` unless it is one of nvcc's
// list-valued variables, already expanded into the commands.
bool variable(const std::string& cmd, std::vector<std::string>* env) {
  const std::string first = cmd.substr(0, cmd.find(' '));
  const auto eq = first.find('=');
  if (eq == std::string::npos || eq == 0 || !text::is_identifier(first.substr(0, eq))) return false;
  const std::string name = first.substr(0, eq);
  if (name != "INCLUDES" && name != "SYSTEM_INCLUDES" && name != "LIBRARIES") env->push_back(cmd);
  return true;
}

}  // namespace

bool fatbin_commands(const std::string& dryrun, const std::string& depfile, std::vector<std::string>* env, std::vector<std::string>* cmds) {
  env->clear(), cmds->clear();
  bool preprocessed = false;
  for (const auto& line : text::split_lines(dryrun)) {
    if (line.rfind("#$ ", 0) != 0) continue;
    const std::string cmd = line.substr(3);
    if (variable(cmd, env)) continue;
    const std::string first = cmd.substr(0, cmd.find(' '));
    if (!preprocessed && cmd.find(" -E ") != std::string::npos) {
      cmds->push_back(cmd + " -MD -MF " + fs::shell_quote(depfile));
      preprocessed = true;
    } else if (preprocessed && (first.find("cicc") != std::string::npos || first == "ptxas" || first == "fatbinary")) {
      cmds->push_back(cmd);
    } else {
      return false;  // a step we do not know
    }
  }
  return preprocessed && cmds->size() == 4;
}

bool plan(const std::string& dryrun, const std::string& depfile, Pipeline* out) {
  *out = Pipeline{};
  for (const auto& line : text::split_lines(dryrun)) {
    if (line.rfind("#$ ", 0) != 0) continue;
    std::string cmd = line.substr(3);
    const std::string first = cmd.substr(0, cmd.find(' '));
    if (variable(cmd, &out->env)) continue;
    const bool preprocess = cmd.find(" -E ") != std::string::npos;
    if (first.find("cudafe++") != std::string::npos) {
      const std::string gen = " --gen_module_id_file";
      const auto g = cmd.find(gen);
      if (g == std::string::npos || !value_of(cmd, "--module_id_file_name \"", &out->module_id_path)) return false;
      cmd.erase(g, gen.size());
      out->host_chain.push_back(cmd);
    } else if (preprocess && cmd.find(".cpp4.ii\"") != std::string::npos) {
      if (!value_of(cmd, " -o \"", &out->host_preprocessed)) return false;
      out->host_chain.insert(out->host_chain.begin(), cmd + " -MD -MF " + fs::shell_quote(depfile));
    } else if (preprocess && cmd.find(".cpp1.ii\"") != std::string::npos && out->device_preprocess.empty()) {
      out->device_preprocess = cmd;
    } else if (first.find("cicc") != std::string::npos && out->cicc.empty()) {
      out->cicc = cmd;
      if (!split_cicc(cmd, &out->cicc_frontend, &out->cicc_ptx)) return false;
    } else if (first == "ptxas" && !out->cicc.empty() && out->device_back.empty()) {
      out->device_back.push_back(cmd);
    } else if (first == "fatbinary" && out->device_back.size() == 1) {
      if (!value_of(cmd, "--create=\"", &out->fatbin_path) || !value_of(cmd, "--embedded-fatbin=\"", &out->embedded_fatbin_path) ||
          !erase_option(cmd, "--embedded-fatbin=\""))
        return false;
      out->device_back.push_back(cmd);
    } else if (cmd.find(" -c ") != std::string::npos && cmd.find(".cudafe1.cpp") != std::string::npos && out->host_compile.empty()) {
      out->host_compile = cmd;
    } else {
      return false;  // a phase we do not know how to order
    }
  }
  return out->host_chain.size() == 2 && !out->device_preprocess.empty() && out->device_back.size() == 2 &&
         !out->host_compile.empty() && !out->module_id_path.empty();
}

std::string fatbin_declaration() {
  return std::string("// written by jitkern in place of nvcc's embedded fatbin (the data is linked in from its own object)\n"
                     "#include \"fatbinary_section.h\"\n"
                     "#define __CUDAFATBINSECTION FATBIN_CONTROL_SECTION_NAME\n"
                     "#define __CUDAFATBINDATASECTION FATBIN_DATA_SECTION_NAME\n"
                     "extern \"C\" const unsigned long long ") + kFatbinSymbol + "[];\n"
         "extern \"C\" { static const __fatBinC_Wrapper_t __fatDeviceText __attribute__((aligned(8))) "
         "__attribute__((section(__CUDAFATBINSECTION))) = {FATBINC_MAGIC, FATBINC_VERSION, " + kFatbinSymbol + ", 0}; }\n";
}

namespace {

#define JITKERN_STRINGIFY_(x) #x
#define JITKERN_STRINGIFY(x) JITKERN_STRINGIFY_(x)

// `path`'s bytes as the hidden, 8-byte aligned data symbols `syms`; with `passes` > 0, also that count as
// JITKERN_DEVICE_PASSES_SYMBOL (a module's first device image, <jitkern/detail/device_image.h>).
std::string data_assembly(const std::vector<std::string>& syms, const std::string& path, int passes = 0) {
  std::string quoted;
  for (const char c : path) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  std::string text = ".section .nv_fatbin, \"a\"\n.balign 8\n";
  for (const auto& sym : syms) text += ".globl " + sym + "\n.hidden " + sym + "\n" + sym + ":\n";
  text += ".incbin \"" + quoted + "\"\n";
  if (passes > 0) {
    const std::string count = JITKERN_STRINGIFY(JITKERN_DEVICE_PASSES_SYMBOL);
    text += ".section .rodata\n.balign 8\n.globl " + count + "\n.hidden " + count + "\n" + count + ":\n.quad " + std::to_string(passes) + "\n";
  }
  return text + ".section .note.GNU-stack, \"\", %progbits\n";
}

}  // namespace

std::string fatbin_assembly(const std::string& fatbin_path) { return data_assembly({kFatbinSymbol}, fatbin_path); }

std::string image_assembly(const std::string& fatbin_path, int part, int passes) {
  const std::string symbol = JITKERN_STRINGIFY(JITKERN_DEVICE_IMAGE_SYMBOL);
  return part == 0 ? data_assembly({symbol}, fatbin_path, passes) : data_assembly({symbol + "_" + std::to_string(part)}, fatbin_path);
}

std::string fatbin_and_image_assembly(const std::string& fatbin_path) {
  return data_assembly({kFatbinSymbol, JITKERN_STRINGIFY(JITKERN_DEVICE_IMAGE_SYMBOL)}, fatbin_path, 1);
}

std::string rewritten_host_compile(const Pipeline& pipe, const std::string& file) {
  std::string cmd = pipe.host_compile;
  const auto x = cmd.find(" -x c++ ");
  const auto in = cmd.find(".cudafe1.cpp\"");
  const auto open = in == std::string::npos ? std::string::npos : cmd.rfind(" \"", in);
  if (x == std::string::npos || open == std::string::npos || open < x) return "";
  // Already preprocessed; CUDA's attributes the rewrite leaves (in kept bodies) are the device's;
  // -fpermissive: what nvcc's front end accepts and GCC's refuses by default (a member alias that
  // changes a name's meaning in its class) is written for nvcc, as cudafe++'s output would be.
  cmd.replace(open, in + 13 - open, " " + fs::shell_quote(file));
  cmd.replace(x, 8, " -x c++-cpp-output -Wno-attributes -fpermissive ");
  return cmd;
}

}  // namespace jitkern::nvcc
