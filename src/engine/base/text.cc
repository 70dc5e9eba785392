#include "base/text.h"

#include <algorithm>
#include <cctype>

namespace jitkern::text {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::string error_lines(const std::string& output, int lines) {
  std::string out, errors;
  int n = 0, e = 0;
  for (const auto& line : split_lines(output)) {
    if (n++ < lines) out += (out.empty() ? "" : "\n") + line;
    if (line.find("error") != std::string::npos && e++ < 2) errors += (errors.empty() ? "" : "\n") + line;
  }
  return !errors.empty() ? errors : out.empty() ? "no output" : out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  for (std::size_t start = 0;;) {
    const std::size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::string include_line(const std::string& path) {
  if (path.find('\n') != std::string::npos) return "";
  if (path.find('"') == std::string::npos) return "#include \"" + path + "\"\n";
  if (path.find('>') == std::string::npos) return "#include <" + path + ">\n";
  return "";
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.') ? c : '_';
  return out.substr(0, 80);
}

std::string erase_all(std::string text, const std::string& part) {
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at)) text.erase(at, part.size());
  return text;
}

}  // namespace jitkern::text
