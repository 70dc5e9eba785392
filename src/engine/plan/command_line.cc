#include "plan/command_line.h"

#include <cstring>
#include <stdexcept>

#include "base/fs_util.h"
#include "base/text.h"

namespace jitkern::command_line {
namespace {

constexpr int kMaxResponseDepth = 8;  // @files naming @files: deeper is a loop

[[noreturn]] void refuse(const char* field, const std::string& flag, const std::string& why) {
  throw std::invalid_argument(std::string("jitkern: ") + field + ": '" + flag + "' " + why);
}

bool starts(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::string absolute(const std::string& path, const std::string& cwd) {
  return path.empty() || path[0] == '/' ? path : cwd + "/" + path;
}

// Flags whose inputs no dependency list shows: what they change is outside anything the engine can hash.
struct Untracked {
  const char* prefix;
  bool exact;  // the whole flag, not a prefix of it
  const char* why;
};
const Untracked kUntracked[] = {
    {"-specs", false, "reads a specs file whose rules the engine cannot track; give the options themselves"},
    {"--specs", false, "reads a specs file whose rules the engine cannot track; give the options themselves"},
    {"--sysroot", false, "changes where the compiler's own headers and libraries come from, which its version does not cover; use a compiler configured for that root"},
    {"-isysroot", false, "changes where the system's headers come from, which no key covers; use a compiler configured for that root"},
    {"-iprefix", false, "makes later flags' paths relative to a prefix the engine cannot resolve; give -I with absolute paths"},
    {"-iwithprefix", false, "names a path relative to -iprefix, which the engine cannot resolve; give -I with absolute paths"},
    {"-fplugin", false, "loads a compiler plugin, which no key covers"},
    {"-fprofile-use", false, "reads profile data the engine cannot track"},
    {"-fprofile-sample-use", false, "reads profile data the engine cannot track"},
    {"-fauto-profile", false, "reads profile data the engine cannot track"},
    {"-wrapper", true, "runs the compiler's programs under another program, which no key covers"},
    {"-ccbin", true, "picks nvcc's host compiler, which the engine sets itself (CXX)"},
    {"--compiler-bindir", false, "picks nvcc's host compiler, which the engine sets itself (CXX)"},
    {"-o", true, "names the output, which the engine chooses"},
};

void check_tracked(const std::string& flag, const char* field) {
  // -B<prefix> (not the linker's -Bstatic, -Bdynamic, -Bsymbolic...): the compiler's own programs from elsewhere.
  if (starts(flag, "-B") && !starts(flag, "-Bstatic") && !starts(flag, "-Bdynamic") && !starts(flag, "-Bsymbolic"))
    refuse(field, flag, "points the compiler at other programs of its own, which no key covers; put them in the compiler's installation or set CXX");
  for (const Untracked& u : kUntracked)
    if (u.exact ? flag == u.prefix : starts(flag, u.prefix)) refuse(field, flag, u.why);
}

// Separate or attached path values, per spelling ("-I dir", "-Idir", "--include-path=dir").
struct PathFlag {
  const char* spelling;
  bool attached;  // "-Idir" (else only "=value" or the next argument)
};
const PathFlag kPathFlags[] = {
    {"-I", true},          {"-L", true},           {"-isystem", true},      {"-iquote", true},     {"-idirafter", true},
    {"-include", false},   {"-imacros", false},    {"--include-path", false}, {"--system-include", false},
    {"--pre-include", false}, {"--library-path", false},
};

// Linker options (inside -Wl, or after -Xlinker) naming a file the linker reads.
const char* const kLinkerFileOptions[] = {"--version-script", "--dynamic-list", "--script", "-T", "--retain-symbols-file",
                                          "--just-symbols"};

std::vector<std::string> read_response(const std::string& file, const char* field, const std::string& flag, const std::string& cwd) {
  std::string text;
  if (!fs::read_file(absolute(file, cwd), &text)) refuse(field, flag, "names a file that cannot be read (" + absolute(file, cwd) + ")");
  return split_response_file(text);
}

class Resolver {
 public:
  Resolver(const char* field, Tool tool, const std::string& cwd) : m_field(field), m_tool(tool), m_cwd(cwd) {}

  void add(const std::vector<std::string>& flags, int depth) {
    if (depth > kMaxResponseDepth) refuse(m_field, flags.empty() ? "@" : flags.front(), "nests response files too deeply (a loop?)");
    for (std::size_t i = 0; i < flags.size(); ++i) {
      const std::string& f = flags[i];
      if (f.size() > 1 && f[0] == '@') {  // GCC's (and the linker driver's) response file
        add(read_response(f.substr(1), m_field, f, m_cwd), depth + 1);
        continue;
      }
      if (m_tool == Tool::kNvcc && (f == "--options-file" || f == "-optf" || starts(f, "--options-file=") || starts(f, "-optf="))) {
        const std::size_t eq = f.find('=');
        if (eq == std::string::npos && i + 1 >= flags.size()) refuse(m_field, f, "needs a file name after it");
        for (const auto& file : text::split(eq != std::string::npos ? f.substr(eq + 1) : flags[++i], ','))
          if (!file.empty()) add(read_response(file, m_field, f, m_cwd), depth + 1);
        continue;
      }
      if (m_tool == Tool::kNvcc && (f == "-Xcompiler" || f == "--compiler-options" || starts(f, "--compiler-options=") || starts(f, "-Xcompiler="))) {
        const std::size_t eq = f.find('=');
        if (eq == std::string::npos && i + 1 >= flags.size()) {
          m_out.push_back(f);
          continue;
        }
        const std::string value = eq != std::string::npos ? f.substr(eq + 1) : flags[++i];
        std::string joined;
        for (const auto& part : text::split(value, ',')) joined += (joined.empty() ? "" : ",") + host_value(part);
        m_out.insert(m_out.end(), {"-Xcompiler", joined});
        continue;
      }
      if (m_tool == Tool::kLink && (starts(f, "-Wl,") || f == "-Xlinker")) {
        linker(f, flags, &i);
        continue;
      }
      check_tracked(f, m_field);
      if (path_flag(flags, &i)) continue;
      if (m_tool == Tool::kLink && starts(f, "-T")) {  // a linker script
        if (f.size() == 2 && i + 1 >= flags.size()) refuse(m_field, f, "needs a file after it");
        m_out.push_back(f.size() == 2 ? "-T" : "-T" + absolute(f.substr(2), m_cwd));
        if (f.size() == 2) m_out.push_back(absolute(flags[++i], m_cwd));
        continue;
      }
      // A link's positional argument is an input (an archive, an object, a library): from here.
      if (m_tool == Tool::kLink && !f.empty() && f[0] != '-') {
        m_out.push_back(absolute(f, m_cwd));
        continue;
      }
      m_out.push_back(f);
      if (m_tool == Tool::kLink && (f == "-l" || f == "-u" || f == "-z" || f == "-e") && i + 1 < flags.size()) m_out.push_back(flags[++i]);
    }
  }

  std::vector<std::string> take() { return std::move(m_out); }

 private:
  // One comma-separated part of an -Xcompiler value: attached paths made absolute.
  std::string host_value(const std::string& part) {
    check_tracked(part, m_field);
    for (const char* p : {"-I", "-L", "-isystem", "-iquote", "-idirafter"})
      if (starts(part, p) && part.size() > std::strlen(p)) return p + absolute(part.substr(std::strlen(p)), m_cwd);
    return part;
  }

  // A flag naming a path: the flag and its absolute value, in the flag's own spelling.
  bool path_flag(const std::vector<std::string>& flags, std::size_t* i) {
    const std::string& f = flags[*i];
    for (const PathFlag& p : kPathFlags) {
      const std::string s = p.spelling;
      if (!starts(f, p.spelling)) continue;
      if (f.size() == s.size()) {
        if (*i + 1 >= flags.size()) refuse(m_field, f, "needs a path after it");
        m_out.insert(m_out.end(), {f, absolute(flags[++*i], m_cwd)});
        return true;
      }
      if (f[s.size()] == '=') {
        std::string value;
        for (const auto& part : text::split(f.substr(s.size() + 1), ','))
          value += (value.empty() ? "" : ",") + absolute(part, m_cwd);
        m_out.push_back(s + "=" + value);
        return true;
      }
      if (p.attached) {
        m_out.push_back(s + absolute(f.substr(s.size()), m_cwd));
        return true;
      }
    }
    return false;
  }

  // -Wl,a,b,c and -Xlinker a: the linker's file-naming options made absolute; its own response files refused.
  void linker(const std::string& f, const std::vector<std::string>& flags, std::size_t* i) {
    std::vector<std::string> args;
    if (f == "-Xlinker") {
      if (*i + 1 >= flags.size()) refuse(m_field, f, "needs an argument after it");
      args.push_back(flags[++*i]);
    } else {
      args = text::split(f.substr(4), ',');
    }
    bool value_next = false;
    for (auto& a : args) {
      if (value_next) {
        a = absolute(a, m_cwd);
        value_next = false;
        continue;
      }
      if (!a.empty() && a[0] == '@') refuse(m_field, f, "gives the linker a response file, which the engine cannot track; give its options in extra_ldflags");
      for (const char* opt : kLinkerFileOptions) {
        const std::string o = opt;
        if (a == o) value_next = true;
        else if (starts(a, (o + "=").c_str())) a = o + "=" + absolute(a.substr(o.size() + 1), m_cwd);
      }
    }
    if (f == "-Xlinker") {
      m_out.insert(m_out.end(), {"-Xlinker", args[0]});
      if (value_next) {  // the option's value is the next -Xlinker's argument
        if (*i + 2 >= flags.size() || flags[*i + 1] != "-Xlinker") refuse(m_field, args[0], "needs its file in the next -Xlinker argument");
        m_out.insert(m_out.end(), {"-Xlinker", absolute(flags[*i + 2], m_cwd)});
        *i += 2;
      }
      return;
    }
    if (value_next) refuse(m_field, f, "ends with an option that needs a file after it");
    std::string joined = "-Wl";
    for (const auto& a : args) joined += "," + a;
    m_out.push_back(joined);
  }

  const char* m_field;
  Tool m_tool;
  std::string m_cwd;
  std::vector<std::string> m_out;
};

}  // namespace

std::vector<std::string> split_response_file(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      cur += text[++i], in_word = true;
    } else if (quote != 0) {
      if (c == quote) quote = 0;
      else cur += c;
    } else if (c == '\'' || c == '"') {
      quote = c, in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      if (in_word) out.push_back(cur), cur.clear(), in_word = false;
    } else {
      cur += c, in_word = true;
    }
  }
  if (in_word) out.push_back(cur);
  return out;
}

