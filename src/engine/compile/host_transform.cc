#include "compile/host_transform.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

namespace jitkern::host_transform {
namespace {

enum class Kind { kIdent, kNumber, kString, kPunct, kDirective, kEnd };

struct Token {
  Kind kind = Kind::kEnd;
  std::size_t begin = 0, end = 0;
  std::string_view text;
  bool is(std::string_view p) const { return (kind == Kind::kPunct || kind == Kind::kIdent) && text == p; }
};

bool ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$'; }
bool ident_char(char c) { return ident_start(c) || (c >= '0' && c <= '9'); }
bool digit(char c) { return c >= '0' && c <= '9'; }

// Punctuators of more than one character, longest first (">>" is split where templates close).
constexpr std::string_view kPuncts[] = {"<<<", "<<=", ">>=", "...", "->*", "<=>", "::", "->", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||",
                                   "++",  "--",  "+=",  "-=",  "*=",  "/=",  "%=", "&=", "|=", "^=", ".*", "##"};

// C++ tokens of preprocessed text, with the file and line each comes from (line markers).
class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}

  Token next() {
    Token t;
    for (;;) {
      if (i_ >= s_.size()) {
        t.kind = Kind::kEnd, t.begin = t.end = s_.size();
        return t;
      }
      const char c = s_[i_];
      if (c == '\n') {
        ++line_, ++i_, line_start_ = true;
      } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
        ++i_;
      } else {
        break;
      }
    }
    t.begin = i_;
    const char c = s_[i_];
    if (c == '#' && line_start_) {
      std::size_t e = s_.find('\n', i_);
      if (e == std::string_view::npos) e = s_.size();
      directive(s_.substr(i_, e - i_));
      i_ = e;
      t.kind = Kind::kDirective;
    } else if (ident_start(c)) {
      std::size_t e = i_ + 1;
      while (e < s_.size() && ident_char(s_[e])) ++e;
      const std::string_view word = s_.substr(i_, e - i_);
      if (e < s_.size() && (s_[e] == '"' || s_[e] == '\'') && is_literal_prefix(word)) {
        i_ = e;
        literal(word.back() == 'R' && s_[e] == '"');
        t.kind = Kind::kString;
      } else {
        i_ = e;
        t.kind = Kind::kIdent;
      }
    } else if (digit(c) || (c == '.' && i_ + 1 < s_.size() && digit(s_[i_ + 1]))) {
      std::size_t e = i_ + 1;
      while (e < s_.size()) {
        const char d = s_[e];
        if ((d == '+' || d == '-') && (s_[e - 1] == 'e' || s_[e - 1] == 'E' || s_[e - 1] == 'p' || s_[e - 1] == 'P')) ++e;
        else if (d == '\'' && e + 1 < s_.size() && ident_char(s_[e + 1])) e += 2;  // a digit separator
        else if (ident_char(d) || d == '.') ++e;
        else break;
      }
      i_ = e;
      t.kind = Kind::kNumber;
    } else if (c == '"' || c == '\'') {
      literal(false);
      t.kind = Kind::kString;
    } else {
      std::size_t len = 1;
      if (std::strchr("<>.-:=!&|+*/%^#", c) != nullptr && i_ + 1 < s_.size()) {
        for (const auto& p : kPuncts) {
          if (p[0] == c && s_.compare(i_, p.size(), p) == 0) {
            len = p.size();
            break;
          }
        }
      }
      i_ += len;
      t.kind = Kind::kPunct;
    }
    if (t.kind != Kind::kDirective) line_start_ = false;
    t.end = i_;
    t.text = s_.substr(t.begin, t.end - t.begin);
    return t;
  }

  const std::string& file() const { return file_; }
  long line() const { return line_; }
  bool file_changed() {
    const bool changed = file_changed_;
    file_changed_ = false;
    return changed;
  }

 private:
  static bool is_literal_prefix(std::string_view w) {
    return w == "L" || w == "u" || w == "U" || w == "u8" || w == "R" || w == "LR" || w == "uR" || w == "UR" || w == "u8R";
  }

  // A string or character literal at i_ (raw: R"delim( ... )delim"), with a user-defined suffix.
  void literal(bool raw) {
    const char quote = s_[i_];
    if (raw) {
      const std::size_t open = s_.find('(', i_);
      const std::string close = ")" + std::string(s_.substr(i_ + 1, open == std::string_view::npos ? 0 : open - i_ - 1)) + "\"";
      const std::size_t e = open == std::string_view::npos ? std::string_view::npos : s_.find(close, open);
      const std::size_t stop = e == std::string_view::npos ? s_.size() : e + close.size();
      for (std::size_t k = i_; k < stop; ++k) line_ += s_[k] == '\n';
      i_ = stop;
    } else {
      std::size_t e = i_ + 1;
      while (e < s_.size() && s_[e] != quote && s_[e] != '\n') e += s_[e] == '\\' ? 2 : 1;
      i_ = std::min(e + 1, s_.size());
    }
    while (i_ < s_.size() && ident_char(s_[i_])) ++i_;
  }

  // `# 123 "file" flags`: the next line is line 123 of file.
  void directive(std::string_view d) {
    std::size_t k = 1;
    while (k < d.size() && d[k] == ' ') ++k;
    if (k >= d.size() || !digit(d[k])) return;
    line_ = std::strtol(std::string(d.substr(k, 12)).c_str(), nullptr, 10) - 1;
    const std::size_t q = d.find('"', k);
    if (q == std::string_view::npos) return;
    std::string name;
    for (std::size_t j = q + 1; j < d.size() && d[j] != '"'; ++j) name += d[j] == '\\' && j + 1 < d.size() ? d[++j] : d[j];
    if (name != file_) file_ = std::move(name), file_changed_ = true;
  }

  std::string_view s_;
  std::size_t i_ = 0;
  long line_ = 1;
  bool line_start_ = true;
  std::string file_;
  bool file_changed_ = false;
};

