#include "plan/command_line.h"

#include <sys/stat.h>

#include <cctype>
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

// The caller's directory, and the request field whose relative paths need it (named where it cannot be read).
struct Cwd {
  const fs::WorkingDir& dir;
  const char* field;
};

std::string absolute(const std::string& path, const Cwd& cwd) { return cwd.dir.absolute(path, cwd.field); }

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
  bool attached;     // "-Idir" (else only "=value" or the next argument)
  bool header_dirs;  // names directories headers are searched in
};
const PathFlag kPathFlags[] = {
    {"-I", true, true},           {"-L", true, false},           {"-isystem", true, true},        {"-iquote", true, true},
    {"-idirafter", true, true},   {"-include", false, false},    {"-imacros", false, false},      {"--include-path", false, true},
    {"--system-include", false, true}, {"--pre-include", false, false}, {"--library-path", false, false},
};

// The linker's options (inside -Wl, or -Xlinker) that take a value, and what the value is: GNU ld's, and
// gold's and lld's that gcc users pass. A long name is spelled "--name=v", "-name=v", "--name v" or
// "-name v", or by any abbreviation that is no other long name's (ld's getopt_long_only: "--version-scr=v");
// a name of one letter also "-nv" when no long name begins with "nv" ("-Tb" is -Tbss; every "-l..." is -l).
// An option whose value is optional ("--build-id[=style]") takes it only after '=', so it is not here: an
// unknown "--name=v" passes as it is. A name that begins another here is here too (--export-dynamic is no
// abbreviation of --export-dynamic-symbol).
enum class LinkerValue {
  kFile,       // a file ld reads: made absolute, and a dependency (its --trace does not list it)
  kScript,     // a linker script: a kFile, refused if it INCLUDEs another (which would be no dependency)
  kDirectory,  // a directory: made absolute
  kOther,      // a name, a number, an address, or a file ld writes (relative: in the step's own directory)
  kNone,       // no value: a long name ld matches before the one-letter option it begins with (-cref is no -c)
  kUntracked,  // refused: what it makes ld read or run no key covers (`why`)
};
struct LinkerOption {
  const char* name;
  LinkerValue value;
  const char* why = nullptr;  // kUntracked: what the refusal says
  // GNU ld (2.40) silently reads the one-dash spelling as its one-letter option with the rest as the value
  // (-omagic is -o magic: the output; -call-graph-ordering-file=F is -c, an MRI script; -export-dynamic-symbol=f is
  // -e, the entry) where lld and gold read the long name: refused with one dash, as what is read depends on the
  // linker. (-mllvm, -max-cache-size, -mri-script are not: ld stops at the emulation "llvm"...)
  bool one_dash_is_short = false;
};
const LinkerOption kLinkerOptions[] = {
    // files the linker reads: dependencies its --trace does not list
    {"version-script", LinkerValue::kFile}, {"dynamic-list", LinkerValue::kFile}, {"script", LinkerValue::kScript},
    {"T", LinkerValue::kScript}, {"default-script", LinkerValue::kScript}, {"dT", LinkerValue::kScript},
    {"retain-symbols-file", LinkerValue::kFile}, {"just-symbols", LinkerValue::kFile},
    {"export-dynamic-symbol-list", LinkerValue::kFile, nullptr, true},
    {"mri-script", LinkerValue::kScript}, {"c", LinkerValue::kScript}, {"section-ordering-file", LinkerValue::kFile},
    {"symbol-ordering-file", LinkerValue::kFile}, {"call-graph-ordering-file", LinkerValue::kFile, nullptr, true},
    {"remap-inputs-file", LinkerValue::kFile},
    {"L", LinkerValue::kDirectory}, {"library-path", LinkerValue::kDirectory},
    {"R", LinkerValue::kDirectory},  // -R dir is -rpath dir; -R file (ld reads its symbols) is refused: --just-symbols is tracked
    // addresses (-Ttext=0x1000 is no script named "text=0x1000"), names and the module's own settings
    {"Ttext", LinkerValue::kOther}, {"Tbss", LinkerValue::kOther}, {"Tdata", LinkerValue::kOther}, {"Ttext-segment", LinkerValue::kOther},
    {"Trodata-segment", LinkerValue::kOther}, {"Tldata-segment", LinkerValue::kOther}, {"section-start", LinkerValue::kOther},
    {"image-base", LinkerValue::kOther}, {"rpath", LinkerValue::kOther}, {"rpath-link", LinkerValue::kOther},
    {"soname", LinkerValue::kOther}, {"h", LinkerValue::kOther}, {"z", LinkerValue::kOther}, {"entry", LinkerValue::kOther},
    {"e", LinkerValue::kOther}, {"undefined", LinkerValue::kOther}, {"u", LinkerValue::kOther}, {"m", LinkerValue::kOther},
    {"trace-symbol", LinkerValue::kOther}, {"y", LinkerValue::kOther}, {"wrap", LinkerValue::kOther}, {"defsym", LinkerValue::kOther},
    {"exclude-libs", LinkerValue::kOther}, {"hash-style", LinkerValue::kOther}, {"sort-section", LinkerValue::kOther},
    {"dynamic-linker", LinkerValue::kOther}, {"I", LinkerValue::kOther}, {"O", LinkerValue::kOther}, {"l", LinkerValue::kOther},
    {"library", LinkerValue::kOther}, {"init", LinkerValue::kOther}, {"fini", LinkerValue::kOther},
    {"require-defined", LinkerValue::kOther}, {"undefined-glob", LinkerValue::kOther}, {"export-dynamic-symbol", LinkerValue::kOther, nullptr, true},
    {"ignore-unresolved-symbol", LinkerValue::kOther}, {"version-exports-section", LinkerValue::kOther}, {"task-link", LinkerValue::kOther},
    {"auxiliary", LinkerValue::kOther}, {"f", LinkerValue::kOther}, {"filter", LinkerValue::kOther}, {"F", LinkerValue::kOther},
    {"audit", LinkerValue::kOther}, {"depaudit", LinkerValue::kOther}, {"P", LinkerValue::kOther},
    {"architecture", LinkerValue::kOther}, {"A", LinkerValue::kOther}, {"format", LinkerValue::kOther}, {"b", LinkerValue::kOther},
    {"oformat", LinkerValue::kOther, nullptr, true}, {"orphan-handling", LinkerValue::kOther}, {"spare-dynamic-tags", LinkerValue::kOther},
    {"max-cache-size", LinkerValue::kOther}, {"ctf-share-types", LinkerValue::kOther}, {"target2", LinkerValue::kOther},
    {"exclude-modules-for-implib", LinkerValue::kOther, nullptr, true}, {"plugin-opt", LinkerValue::kOther}, {"icf-iterations", LinkerValue::kOther},
    {"thread-count", LinkerValue::kOther}, {"mllvm", LinkerValue::kOther}, {"icf", LinkerValue::kOther},
    {"compress-debug-sections", LinkerValue::kOther},  // none, zlib, zstd...: a required value in bfd and gold
    // files ld writes: as given
    {"Map", LinkerValue::kOther}, {"dependency-file", LinkerValue::kOther}, {"out-implib", LinkerValue::kOther},
    {"output-def", LinkerValue::kOther, nullptr, true},
    // long names without a value that begin with a one-letter option ld reads files for
    {"cref", LinkerValue::kNone}, {"call_shared", LinkerValue::kNone}, {"check-sections", LinkerValue::kNone},
    {"copy-dt-needed-entries", LinkerValue::kNone}, {"ctf-variables", LinkerValue::kNone}, {"omagic", LinkerValue::kNone, nullptr, true},
    // ld's (gold's, lld's) own names that begin longer ones here: whole names, not abbreviations
    {"export-dynamic", LinkerValue::kNone}, {"trace", LinkerValue::kNone}, {"version", LinkerValue::kNone}, {"dy", LinkerValue::kNone},
    // what no key covers
    {"plugin", LinkerValue::kUntracked, "which loads code into the linker that no key covers"},
    {"sysroot", LinkerValue::kUntracked, "which changes where the linker's libraries come from, which no key covers; use a compiler configured for that root"},
    {"Y", LinkerValue::kUntracked, "which replaces the linker's default library path, which no key covers; give -L"},
    {"error-handling-script", LinkerValue::kUntracked, "which runs a program of its own when the link fails, which no key covers"},
    {"output", LinkerValue::kUntracked, "which names the output, which the engine chooses"},
    {"o", LinkerValue::kUntracked, "which names the output, which the engine chooses"},
};