std::vector<std::string> resolve(const std::vector<std::string>& flags, const char* field, Tool tool, const std::string& cwd) {
  Resolver r(field, tool, cwd);
  r.add(flags, 0);
  return r.take();
}

std::vector<std::string> linker_option_files(const std::vector<std::string>& ldflags) {
  std::vector<std::string> files;
  std::vector<std::string> args;  // the linker's own arguments, in order
  for (std::size_t i = 0; i < ldflags.size(); ++i) {
    if (starts(ldflags[i], "-Wl,")) {
      for (const auto& a : text::split(ldflags[i].substr(4), ',')) args.push_back(a);
    } else if (ldflags[i] == "-Xlinker" && i + 1 < ldflags.size()) {
      args.push_back(ldflags[++i]);
    } else if (ldflags[i] == "-T" && i + 1 < ldflags.size()) {
      files.push_back(ldflags[++i]);
    } else if (starts(ldflags[i], "-T") && ldflags[i].size() > 2) {
      files.push_back(ldflags[i].substr(2));
    }
  }
  for (std::size_t i = 0; i < args.size(); ++i)
    for (const char* opt : kLinkerFileOptions) {
      const std::string o = opt;
      if (args[i] == o && i + 1 < args.size()) files.push_back(args[++i]);
      else if (starts(args[i], (o + "=").c_str())) files.push_back(args[i].substr(o.size() + 1));
    }
  return files;
}

}  // namespace jitkern::command_line
