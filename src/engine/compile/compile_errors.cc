#include "compile/compile_errors.h"

#include "store/dependencies.h"
#include "base/text.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

namespace jitkern::compile_errors {

namespace {

// The wrapper that a diagnostic at `file`:`line` is about, if that is a wrapper's line of a generated
// source (host.cc holds cpp_wrappers, device.cu cuda_wrappers); nullptr otherwise.
const plan::Plan::WrapperLine* wrapper_at(const plan::Plan& p, const std::string& scratch, const std::string& file, int line) {
  const char* field = file == scratch + "/host.cc" ? "cpp_wrappers" : file == scratch + "/device.cu" ? "cuda_wrappers" : nullptr;
  if (field == nullptr) return nullptr;
  for (const auto& w : p.wrapper_lines)
    if (w.field == field && w.line == line) return &w;
  return nullptr;
}

// A compiler diagnostic's location and message. The parsers below take the shortest file name that
// lets the rest of the line match, as the regular expressions in their comments would (except that a
// '\r', which `.` would not match, is taken as any other character; std::regex is
// not used: constructing one crashed the process on a GPU host whose GCC 13 built the engine).
struct Diagnostic {
  std::string file;
  int line = 0;
  std::string message;
};

// The end of the digits at `at` (== at where there are none).
std::size_t digits_end(const std::string& s, std::size_t at) {
  while (at < s.size() && s[at] >= '0' && s[at] <= '9') ++at;
  return at;
}

// Where a line number that follows `sep` at `i` ends ("file:12" or "file(12"), or npos.
std::size_t line_number_end(const std::string& s, std::size_t i, char sep) {
  if (s[i] != sep) return std::string::npos;
  const std::size_t end = digits_end(s, i + 1);
  return end == i + 1 ? std::string::npos : end;
}

// `word` at `at`, not followed by a word character.
bool word_at(const std::string& s, std::size_t at, const std::string& word) {
  if (s.compare(at, word.size(), word) != 0) return false;
  const std::size_t end = at + word.size();
  return end == s.size() || !(std::isalnum(static_cast<unsigned char>(s[end])) || s[end] == '_');
}

// "error..." or "<prefix>error..." at `at`.
bool error_at(const std::string& s, std::size_t at, const std::string& prefix) {
  return word_at(s, at, "error") || (s.compare(at, prefix.size(), prefix) == 0 && word_at(s, at + prefix.size(), "error"));
}

Diagnostic diagnostic(const std::string& s, std::size_t file_end, std::size_t line_begin, std::size_t line_end, std::size_t message) {
  return {s.substr(0, file_end), static_cast<int>(std::strtol(s.substr(line_begin, line_end - line_begin).c_str(), nullptr, 10)),
          message < s.size() ? s.substr(message) : std::string()};
}

// The first "<file><sep><line>" in s after which `rest(line_end)` finds the message (its start, or npos
// where the line does not match).
template <typename Rest>
bool first_match(const std::string& s, char sep, Rest rest, Diagnostic* out) {
  for (std::size_t i = 1; i < s.size(); ++i) {
    const std::size_t line_end = line_number_end(s, i, sep);
    if (line_end == std::string::npos) continue;
    const std::size_t message = rest(line_end);
    if (message == std::string::npos) continue;
    *out = diagnostic(s, i, i + 1, line_end, message);
    return true;
  }
  return false;
}

// gcc and clang: ^(.+?):(\d+)(?::\d+)?: ((?:fatal )?error\b.*)$
bool gcc_error(const std::string& s, Diagnostic* out) {
  return first_match(s, ':', [&](std::size_t line_end) {
    const std::size_t col_end = line_end < s.size() && s[line_end] == ':' ? digits_end(s, line_end + 1) : line_end + 1;
    for (const std::size_t at : {col_end > line_end + 1 ? col_end : std::string::npos, line_end})
      if (at != std::string::npos && s.compare(at, 2, ": ") == 0 && error_at(s, at + 2, "fatal ")) return at + 2;
    return std::string::npos;
  }, out);
}

// nvcc's front ends: ^(.+?)\((\d+)\): ((?:catastrophic )?error\b.*)$
bool edg_error(const std::string& s, Diagnostic* out) {
  return first_match(s, '(', [&](std::size_t line_end) {
    return s.compare(line_end, 3, "): ") == 0 && error_at(s, line_end + 3, "catastrophic ") ? line_end + 3 : std::string::npos;
  }, out);
}

// gcc's notes that name where a macro was expanded or a template required:
// ^(.+?):(\d+):\d+:? +(?:note: in expansion of macro|required from)\b.*$
bool macro_context(const std::string& s, Diagnostic* out) {
  return first_match(s, ':', [&](std::size_t line_end) {
    if (line_end >= s.size()) return std::string::npos;
    std::size_t at = line_number_end(s, line_end, ':');  // the column
    if (at == std::string::npos) return std::string::npos;
    if (at < s.size() && s[at] == ':') ++at;
    const std::size_t blanks = at;
    while (at < s.size() && s[at] == ' ') ++at;
    if (at == blanks || !(word_at(s, at, "note: in expansion of macro") || word_at(s, at, "required from"))) return std::string::npos;
    return at;
  }, out);
}

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

const char* const kCudaInCppFiles = " holds CUDA code: list it in cuda_files (the host C++ compiler alone compiles cpp_files)";

// A CUDA header the host compiler could not find ("fatal error: cuda_runtime_api.h: No such file"): on a
// machine whose compiler does not search the toolkit's headers, CUDA code in cpp_files fails there first.
bool missing_cuda_header(const std::string& output) {
  for (const auto& line : text::split_lines(output)) {
    const std::size_t at = line.find("fatal error: ");
    if (at != std::string::npos && line.compare(at + 13, 4, "cuda") == 0 && line.find("No such file") != std::string::npos) return true;
  }
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
  if (cuda_word_in(output) || missing_cuda_header(output) || cause.find("the compiler ended with") == 0) {
    for (const auto& file : host_only_files(p))
      if (cuda_word_in(read_file(file)))
        return base_name(file) + kCudaInCppFiles;
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

std::string first_error(const std::string& log, const plan::Plan& p, const std::string& scratch) {
  const auto lines = text::split_lines(log);
  const auto absolute = [&](const std::string& file) { return file[0] == '/' ? file : scratch + "/" + file; };
  std::vector<std::size_t> errors;
  std::vector<Diagnostic> found;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("nvcc fatal", 0) == 0) return lines[i];  // nvcc refused the command itself (an arch, a flag)
    Diagnostic d;
    if (gcc_error(lines[i], &d) || edg_error(lines[i], &d)) errors.push_back(i), found.push_back(d);
  }
  std::string wrapper, outside, any;
  for (std::size_t k = 0; k < errors.size(); ++k) {
    const Diagnostic& d = found[k];
    const std::string file = absolute(d.file);
    if (std::find(p.sources.begin(), p.sources.end(), file) != p.sources.end()) return lines[errors[k]];
    const plan::Plan::WrapperLine* w = wrapper_at(p, scratch, file, d.line);
    // The notes between the previous error and the next name the wrapper line it came from.
    for (std::size_t i = k == 0 ? 0 : errors[k - 1] + 1, end = k + 1 < errors.size() ? errors[k + 1] : lines.size(); !w && i < end; ++i) {
      Diagnostic c;
      if (macro_context(lines[i], &c)) w = wrapper_at(p, scratch, absolute(c.file), c.line);
    }
    if (w != nullptr && wrapper.empty()) wrapper = w->field + " '" + w->name + "' (" + w->expr + "): " + d.message;
    if (outside.empty() && file.rfind(scratch + "/", 0) != 0 && !deps::under_any(file, p.dep_exclude_prefixes)) outside = lines[errors[k]];
    if (any.empty()) any = lines[errors[k]];
  }
  return !wrapper.empty() ? wrapper : !outside.empty() ? outside : any;
}

bool blames_the_disk(const std::string& log) {
  return log.find("No space left on device") != std::string::npos || log.find("Disk quota exceeded") != std::string::npos;
}

std::string truncated(std::string text) {
  constexpr std::size_t kMax = 20000;
  if (text.size() > kMax) text = text.substr(0, kMax) + "\n[... compiler output truncated ...]\n";
  return text;
}

std::string generated_sources(const plan::Plan& p) {
  std::string out;
  if (p.has_cpp) out += "generated source: host.cc (the cpp_wrappers)\n" + p.cpp_source;
  if (p.has_cuda) out += "generated source: device.cu (the cuda_wrappers)\n" + p.cuda_source;
  return out;
}

std::string leading_cause(const std::string& output, const plan::Plan& p, const std::string& cause) {
  const std::string mistake = likely_mistake(output, p, cause);
  if (mistake.empty()) return cause;
  const bool cuda_in_cpp_files = mistake.find(kCudaInCppFiles) != std::string::npos;
  const bool no_error_line = cause.empty() || cause.rfind("the compiler ended with", 0) == 0;
  return cuda_in_cpp_files || no_error_line ? mistake : cause + " (" + mistake + ")";
}

}  // namespace jitkern::compile_errors