const std::unordered_set<std::string_view>& routed_set() {
  static const std::unordered_set<std::string_view> names = [] {
    std::unordered_set<std::string_view> s;
    for (const auto& n : routed_functions()) s.insert(n);
    return s;
  }();
  return names;
}

// What user code (outside the toolkit's headers) may not use: cudafe++'s registration makes these work
// with a kernel or a __device__ variable's host address; jitkern's launch layer has no mapping for them.
const std::unordered_set<std::string_view> kNeedsRegistration = {
    "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol", "cudaMemcpyToSymbolAsync", "cudaMemcpyFromSymbolAsync", "cudaGetSymbolAddress",
    "cudaGetSymbolSize", "cudaGetFuncBySymbol", "cudaGraphAddMemcpyNodeToSymbol", "cudaGraphAddMemcpyNodeFromSymbol",
    "cudaGraphMemcpyNodeSetParamsToSymbol", "cudaGraphMemcpyNodeSetParamsFromSymbol", "cudaGraphExecMemcpyNodeSetParamsToSymbol",
    "cudaGraphExecMemcpyNodeSetParamsFromSymbol", "cudaGraphAddKernelNode", "cudaGraphKernelNodeSetParams",
    "cudaGraphExecKernelNodeSetParams", "cudaGraphAddNode", "cudaGraphNodeSetParams", "cudaGraphExecNodeSetParams",
    "cudaKernelNodeParams", "cudaKernelNodeParamsV2", "cudaLaunchParams", "cudaLaunchCooperativeKernelMultiDevice"};
// Anywhere: the per-thread-stream spellings of the routed launches would bypass the routing.
const std::unordered_set<std::string_view> kBypassesRouting = {"cudaLaunchKernel_ptsz", "cudaLaunchKernelExC_ptsz",
                                                               "cudaLaunchCooperativeKernel_ptsz"};