// One argument the linker gets, the flag of its run it came in, and that flag as messages name it.
struct LinkerArg {
  std::string text;
  std::size_t flag;
  std::string named;  // "-Wl,a,b" or "-Xlinker a"
};

// A linker script (`flag` names it) that INCLUDEs another file is refused: ld's --trace lists neither, and the
// engine does not follow the include, so the other file would be no dependency. An unreadable one is ld's to report.
void check_script(const std::string& path, const char* field, const std::string& flag) {
  std::string text;
  if (!fs::read_file(path, &text)) return;
  for (std::size_t c = text.find("/*"); c != std::string::npos; c = text.find("/*", c)) {  // ld's comments, as blanks
    const std::size_t end = text.find("*/", c + 2);
    text.replace(c, (end == std::string::npos ? text.size() : end + 2) - c, " ");
  }
  const auto word = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || std::strchr("_.$/\\~-", ch) != nullptr; };
  for (std::size_t at = text.find("INCLUDE"); at != std::string::npos; at = text.find("INCLUDE", at + 1))
    if ((at == 0 || !word(text[at - 1])) && (at + 7 >= text.size() || !word(text[at + 7])))
      refuse(field, flag, "names the linker script " + path + ", which INCLUDEs another file the engine does not track; put its contents in the script itself");
}

