#include "compile_errors.h"

#include "text.h"

#include <cctype>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

namespace jitkern::compile_errors {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// What `line` opens: a diagnostic, "<file>(<line>): <kind>" (nvcc's front ends) or
// "<file>:<line>:<col>: <kind>" (gcc, clang); kNone for any other line.
enum class Opens { kNone, kProblem, kNote };  // kProblem: an error or warning; kNote: a note or remark about one
Opens opens(const std::string& line) {
  if (line.empty() || line[0] == ' ') return Opens::kNone;
  for (const char* kind : {": error", ": warning", ": note", ": remark", ": catastrophic error", ": fatal error"}) {
    const std::size_t at = line.find(kind);
    if (at == std::string::npos || at == 0) continue;
    std::size_t i = at;
    if (line[i - 1] == ')') --i;  // file(12)
    std::size_t digits = i;
    while (digits > 0 && std::isdigit(static_cast<unsigned char>(line[digits - 1]))) --digits;
    if (digits < i && digits > 0 && (line[digits - 1] == '(' || line[digits - 1] == ':'))
      return kind == std::string(": note") || kind == std::string(": remark") ? Opens::kNote : Opens::kProblem;
  }
  return Opens::kNone;
}

// "1 error detected in the compilation of ..." and its plural: one per nvcc pass.
bool counts_errors(const std::string& line) { return line.find(" detected in the compilation of ") != std::string::npos; }

bool cuda_word_in(const std::string& text) {
  for (const char* word : {"__global__", "blockIdx", "threadIdx", "blockDim", "gridDim", "__syncthreads", "__shared__", "<<<"})
    if (text.find(word) != std::string::npos) return true;
  return false;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string base_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

// The files of cpp_files and not of cuda_files: those the generated host source includes and the device source does not.
std::vector<std::string> host_only_files(const plan::Plan& p) {
  std::vector<std::string> files;
  for (const auto& source : p.sources) {
    const std::string line = text::include_line(source);
    if (!line.empty() && p.cpp_source.find(line) != std::string::npos && p.cuda_source.find(line) == std::string::npos)
      files.push_back(source);
  }
  return files;
}

bool is_identifier_path(const std::string& expr) {  // e.g. affine or ns::affine (what names one function or template)
  if (expr.empty()) return false;
  for (char c : expr)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':')) return false;
  return true;
}

}  // namespace

std::string each_diagnostic_once(const std::string& output) {
  const auto lines = text::split_lines(output);
  std::set<std::string> seen;
  std::string out;
  bool dropping = false;  // the notes after a repeated error or warning go with it
  for (std::size_t i = 0; i < lines.size();) {
    const Opens kind = opens(lines[i]);
    std::size_t end = i + 1;
    if (kind != Opens::kNone)  // its indented lines (source, caret, "argument types are") and the blank after
      while (end < lines.size() && (lines[end].empty() || lines[end][0] == ' ')) ++end;
    std::string block;
    for (std::size_t k = i; k < end; ++k) block += lines[k] + "\n";
    if (kind == Opens::kProblem) dropping = !seen.insert(block).second;
    else if (kind == Opens::kNone) dropping = counts_errors(lines[i]) && !seen.insert(block).second;
    if (!dropping) out += block;
    i = end;
  }
  if (!output.empty() && output.back() != '\n' && !out.empty()) out.pop_back();
  return out;
}

std::string likely_mistake(const std::string& output, const plan::Plan& p, const std::string& cause) {
  if (cuda_word_in(output) || cause.find("the compiler ended with") == 0) {
    for (const auto& file : host_only_files(p))
      if (cuda_word_in(read_file(file)))
        return base_name(file) + " holds CUDA code: list it in cuda_files (the host C++ compiler alone compiles cpp_files)";
  }
  for (const auto& w : p.wrapper_lines) {
    if (!starts_with(cause, w.field + " '" + w.name + "' (") || !is_identifier_path(w.expr)) continue;
    const std::string name = w.expr.substr(w.expr.rfind(':') == std::string::npos ? 0 : w.expr.rfind(':') + 1);
    const bool a_template = output.find("<unknown-type>") != std::string::npos ||
                            output.find("unresolved overloaded function type") != std::string::npos ||
                            (output.find("template<") != std::string::npos && output.find(name + "(") != std::string::npos);
    if (a_template) return w.expr + " names a template: give its template arguments (" + w.expr + "<...>)";
  }
  return {};
}

}  // namespace jitkern::compile_errors