// CUDA's attributes in the host preprocessor's spelling (crt/host_defines.h): not the host compiler's.
const std::unordered_set<std::string_view> kCudaAttributes = {
    "global",        "device",         "host",         "shared",         "constant",       "managed",
    "launch_bounds", "grid_constant",  "maxnreg",      "local_maxnreg",  "cluster_dims",   "cudart_builtin",
    "device_builtin", "device_builtin_texture_type", "device_builtin_surface_type", "nv_pure", "tile_global", "tile",
    "tile_builtin",  "nv_register_params"};

struct Edit {
  std::size_t begin, end;
  std::string text;
};

// The declaration being read at namespace or class scope: what decides what a `{` opens.
struct Segment {
  int depth = 0;                      // ( and [ nesting
  std::vector<std::string_view> top;  // its tokens at depth 0 (parentheses as "(" ")")
  std::string_view prev, prev2;       // the last two tokens read
  bool device = false, global = false, host = false;
  bool constexpr_ = false, static_ = false, inline_ = false, templ = false;
  bool deduced = false;      // `auto` or decltype(auto) before the declarator's parameters
  bool trailing = false;     // a trailing return type
  bool equal = false;        // `=` at depth 0: an initializer (or = default/delete)
  bool params = false;       // a parenthesis at depth 0 that is not decltype's, alignas's, noexcept's...
  bool params_closed = false;
  bool mem_init = false;     // after a constructor's `:`
  bool class_key = false;
  std::size_t begin = std::string_view::npos;  // its first token
};

enum class ScopeKind { kNamespace, kClass };

class Rewriter {
 public:
  Rewriter(std::string_view text, const std::vector<std::string>& toolkit_dirs) : s_(text), lx_(text), toolkit_dirs_(toolkit_dirs) {}

  Result run() {
    Result r;
    advance();
    while (!refused_ && tok_.kind != Kind::kEnd) step();
    if (!refused_ && !scopes_.empty()) refuse("the unit ends inside a namespace or class body (unbalanced braces)");
    if (refused_) {
      r.why = why_;
      return r;
    }
    r.ok = true, r.kernels = kernels_, r.emptied = emptied_;
    std::size_t at = 0;
    r.text.reserve(s_.size());
    for (const auto& e : edits_) {
      r.text.append(s_.substr(at, e.begin - at));
      r.text += e.text;
      at = e.end;
    }
    r.text.append(s_.substr(at));
    return r;
  }

 private:
  void refuse(const std::string& why) {
    if (refused_) return;
    refused_ = true;
    why_ = why + " (" + (lx_.file().empty() ? std::string("<unit>") : lx_.file()) + ":" + std::to_string(lx_.line()) + ")";
  }

  bool in_toolkit() {
    if (lx_.file_changed()) {
      auto [it, added] = toolkit_file_.try_emplace(lx_.file(), false);
      if (added) {
        char* real = ::realpath(lx_.file().c_str(), nullptr);
        const std::string path = real != nullptr ? real : lx_.file();
        std::free(real);
        for (const auto& d : toolkit_dirs_)
          if (path.compare(0, d.size(), d) == 0 && path.size() > d.size() && path[d.size()] == '/') it->second = true;
      }
      toolkit_ = it->second;
    }
    return toolkit_;
  }

  // The next token; with `checking_`, routed names renamed and what cannot be routed refused.
  void advance() {
    if (tok_.kind != Kind::kDirective) recent_[seen_++ % kRecent] = tok_;
    tok_ = lx_.next();
    if (!checking_) return;
    if (tok_.kind == Kind::kDirective) {
      in_toolkit();
    } else if (tok_.kind == Kind::kIdent && tok_.text.size() > 4 && tok_.text.compare(0, 4, "cuda") == 0) {
      if (routed_set().count(tok_.text)) edits_.push_back({tok_.begin, tok_.begin, "jitkern_compat_"});
      else if (kBypassesRouting.count(tok_.text)) refuse("per-thread default stream launches (" + std::string(tok_.text) + ")");
      else if (kNeedsRegistration.count(tok_.text) && !in_toolkit())
        refuse(std::string(tok_.text) + " needs the kernels and variables registered as nvcc's host code does");
    } else if (tok_.is("<<<")) {
      chevron_open();
    } else if (chevron_ >= 0) {
      chevron_step();
    }
  }