// The run of linker flags from flags[*i] (-Wl,a,b and -Xlinker a, mixed): their arguments in order, as the
// driver passes them to ld, so an option at the end of one flag takes its value from the next (libtool's
// "-Wl,-rpath -Wl,/dir"). *i ends at the run's last flag; `xlinker` gets, per flag, whether it is -Xlinker.
std::vector<LinkerArg> linker_run(const std::vector<std::string>& flags, std::size_t* i, const char* field, std::vector<bool>* xlinker) {
  std::vector<LinkerArg> args;
  for (LinkerFlag kind; *i < flags.size() && (kind = linker_flag(flags[*i])) != LinkerFlag::kNone; ++*i) {
    const std::size_t n = xlinker->size();
    const std::string f = flags[*i];
    xlinker->push_back(kind != LinkerFlag::kComma);
    if (kind == LinkerFlag::kNext) {
      if (*i + 1 >= flags.size()) refuse(field, f, "needs an argument after it");
      ++*i;
      args.push_back({flags[*i], n, f + " " + flags[*i]});
    } else if (kind == LinkerFlag::kAttached) {
      args.push_back({f.substr(f.find('=') + 1), n, f});
    } else {
      for (const auto& a : text::split(f.substr(4), ',')) args.push_back({a, n, f});
    }
  }
  --*i;  // the caller's loop steps past the run's last flag
  return args;
}

