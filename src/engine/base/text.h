// Small text helpers shared by the engine's parsers.
#pragma once

#include <string>
#include <vector>

namespace jitkern::text {

// Lines without their '\n'; a final line without '\n' is kept.
std::vector<std::string> split_lines(const std::string& text);
// The fields of `s` between `sep`s, empty ones included ("a::b" -> a, "", b; "" -> one empty field).
std::vector<std::string> split(const std::string& s, char sep);
// [A-Za-z_][A-Za-z0-9_]*
bool is_identifier(const std::string& s);
// A compiler's output cut for a message: its first two lines that say "error", else its first `lines`
// lines ("no output" for none).
std::string error_lines(const std::string& output, int lines = 3);
// The preprocessor line that includes the file at `path`: #include "path", or #include <path> where the
// path holds a double quote (neither form can hold a newline, nor both '"' and '>': then "").
std::string include_line(const std::string& path);
// `text` without any occurrence of `part`.
std::string erase_all(std::string text, const std::string& part);
// A file-name-safe, bounded spelling of `s`.
std::string sanitize(const std::string& s);

}  // namespace jitkern::text