  // The `back`-th token before tok_ (1: the one just before), if still remembered.
  const Token* before(std::size_t back) const { return back <= seen_ && back <= kRecent ? &recent_[(seen_ - back) % kRecent] : nullptr; }

  // `kernel<<<config>>>(args)` becomes `::jitkern::compat::chevron(kernel, config)(args)` (host_launch.h),
  // where the kernel is a name, qualified or not, with template arguments or not; anything else is refused.
  void chevron_open() {
    std::size_t k = 1;
    const Token* t = before(k);
    if (t != nullptr && (t->is(">") || t->is(">>"))) {  // back over the template arguments
      int depth = 0, parens = 0;
      for (; t != nullptr; t = before(++k)) {
        parens += t->is(")") || t->is("]") ? 1 : t->is("(") || t->is("[") ? -1 : 0;
        if (parens == 0) depth += t->is(">") ? 1 : t->is(">>") ? 2 : t->is("<") ? -1 : 0;
        if (depth == 0) break;
      }
      t = t != nullptr ? before(++k) : nullptr;
    }
    while (t != nullptr && t->kind == Kind::kIdent && before(k + 1) != nullptr && before(k + 1)->is("::") && before(k + 2) != nullptr &&
           before(k + 2)->kind == Kind::kIdent)
      t = before(k += 2);  // ns::kernel
    if (t != nullptr && t->kind == Kind::kIdent && before(k + 1) != nullptr && before(k + 1)->is("::")) t = before(++k);  // ::kernel
    const Token* first = t;
    const Token* outside = before(k + 1);
    const bool named = first != nullptr && (first->kind == Kind::kIdent || first->is("::")) &&
                       !(outside != nullptr && (outside->is("::") || outside->is(".") || outside->is("->") || outside->is(">") ||
                                                outside->is(")") || outside->is("]")));
    if (!named || chevron_ >= 0 || (!edits_.empty() && edits_.back().end > first->begin))
      return refuse("a <<<...>>> launch of a kernel that is not a name (with template arguments or not)");
    edits_.push_back({first->begin, first->begin, "::jitkern::compat::chevron("});
    edits_.push_back({tok_.begin, tok_.end, ", "});
    chevron_ = 0;
  }

  void chevron_step() {
    if (tok_.is("(") || tok_.is("[") || tok_.is("{")) ++chevron_;
    if ((tok_.is(")") || tok_.is("]") || tok_.is("}")) && --chevron_ < 0) return refuse("an unbalanced <<<...>>> launch");
    if (tok_.is(";") || tok_.kind == Kind::kEnd) return refuse("an unterminated <<<...>>> launch");
    if (chevron_ == 0 && tok_.is(">>") && tok_.end < s_.size() && s_[tok_.end] == '>') {
      edits_.push_back({tok_.begin, tok_.end + 1, ")"});
      chevron_ = -1;
      lx_.next();  // the third '>'
      advance();
    }
  }

  // tok_ is "{": advances past its matching "}"; returns the end of that "}".
  std::size_t skip_braces(bool check) {
    const bool saved = checking_;
    checking_ = check;
    int depth = 0;
    for (;;) {
      if (tok_.kind == Kind::kEnd) {
        checking_ = saved;
        refuse("unbalanced braces");
        return s_.size();
      }
      if (tok_.is("{")) ++depth;
      if (tok_.is("}") && --depth == 0) {
        const std::size_t end = tok_.end;
        checking_ = saved;
        advance();
        return end;
      }
      advance();
    }
  }