// A run's arguments, classified by kLinkerOptions: option files and directories made absolute against
// `cwd` (files also added to `files`). Refuses the linker's response files, an option without its value,
// kUntracked options, -R with a file (ld reads its symbols) and an argument that is no known option's
// value (a file the engine cannot tell how the linker reads).
void linker_arguments(std::vector<LinkerArg>& args, const char* field, const Cwd& cwd, std::vector<std::string>* files) {
  const auto resolved = [&](const LinkerOption& o, const std::string& value, const std::string& flag) {
    if (o.value == LinkerValue::kOther) return value;
    const std::string path = absolute(value, cwd);
    struct stat st;
    if (std::string(o.name) == "R" && (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)))
      refuse(field, flag, "gives the linker -R with '" + value + "', which is no directory (ld would read its symbols): use --just-symbols= for a file, -rpath for a directory");
    if (o.value == LinkerValue::kScript) check_script(path, field, flag);
    if (o.value != LinkerValue::kDirectory && files != nullptr) files->push_back(path);
    return path;
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string& a = args[i].text;
    const std::string& flag = args[i].named;
    if (!a.empty() && a[0] == '@') refuse(field, flag, "gives the linker a response file, which the engine cannot track; give its options in extra_ldflags");
    if (a.size() < 2 || a[0] != '-') {
      const std::string& before = i > 0 ? args[i - 1].text : "";
      refuse(field, flag, "gives the linker '" + a + "'" + (before.size() > 1 && before[0] == '-' ? " after " + before : "") +
                              ", which is no option's value the engine knows, so it cannot tell whether or how the " +
                              "linker reads it: give a link input as an argument of its own (not inside -Wl), and a linker option's file with '='");
    }
    const std::size_t dashes = a[1] == '-' ? 2 : 1;
    const std::string body = a.substr(dashes);
    const std::string name = body.substr(0, body.find('='));
    if (dashes == 1 && body[0] == 'l') continue;  // ld reads every "-l..." as -l and a library name, before any other rule
    const LinkerOption* match = nullptr;
    std::size_t spelled = 0;  // how much of `a` names the option
    std::string value;
    bool value_next = false;
    for (const LinkerOption& o : kLinkerOptions) {  // whole names first: -Ttext=... is not -T with "text=..."
      const std::string n = o.name;
      if (body == n) match = &o, value_next = true;
      else if (starts(body, (n + "=").c_str())) match = &o, value = body.substr(n.size() + 1);
      if (match != nullptr) break;
    }
    if (match == nullptr && name.size() > 1) {  // ld's abbreviation of a long name, before a short one's attached value
      std::string several;
      for (const LinkerOption& o : kLinkerOptions) {
        if (std::strlen(o.name) <= name.size() || !starts(o.name, name.c_str())) continue;
        several += std::string(several.empty() ? "" : ", ") + "--" + o.name;
        match = match == nullptr ? &o : match;
      }
      if (several.find(',') != std::string::npos)
        refuse(field, flag, "gives the linker " + a.substr(0, dashes + name.size()) + ", which abbreviates several of its options (" + several +
                                "), so ld refuses it too: spell the option out");
      if (match != nullptr) value_next = name.size() == body.size(), value = value_next ? "" : body.substr(name.size() + 1), spelled = dashes + name.size();
    }
    if (match == nullptr && dashes == 1)  // "-Tfile", "-Ldir": a short name with its value attached
      for (const LinkerOption& o : kLinkerOptions) {
        const std::string n = o.name;
        if (n.size() == 1 && body.size() > 1 && starts(body, n.c_str())) {
          match = &o, value = body.substr(n.size());
          break;
        }
      }
    const auto gives = [&] { return "gives the linker " + a.substr(0, spelled != 0 ? spelled : dashes + std::strlen(match->name)); };
    if (match != nullptr && dashes == 1 && match->one_dash_is_short)
      refuse(field, flag, gives() + ", which GNU ld reads as -" + std::string(1, match->name[0]) + " with '" + a.substr(2) +
                              "' and other linkers as --" + match->name + ": spell it with two dashes");
    if (match == nullptr || match->value == LinkerValue::kNone) continue;  // an option without a value (-O1, --as-needed, ...)
    if (match->value == LinkerValue::kUntracked) refuse(field, flag, gives() + ", " + match->why);
    const std::string prefix = a.substr(0, a.size() - value.size());
    if (!value_next) {
      a = prefix + resolved(*match, value, flag);
      continue;
    }
    if (i + 1 >= args.size()) refuse(field, flag, "ends with the linker's " + a + ", which needs its value after it");
    args[i + 1].text = resolved(*match, args[i + 1].text, args[i + 1].named);
    ++i;
  }
}

std::vector<std::string> read_response(const std::string& file, const char* field, const std::string& flag, const Cwd& cwd) {
  std::string text;
  if (!fs::read_file(absolute(file, cwd), &text)) refuse(field, flag, "names a file that cannot be read (" + absolute(file, cwd) + ")");
  return split_response_file(text);
}