  // tok_ is "<" (a template parameter or argument list): advances past its ">". A "<" opens a nested
  // list only after a name (`sizeof...(T) < N` compares); a ">" inside one must be parenthesized.
  void skip_angles() {
    int depth = 0, parens = 0;
    bool after_name = true;
    for (;;) {
      if (tok_.kind == Kind::kEnd) return refuse("unbalanced template brackets");
      if (tok_.is("{")) {
        skip_braces(true);
        continue;
      }
      if (tok_.is("(") || tok_.is("[")) ++parens;
      if (tok_.is(")") || tok_.is("]")) --parens;
      if (parens == 0) {
        if (tok_.is("<") && after_name) ++depth;
        if (tok_.is(">") || tok_.is(">=")) --depth;
        if (tok_.is(">>") || tok_.is(">>=")) depth -= 2;
      }
      after_name = tok_.kind == Kind::kIdent;
      advance();
      if (depth <= 0) return;
    }
  }

  // tok_ is __attribute__: reads `__attribute__((a, b(...)))`, noting CUDA's execution spaces in the
  // segment and removing CUDA's attributes (a kernel's becomes noipa: never inlined, cloned or folded).
  void attribute() {
    const std::size_t begin = tok_.begin;
    advance();
    if (!tok_.is("(")) return;
    advance();
    if (!tok_.is("(")) return;
    advance();
    struct Item {
      std::string_view name;
      std::size_t begin, end;
    };
    std::vector<Item> items;
    int depth = 2;
    bool start = true;
    std::size_t end = begin;
    while (tok_.kind != Kind::kEnd) {
      if (tok_.is("(")) ++depth;
      if (tok_.is(")") && --depth == 1) {
        advance();
        if (!tok_.is(")")) return refuse("a malformed __attribute__");
        end = tok_.end;
        advance();
        break;
      }
      if (depth == 2 && tok_.is(",")) {
        start = true;
      } else if (start) {
        items.push_back({tok_.text, tok_.begin, tok_.end});
        start = false;
      } else {
        items.back().end = tok_.end;
      }
      advance();
    }
    if (refused_ || end == begin) return refuse("a malformed __attribute__");
    std::string kept;
    bool cuda = false, global = false;
    for (const auto& item : items) {
      std::string_view n = item.name;
      if (n.size() > 4 && n.substr(0, 2) == "__" && n.substr(n.size() - 2) == "__") n = n.substr(2, n.size() - 4);
      if (!kCudaAttributes.count(n)) {
        kept += (kept.empty() ? "" : ", ") + std::string(s_.substr(item.begin, item.end - item.begin));
        continue;
      }
      cuda = true;
      if (n == "global") seg_.global = global = true;
      if (n == "device") seg_.device = true;
      if (n == "host") seg_.host = true;
      if (n == "managed") return refuse("a __managed__ variable");
    }
    if (!cuda) return;
    if (global) kept += kept.empty() ? "noipa" : ", noipa";
    edits_.push_back({begin, end, kept.empty() ? std::string() : "__attribute__((" + kept + "))"});
  }

  void reset() {
    auto top = std::move(seg_.top);  // its storage reused
    top.clear();
    seg_ = Segment{};
    seg_.top = std::move(top);
  }

  void note(std::string_view t) {
    seg_.prev2 = seg_.prev;
    seg_.prev = t;
  }

  // One token at namespace or class scope.
  void step() {
    const Token t = tok_;
    if (t.kind == Kind::kDirective) return advance();
    if (t.is("}")) {
      if (scopes_.empty()) return refuse("a '}' closing nothing");
      scopes_.pop_back();
      reset();
      return advance();
    }
    if (t.kind != Kind::kDirective && seg_.begin == std::string_view::npos) seg_.begin = t.begin;
    if (t.is(";") && seg_.depth == 0) {
      // CUDA's declarations of std's math functions: libstdc++ declares them for the host, differently
      // (constexpr), and cudafe++ rewrites CUDA's to match: dropped, the host compiler takes libstdc++'s.
      if ((seg_.device || seg_.host) && seg_.params && !scopes_.empty() && scopes_.back().std)
        replace(seg_.begin, t.end, skeleton("", seg_.begin, t.end));
      reset();
      return advance();
    }
    if (t.is("{")) return open_brace();
    if (t.is("__attribute__")) return attribute();
    if (t.is("template") && seg_.depth == 0) {
      seg_.templ = true;
      advance();
      if (tok_.is("<")) skip_angles();
      note(">");
      return;
    }
    if (t.is("operator")) {
      if (seg_.depth == 0) seg_.top.push_back(t.text);
      advance();
      if (tok_.is("(")) {
        advance();
        if (tok_.is(")")) advance();
      } else {
        while (tok_.kind != Kind::kEnd && !tok_.is("(") && !tok_.is(";") && !tok_.is("{")) advance();
      }
      note("operator");
      return;
    }
    const bool top = seg_.depth == 0;
    if (t.is("(") || t.is("[")) {
      if (top && t.is("(")) {
        seg_.top.push_back("(");
        const bool specifier = seg_.prev == "decltype" || seg_.prev == "alignas" || seg_.prev == "noexcept" ||
                               seg_.prev == "__declspec" || seg_.prev == "requires" || seg_.prev == "sizeof" || seg_.prev == "alignof";
        if (!specifier) seg_.params = true;
      }
      ++seg_.depth;
    } else if (t.is(")") || t.is("]")) {
      if (seg_.depth > 0) --seg_.depth;
      if (seg_.depth == 0 && t.is(")")) {
        seg_.top.push_back(")");
        if (seg_.params) seg_.params_closed = true;
      }
    } else if (t.kind == Kind::kIdent) {
      if (top) seg_.top.push_back(t.text);
      if (t.text == "constexpr" || t.text == "consteval") seg_.constexpr_ = true;
      else if (t.text == "static") seg_.static_ = true;
      else if (t.text == "inline" || t.text == "__inline__" || t.text == "__inline") seg_.inline_ = true;
      else if ((t.text == "class" || t.text == "struct" || t.text == "union") && top) seg_.class_key = true;
      else if (t.text == "auto" && !seg_.params && (top || (seg_.prev == "(" && seg_.prev2 == "decltype"))) seg_.deduced = true;
      else if (top && (t.text == "public" || t.text == "private" || t.text == "protected") && seg_.top.size() == 1) {
        advance();
        if (tok_.is(":")) {
          reset();
          return advance();
        }
        note(t.text);
        return;
      }
    } else if (top) {
      seg_.top.push_back(t.text);
      if (t.is("=")) seg_.equal = true;
      else if (t.is("->") && seg_.params_closed) seg_.trailing = true;
      else if (t.is(":") && seg_.params_closed && !seg_.equal && !seg_.class_key) seg_.mem_init = true;
    }
    note(t.text);
    advance();
  }

  bool enum_head() const {
    for (const auto& t : seg_.top)
      if (t == "enum") return true;
    return false;
  }

  // class-key [attributes] name[<args>] [final] followed by ':' or the brace.
  bool class_head() const {
    const auto& v = seg_.top;
    std::size_t k = 0;
    while (k < v.size() && v[k] != "class" && v[k] != "struct" && v[k] != "union") ++k;
    if (k == v.size()) return false;
    for (++k; k < v.size(); ++k) {
      if (v[k] == ":") return true;
      if (v[k] == "alignas" || v[k] == "__declspec") {
        int depth = 0;
        for (++k; k < v.size(); ++k) {
          depth += v[k] == "(" ? 1 : v[k] == ")" ? -1 : 0;
          if (depth == 0) break;
        }
        continue;
      }
      if (v[k] == "<") {
        int depth = 0;
        for (; k < v.size(); ++k) {
          const bool opens = v[k] == "<" && ident_start(v[k - 1][0]);  // as in skip_angles
          depth += opens ? 1 : v[k] == ">" ? -1 : v[k] == ">>" ? -2 : 0;
          if (depth <= 0) break;
        }
        continue;
      }
      if (v[k] == "::" || (!v[k].empty() && ident_start(v[k][0]))) continue;
      return false;
    }
    return true;
  }

  void push(ScopeKind kind) {
    const auto& v = seg_.top;
    scopes_.push_back({kind, scopes_.empty() && v.size() == 2 && v[0] == "namespace" && v[1] == "std"});  // ::std only
    advance();
    reset();
  }