class Resolver {
 public:
  Resolver(const char* field, Tool tool, const fs::WorkingDir& cwd) : m_field(field), m_tool(tool), m_cwd{cwd, field} {}

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
      if (m_tool == Tool::kLink && linker_flag(f) != LinkerFlag::kNone) {
        linker(flags, &i);
        continue;
      }
      check_tracked(f, m_field);
      if (path_flag(flags, &i)) continue;
      if (m_tool == Tool::kLink && starts(f, "-T")) {  // a linker script
        if (f.size() == 2 && i + 1 >= flags.size()) refuse(m_field, f, "needs a file after it");
        m_out.push_back(f.size() == 2 ? "-T" : "-T" + absolute(f.substr(2), m_cwd));
        if (f.size() == 2) m_out.push_back(absolute(flags[++i], m_cwd));
        check_script(f.size() == 2 ? m_out.back() : m_out.back().substr(2), m_field, f);
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
    for (const PathFlag& p : kPathFlags)
      if (p.attached && starts(part, p.spelling) && part.size() > std::strlen(p.spelling))
        return p.spelling + absolute(part.substr(std::strlen(p.spelling)), m_cwd);
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

  // A run of linker flags (linker_run), classified as one stream and written back in each flag's own spelling
  // (--for-linker as -Xlinker; a -Wl flag one of whose arguments now has a comma, from the cwd, as -Xlinker each).
  void linker(const std::vector<std::string>& flags, std::size_t* i) {
    std::vector<bool> xlinker;
    std::vector<LinkerArg> args = linker_run(flags, i, m_field, &xlinker);
    linker_arguments(args, m_field, m_cwd, nullptr);
    for (std::size_t n = 0; n < xlinker.size(); ++n) {
      bool separate = xlinker[n];
      for (const LinkerArg& a : args) separate = separate || (a.flag == n && a.text.find(',') != std::string::npos);
      std::string joined = "-Wl";
      for (const LinkerArg& a : args)
        if (a.flag != n) continue;
        else if (separate) m_out.insert(m_out.end(), {"-Xlinker", a.text});
        else joined += "," + a.text;
      if (!separate) m_out.push_back(joined);
    }
  }

  const char* m_field;
  Tool m_tool;
  Cwd m_cwd;
  std::vector<std::string> m_out;
};

}  // namespace

LinkerFlag linker_flag(const std::string& flag) {
  if (starts(flag, "-Wl,")) return LinkerFlag::kComma;
  if (flag == "-Xlinker" || flag == "--for-linker") return LinkerFlag::kNext;  // GCC's driver: --for-linker is -Xlinker
  return starts(flag, "--for-linker=") ? LinkerFlag::kAttached : LinkerFlag::kNone;
}

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

std::vector<std::string> resolve(const std::vector<std::string>& flags, const char* field, Tool tool, const fs::WorkingDir& cwd) {
  Resolver r(field, tool, cwd);
  r.add(flags, 0);
  return r.take();
}

std::vector<std::string> header_directories(const std::vector<std::string>& argv) {
  std::vector<std::string> dirs;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-Xcompiler" && i + 1 < argv.size()) {  // its value's parts, as resolve() wrote them
      for (const auto& d : header_directories(text::split(argv[++i], ','))) dirs.push_back(d);
      continue;
    }
    for (const PathFlag& p : kPathFlags) {
      const std::string s = p.spelling;
      if (!p.header_dirs || !starts(a, p.spelling)) continue;
      if (a == s && i + 1 < argv.size()) dirs.push_back(argv[++i]);
      else if (a.size() > s.size() && a[s.size()] == '=')
        for (const auto& d : text::split(a.substr(s.size() + 1), ',')) dirs.push_back(d);
      else if (p.attached && a.size() > s.size()) dirs.push_back(a.substr(s.size()));
      else continue;
      break;
    }
  }
  return dirs;
}

std::vector<std::string> linker_option_files(const std::vector<std::string>& ldflags) {
  std::vector<std::string> files;
  const fs::WorkingDir root("/");  // resolved flags: their paths are absolute
  const Cwd cwd{root, "extra_ldflags"};
  for (std::size_t i = 0; i < ldflags.size(); ++i) {
    if (linker_flag(ldflags[i]) != LinkerFlag::kNone) {
      std::vector<bool> xlinker;
      std::vector<LinkerArg> args = linker_run(ldflags, &i, "extra_ldflags", &xlinker);
      linker_arguments(args, "extra_ldflags", cwd, &files);
    } else if (ldflags[i] == "-T" && i + 1 < ldflags.size()) {
      files.push_back(ldflags[++i]);
    } else if (starts(ldflags[i], "-T") && ldflags[i].size() > 2) {
      files.push_back(ldflags[i].substr(2));
    }
  }
  return files;
}

}  // namespace jitkern::command_line