  // Text from `begin` to `end` replaced, with the edits inside it (its attributes) dropped.
  void replace(std::size_t begin, std::size_t end, std::string text) {
    while (!edits_.empty() && edits_.back().begin >= begin) edits_.pop_back();
    edits_.push_back({begin, end, std::move(text)});
  }

  // The text left for a removed body: `replacement`, then the body's newlines and line markers.
  std::string skeleton(std::string replacement, std::size_t begin, std::size_t end) const {
    std::size_t at = begin;
    while (at < end) {
      const std::size_t nl = s_.find('\n', at);
      if (nl == std::string_view::npos || nl >= end) break;
      replacement += '\n';
      at = nl + 1;
      if (at < end && s_[at] == '#') {
        std::size_t k = at + 1;
        while (k < end && s_[k] == ' ') ++k;
        const std::size_t line_end = std::min(end, s_.find('\n', at));
        if (k < end && digit(s_[k])) replacement.append(s_.substr(at, line_end - at));
      }
    }
    return replacement;
  }

  void open_brace() {
    const auto& v = seg_.top;
    if (seg_.depth > 0 || (seg_.mem_init && (seg_.prev == ">" || (!seg_.prev.empty() && ident_start(seg_.prev[0]))))) {
      skip_braces(true);  // an initializer inside a declaration
      return note("}");
    }
    if (!v.empty() && (v[0] == "namespace" || (v[0] == "inline" && v.size() > 1 && v[1] == "namespace")))
      return push(ScopeKind::kNamespace);
    if (v.size() == 2 && v[0] == "extern" && v[1].front() == '"') return push(ScopeKind::kNamespace);
    if (seg_.equal || enum_head()) {
      skip_braces(true);
      return note("}");
    }
    if (class_head()) return push(ScopeKind::kClass);
    if (!seg_.params) {
      skip_braces(true);  // a variable's braced initializer
      return note("}");
    }
    function_body();
  }

  void function_body() {
    const bool device_only = (seg_.device || seg_.global) && !seg_.host;
    const bool in_class = !scopes_.empty() && scopes_.back().kind == ScopeKind::kClass;
    if (!device_only || seg_.constexpr_) {  // host code may call it (constexpr: --expt-relaxed-constexpr)
      skip_braces(true);
      return reset();
    }
    if (seg_.global) {
      // In an unnamed namespace it is found by the device code's name for it (host_launch.h); static, not.
      if (seg_.static_) return refuse("a static kernel: its device symbol is not its host name");
    } else if (seg_.deduced && !seg_.trailing) {
      if (!(seg_.inline_ || seg_.templ || in_class))
        return refuse("a device function with a deduced return type that is neither inline nor a template");
      skip_braces(true);  // kept: inline and never called from host code, so never compiled for the host
      return reset();
    }
    const std::size_t begin = tok_.begin;
    const std::size_t end = skip_braces(false);
    if (refused_) return;
    replace(begin, end, skeleton(seg_.global ? "{}" : "{ __builtin_unreachable(); }", begin, end));
    ++(seg_.global ? kernels_ : emptied_);
    reset();
  }

  struct Scope {
    ScopeKind kind;
    bool std;
  };

  std::string_view s_;
  Lexer lx_;
  const std::vector<std::string>& toolkit_dirs_;
  std::unordered_map<std::string, bool> toolkit_file_;
  bool toolkit_ = false;
  Token tok_;
  static constexpr std::size_t kRecent = 512;  // the tokens before tok_ a <<< may look back over
  Token recent_[kRecent];
  std::size_t seen_ = 0;
  bool checking_ = true;
  int chevron_ = -1;  // in a <<<...>>> launch's configuration: its bracket depth
  std::vector<Edit> edits_;
  std::vector<Scope> scopes_;
  Segment seg_;
  bool refused_ = false;
  std::string why_;
  int kernels_ = 0, emptied_ = 0;
};

}  // namespace

const std::vector<std::string>& routed_functions() {
  static const std::vector<std::string> names = {
      "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cudaFuncSetCacheConfig", "cudaFuncGetAttributes",
      "cudaFuncSetAttribute", "cudaFuncGetName", "cudaFuncGetParamInfo", "cudaFuncSetSharedMemConfig",
      "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cudaOccupancyAvailableDynamicSMemPerBlock",
      "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cudaOccupancyMaxPotentialClusterSize", "cudaOccupancyMaxActiveClusters",
      "cudaGetKernel"};
  return names;
}

Result transform(std::string_view preprocessed, const std::vector<std::string>& toolkit_dirs, const std::string& module_id) {
  std::vector<std::string> real;
  for (const auto& d : toolkit_dirs) {
    char* r = ::realpath(d.c_str(), nullptr);
    real.push_back(r != nullptr ? r : d);
    std::free(r);
  }
  Result result = Rewriter(preprocessed, real).run();
  if (result.ok) result.text += "\nextern \"C\" const char jitkern_compat_module_id[] = \"" + module_id + "\";\n";
  return result;
}

namespace {

// A line marker's file name and whether it enters (flag 1) or leaves (flag 2) an include.
bool marker(std::string_view d, std::string* name, bool* enters, bool* leaves) {
  std::size_t k = 1;
  while (k < d.size() && d[k] == ' ') ++k;
  if (k >= d.size() || !digit(d[k])) return false;
  const std::size_t q = d.find('"', k);
  if (q == std::string_view::npos) return false;
  name->clear();
  std::size_t j = q + 1;
  for (; j < d.size() && d[j] != '"'; ++j) *name += d[j] == '\\' && j + 1 < d.size() ? d[++j] : d[j];
  *enters = *leaves = false;
  for (std::size_t f = j + 1; f < d.size(); ++f) {
    if (d[f - 1] != ' ' || !(f + 1 == d.size() || d[f + 1] == ' ')) continue;  // flags are single digits
    *enters |= d[f] == '1', *leaves |= d[f] == '2';
  }
  return true;
}

// A pragma whose effect a precompiled header carries as the text would (or that has none for GCC):
// diagnostics, nvcc's own, and GCC visibility push/pop (counted by the caller).
bool harmless_pragma(std::string_view d) {
  for (const std::string_view p : {"#pragma GCC diagnostic ", "#pragma nv_", "#pragma GCC visibility push(", "#pragma GCC visibility pop",
                                   "#pragma once"})
    if (d.substr(0, p.size()) == p) return true;
  return false;
}

}  // namespace

std::size_t shared_prefix_end(std::string_view text, const std::string& header, std::string* why) {
  Lexer lex(text);
  int depth = 0, visibility = 0;
  bool inside = false;
  std::string name;
  for (Token t = lex.next(); t.kind != Kind::kEnd; t = lex.next()) {
    if (t.kind != Kind::kDirective) continue;
    bool enters = false, leaves = false;
    if (t.text.substr(0, 7) == "#pragma") {
      if (!harmless_pragma(t.text)) return *why = "the text before it has " + std::string(t.text), std::string_view::npos;
      visibility += t.text.find("visibility push(") != std::string_view::npos ? 1 : t.text.find("visibility pop") != std::string_view::npos ? -1 : 0;
    } else if (marker(t.text, &name, &enters, &leaves)) {
      if (enters) inside |= depth++ == 0 && name == header;
      if (leaves && --depth == 0 && inside) {
        if (visibility != 0) return *why = "the text before it leaves a #pragma GCC visibility push open", std::string_view::npos;
        return t.begin;
      }
    }
  }
  return *why = "the unit has no top-level #include of " + header, std::string_view::npos;
}

std::string after_prefix(std::string_view text, std::size_t end, const std::string& gch) {
  std::string quoted;
  for (const char c : gch) quoted += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
  const std::size_t first = text.find('\n');  // the main file's line marker
  return std::string(text.substr(0, first + 1)) + "#pragma GCC pch_preprocess \"" + quoted + "\"\n" + std::string(text.substr(end));
}

}  // namespace jitkern::host_transform
