// The heavy half of the kernel-author headers: message formatting for Panic/RuntimeCheck,
// TensorMatcher verification, and the export layer's error texts. Compiled once, at install.
#include <jitkern/error.h>
#include <jitkern/export.h>
#include <jitkern/tensor.h>
#include <jitkern/utils.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>

namespace {

std::string where_text(const host::DebugInfo& where) {
  return std::string(where.file_name()) + ":" + std::to_string(where.line());
}

void append_dtype(std::string& out, DLDataType t) {
  const char* base = nullptr;
  switch (t.code) {
    case kDLInt: base = "int"; break;
    case kDLUInt: base = "uint"; break;
    case kDLFloat: base = "float"; break;
    case kDLBfloat: base = "bfloat"; break;
    case kDLBool: out += "bool"; break;
    case kDLFloat8_e4m3fn: out += "float8_e4m3fn"; break;
    case kDLFloat8_e5m2: out += "float8_e5m2"; break;
    default: out += "dtype(code=" + std::to_string(t.code) + ", bits=" + std::to_string(t.bits) + ")";
  }
  if (base != nullptr) out += base + std::to_string(t.bits);
  if (t.lanes != 1) out += "x" + std::to_string(t.lanes);
}

const char* device_type_name(int type) {
  switch (type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLCUDAHost: return "cuda_host";
    case kDLCUDAManaged: return "cuda_managed";
    case kDLROCM: return "rocm";
    case kDLROCMHost: return "rocm_host";
    case kDLMetal: return "metal";
    case kDLVulkan: return "vulkan";
    case kDLOpenCL: return "opencl";
    case kDLOneAPI: return "oneapi";
    default: return nullptr;
  }
}

void append_device(std::string& out, DLDevice d) {
  const char* name = device_type_name(d.device_type);
  out += name ? name : "device_type_" + std::to_string(d.device_type);
  out += ":" + std::to_string(d.device_id);
}

void append_device_types(std::string& out, uint64_t mask) {
  bool first = true;
  for (int t = 0; t < 64; ++t) {
    if (!(mask >> t & 1)) continue;
    out += first ? "" : ", ";
    const char* name = device_type_name(t);
    out += name ? name : "device_type_" + std::to_string(t);
    first = false;
  }
}

void append_arg(std::string& out, const host::detail::FmtArg& a) {
  using K = host::detail::FmtArg;
  char buf[64];
  switch (a.kind) {
    case K::kInt: out += std::to_string(a.i); break;
    case K::kUInt: out += std::to_string(a.u); break;
    case K::kFloat: std::snprintf(buf, sizeof buf, "%.9g", a.f), out += buf; break;
    case K::kBool: out += a.u ? "true" : "false"; break;
    case K::kChar: out += static_cast<char>(a.i); break;
    case K::kStr:
      if (a.s == nullptr) out += "(null)";
      else if (a.len == static_cast<std::size_t>(-1)) out += a.s;
      else out.append(a.s, a.len);
      break;
    case K::kPtr: std::snprintf(buf, sizeof buf, "%p", a.p), out += buf; break;
    case K::kDType: append_dtype(out, a.dtype); break;
    case K::kDevice: append_device(out, a.device); break;
  }
}

std::string describe_tensor(const DLTensor* t) {
  std::string s = "Tensor<";
  for (int d = 0; d < t->ndim; ++d) s += (d ? ", " : "") + std::to_string(t->shape[d]);
  s += ">[strides=<";
  for (int d = 0; d < t->ndim; ++d) {
    int64_t stride = 1;
    if (t->strides) {
      stride = t->strides[d];
    } else {
      for (int k = t->ndim - 1; k > d; --k) stride *= t->shape[k];
    }
    s += (d ? ", " : "") + std::to_string(stride);
  }
  s += ">, dtype=";
  append_dtype(s, t->dtype);
  s += ", device=";
  append_device(s, t->device);
  return s + "]";
}

std::string describe_ref(const host::SizeRef& r) {
  if (r.m_symbol == nullptr) return r.m_literal < 0 ? "*" : std::to_string(r.m_literal);
  return r.m_symbol->m_annotation ? r.m_symbol->m_annotation : "?";
}

std::string describe_pattern(const host::detail::MatcherSpec& spec) {
  std::string s = "Tensor<";
  for (std::size_t d = 0; d < spec.ndim; ++d) s += (d ? ", " : "") + describe_ref(spec.shape[d]);
  s += ">[strides=";
  if (spec.strides == nullptr) {
    s += "contiguous";
  } else {
    s += "<";
    for (std::size_t d = 0; d < spec.num_strides; ++d) s += (d ? ", " : "") + describe_ref(spec.strides[d]);
    s += ">";
  }
  auto list_dtypes = [&](const DLDataType* opts, std::size_t n) {
    s += "{";
    for (std::size_t i = 0; i < n; ++i) s += i ? ", " : "", append_dtype(s, opts[i]);
    s += "}";
  };
  if (spec.dtypes) s += ", dtype in ", list_dtypes(spec.dtypes, spec.num_dtypes);
  if (spec.dtype_symbol && spec.dtype_symbol->m_options && spec.dtype_symbol->m_options != spec.dtypes)
    s += ", dtype (symbol) in ", list_dtypes(spec.dtype_symbol->m_options, spec.dtype_symbol->m_num_options);
  if (spec.device_mask) s += ", device in {", append_device_types(s, spec.device_mask), s += "}";
  if (spec.device_symbol && spec.device_symbol->m_allowed_mask && spec.device_symbol->m_allowed_mask != spec.device_mask)
    s += ", device (symbol) in {", append_device_types(s, spec.device_symbol->m_allowed_mask), s += "}";
  return s + "]";
}

std::string symbol_name(const char* kind, std::size_t dim, const host::SymbolicSize* sym) {
  std::string s = std::string(kind) + "#" + std::to_string(dim);
  if (sym && sym->m_annotation) s += "('" + std::string(sym->m_annotation) + "')";
  return s;
}

[[noreturn]] void throw_error(std::string message, host::ErrorKind kind = host::ErrorKind::kRuntime) {
  throw host::PanicError(std::move(message), kind);
}

[[noreturn]] void match_failed(const host::detail::MatcherSpec& spec, const DLTensor* t, const char* name, const host::DebugInfo& where,
                               const std::string& cause, host::ErrorKind kind) {
  const std::string arg = name != nullptr ? std::string(name) + " = " : std::string();
  throw_error("Tensor match failed for " + arg + (t ? describe_tensor(t) : std::string("<null tensor>")) + " at " +
                  where_text(where) + "\n- Expected: " + describe_pattern(spec) + "\n- Root cause: " + (name ? std::string(name) + ": " : "") +
                  cause,
              kind);
}

// Where a symbol's value came from, for a mismatch message: "; n = 5 from y (shape#0)", or "" when unknown.
std::string source_text(const host::SymbolicSize& sym) {
  if (sym.m_source[0] == '\0') return {};
  const std::string value = std::to_string(sym.m_value);
  return "; " + (sym.m_annotation ? std::string(sym.m_annotation) + " = " + value + " from " : value + " came from ") + sym.m_source +
         " (" + sym.m_source_kind + "#" + std::to_string(sym.m_source_dim) + ")";
}

// Resolves or checks one size/stride entry of tensor `name`; returns a non-empty cause on mismatch.
std::string check_ref(const host::SizeRef& ref, int64_t actual, const char* kind, std::size_t dim, const char* name) {
  if (ref.m_symbol == nullptr) {
    if (ref.m_literal < 0 || ref.m_literal == actual) return {};
    return std::string(kind == std::string("shape") ? "Size" : "Stride") + " mismatch for " + symbol_name(kind, dim, nullptr) +
           ": expected " + std::to_string(ref.m_literal) + " but got " + std::to_string(actual);
  }
  host::SymbolicSize& sym = *ref.m_symbol;
  if (!sym.m_resolved) {
    sym.set_value(actual);
    std::snprintf(sym.m_source, sizeof sym.m_source, "%s", name ? name : "");
    sym.m_source_kind = kind, sym.m_source_dim = static_cast<int64_t>(dim);
    return {};
  }
  if (sym.m_value == actual) return {};
  return std::string(kind == std::string("shape") ? "Size" : "Stride") + " mismatch for " + symbol_name(kind, dim, &sym) +
         ": expected " + std::to_string(sym.m_value) + " (resolved earlier) but got " + std::to_string(actual) + source_text(sym);
}

bool dtype_in(DLDataType t, const DLDataType* opts, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (host::dtype_equal(opts[i], t)) return true;
  return false;
}

thread_local std::string g_message;

}  // namespace

namespace host::detail {

void fail(const DebugInfo& where, const char* what, ErrorKind kind, const FmtArg* args, std::size_t n) {
  std::string msg = std::string(what) + " at " + where_text(where) + " in " + where.function_name();
  if (n > 0) msg += ": ";
  for (std::size_t i = 0; i < n; ++i) append_arg(msg, args[i]);
  throw_error(std::move(msg), kind);
}

void match_tensor(const MatcherSpec& spec, const DLTensor* t, const char* name, const DebugInfo& where) {
  constexpr auto kType = ErrorKind::kType, kValue = ErrorKind::kValue;
  if (t == nullptr) match_failed(spec, t, name, where, "the tensor is missing (None)", kType);
  if (static_cast<std::size_t>(t->ndim) != spec.ndim)
    match_failed(spec, t, name, where,
                 "Dimension mismatch: expected " + std::to_string(spec.ndim) + " dimensions but got " + std::to_string(t->ndim), kValue);
  if (spec.strides != nullptr && spec.num_strides != spec.ndim)
    match_failed(spec, t, name, where,
                 "Invalid pattern: " + std::to_string(spec.num_strides) + " strides given for " + std::to_string(spec.ndim) +
                     " dimensions",
                 ErrorKind::kRuntime);
  // Check everything before resolving any symbol, so that a failed match leaves symbols untouched.
  // Symbols first resolved by this very tensor are rolled back on failure.
  SymbolicSize* newly_resolved[32];
  std::size_t num_new = 0;
  auto fail = [&](const std::string& cause, ErrorKind kind = ErrorKind::kValue) {
    for (std::size_t i = 0; i < num_new; ++i) newly_resolved[i]->m_resolved = false;
    match_failed(spec, t, name, where, cause, kind);
  };
  auto check = [&](const SizeRef& ref, int64_t actual, const char* kind, std::size_t dim) {
    const bool was_resolved = ref.m_symbol && ref.m_symbol->m_resolved;
    std::string cause = check_ref(ref, actual, kind, dim, name);
    if (ref.m_symbol && !was_resolved && num_new < 32) newly_resolved[num_new++] = ref.m_symbol;
    if (!cause.empty()) fail(cause);
  };
  for (std::size_t d = 0; d < spec.ndim; ++d) check(spec.shape[d], t->shape[d], "shape", d);
  if (spec.strides != nullptr) {
    for (std::size_t d = 0; d < spec.ndim; ++d) {
      const int64_t stride = jitkern::TensorView(t).stride(static_cast<int64_t>(d));
      // A size-1 dimension can carry any stride; check it only to resolve a still-free symbol.
      const SizeRef& ref = spec.strides[d];
      if (t->shape[d] == 1 && (ref.m_symbol == nullptr || ref.m_symbol->m_resolved)) continue;
      check(ref, stride, "stride", d);
    }
  } else if (!jitkern::TensorView(t).is_contiguous()) {
    fail("Tensor is not contiguous (strides were not given, so a contiguous row-major layout is required)");
  }
  const DLDataType dtype = t->dtype;
  if (spec.dtypes && !dtype_in(dtype, spec.dtypes, spec.num_dtypes)) {
    std::string cause = "DType mismatch: ";
    append_dtype(cause, dtype);
    fail(cause + " is not one of the allowed dtypes", kType);
  }
  if (SymbolicDType* sym = spec.dtype_symbol) {
    if (sym->m_options && !dtype_in(dtype, sym->m_options, sym->m_num_options)) {
      std::string cause = "DType mismatch: ";
      append_dtype(cause, dtype);
      fail(cause + " is not one of the dtype symbol's options", kType);
    }
    if (sym->m_resolved && !host::dtype_equal(sym->m_value, dtype)) {
      std::string cause = "DType mismatch: expected ";
      append_dtype(cause, sym->m_value);
      cause += " (resolved earlier) but got ";
      append_dtype(cause, dtype);
      fail(cause, kType);
    }
  }
  const DLDevice device = t->device;
  const uint64_t bit = device.device_type < 64 ? uint64_t{1} << device.device_type : 0;
  if (spec.device_mask && !(spec.device_mask & bit)) {
    std::string cause = "Device mismatch: ";
    append_device(cause, device);
    cause += " is not one of {";
    append_device_types(cause, spec.device_mask);
    fail(cause + "}");
  }
  if (SymbolicDevice* sym = spec.device_symbol) {
    if (sym->m_allowed_mask && !(sym->m_allowed_mask & bit)) {
      std::string cause = "Device mismatch: ";
      append_device(cause, device);
      cause += " is not one of the device symbol's options {";
      append_device_types(cause, sym->m_allowed_mask);
      fail(cause + "}");
    }
    if (sym->m_resolved && (sym->m_value.device_type != device.device_type || sym->m_value.device_id != device.device_id)) {
      std::string cause = "Device mismatch: expected ";
      append_device(cause, sym->m_value);
      cause += " (resolved earlier) but got ";
      append_device(cause, device);
      fail(cause);
    }
  }
  if (spec.dtype_symbol && !spec.dtype_symbol->m_resolved) spec.dtype_symbol->m_value = dtype, spec.dtype_symbol->m_resolved = true;
  if (spec.device_symbol && !spec.device_symbol->m_resolved)
    spec.device_symbol->m_value = device, spec.device_symbol->m_resolved = true;
}

// A byte of b is a byte of a when b's lowest byte less a's is sum(c_k * stride_k) over the strides (in bytes) of both,
// c_k in [-(b's extent - 1), a's extent - 1] summed over the dimensions of that stride; the element's own bytes are a
// dimension of stride 1. Searched from the largest stride down, keeping at each level only the coefficients that the
// smaller strides can still complete: a few a level for the layouts ops take (nested strides).
int tensors_overlap(const DLTensor* a, const DLTensor* b) {
  struct Term {
    int64_t stride, lo, hi;
  };
  constexpr int kMaxTerms = 2 * (16 + 1);  // 16 dimensions and the element's bytes, of each
  Term terms[kMaxTerms];
  int n = 0;
  bool overflow = false;  // a size, stride or address sum past int64: undecided
  const auto mul = [&](int64_t x, int64_t y) {
    int64_t r = 0;
    overflow |= __builtin_mul_overflow(x, y, &r);
    return r;
  };
  const auto sum = [&](int64_t x, int64_t y) {
    int64_t r = 0;
    overflow |= __builtin_add_overflow(x, y, &r);
    return r;
  };
  const auto add = [&](int64_t stride, int64_t count) {  // count > 0: a's coefficients, < 0: b's
    int i = 0;
    while (i < n && terms[i].stride != stride) ++i;
    if (i == n) {  // kept sorted by stride, largest first
      while (i > 0 && terms[i - 1].stride < stride) terms[i] = terms[i - 1], --i;
      terms[i] = {stride, 0, 0}, ++n;
    }
    (count > 0 ? terms[i].hi : terms[i].lo) += count;
  };
  int64_t first[2], last[2];  // each tensor's lowest and highest byte: apart, the usual answer, without the search
  for (int k = 0; k < 2; ++k) {
    const DLTensor* t = k == 0 ? a : b;
    const int64_t bytes = (int64_t{t->dtype.bits} * t->dtype.lanes + 7) / 8;
    first[k] = last[k] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(static_cast<const char*>(t->data) + t->byte_offset));
    int64_t compact = 1;
    for (int d = t->ndim - 1; d >= 0; --d) {
      const int64_t size = t->shape[d], stride = t->strides != nullptr ? t->strides[d] : compact;
      if (size == 0) return 0;
      compact = mul(compact, size);
      (stride < 0 ? first[k] : last[k]) = sum(stride < 0 ? first[k] : last[k], mul(mul(stride, bytes), size - 1));
    }
    last[k] = sum(last[k], bytes - 1);
  }
  if (!overflow && (last[0] < first[1] || last[1] < first[0])) return 0;
  const int64_t delta = sum(first[1], -first[0]);  // b's lowest byte less a's
  for (const bool of_a : {true, false}) {
    const DLTensor* t = of_a ? a : b;
    const int64_t bits = int64_t{t->dtype.bits} * t->dtype.lanes;
    if (bits % 8 != 0 || t->ndim > 16) return -1;
    const int64_t bytes = bits / 8;
    int64_t compact = 1;
    for (int d = t->ndim - 1; d >= 0; --d) {
      const int64_t size = t->shape[d], stride = t->strides != nullptr ? t->strides[d] : compact;
      compact = mul(compact, size);
      if (size == 1 || stride == 0) continue;
      const int64_t step = mul(stride, bytes);
      add(step < 0 ? -step : step, of_a ? size - 1 : 1 - size);
    }
    if (bytes > 1) add(1, of_a ? bytes - 1 : 1 - bytes);
  }
  int64_t rest_lo[kMaxTerms + 1], rest_hi[kMaxTerms + 1];  // what terms i.. can sum to
  rest_lo[n] = rest_hi[n] = 0;
  for (int i = n - 1; i >= 0; --i) {
    rest_lo[i] = sum(rest_lo[i + 1], mul(terms[i].lo, terms[i].stride));
    rest_hi[i] = sum(rest_hi[i + 1], mul(terms[i].hi, terms[i].stride));
  }
  constexpr int64_t kFits = int64_t{1} << 62;  // differences of these sums stay in int64
  if (overflow || rest_lo[0] <= -kFits || rest_hi[0] >= kFits || delta <= -kFits || delta >= kFits) return -1;
  const auto floor_div = [](int64_t x, int64_t d) { return x / d - (x % d != 0 && x < 0 ? 1 : 0); };
  int budget = 1 << 14;
  const auto reach = [&](const auto& self, int i, int64_t target) -> int {
    if (target < rest_lo[i] || target > rest_hi[i]) return 0;
    if (i == n) return 1;  // target == 0 here: the range of no terms is {0}
    if (--budget < 0) return -1;
    const Term& t = terms[i];
    const int64_t c_lo = std::max(t.lo, -floor_div(rest_hi[i + 1] - target, t.stride));  // ceil((target - rest_hi) / stride)
    const int64_t c_hi = std::min(t.hi, floor_div(target - rest_lo[i + 1], t.stride));
    for (int64_t c = c_lo; c <= c_hi; ++c) {
      const int found = self(self, i + 1, target - c * t.stride);
      if (found != 0) return found;
    }
    return 0;
  };
  return reach(reach, 0, delta);
}

}  // namespace host::detail

namespace host {

int64_t SymbolicSize::unwrap(DebugInfo where) const {
  if (!m_resolved)
    throw_error("SymbolicSize" + std::string(m_annotation ? "('" + std::string(m_annotation) + "')" : "") +
                " was never resolved: unwrap() at " + where_text(where) + " needs a successful verify() that uses it first");
  return m_value;
}

DLDataType SymbolicDType::unwrap(DebugInfo where) const {
  if (!m_resolved)
    throw_error("SymbolicDType was never resolved: unwrap() at " + where_text(where) +
                " needs a successful verify() with with_dtype(symbol) first");
  return m_value;
}

DLDevice SymbolicDevice::unwrap(DebugInfo where) const {
  if (!m_resolved)
    throw_error("SymbolicDevice was never resolved: unwrap() at " + where_text(where) +
                " needs a successful verify() with with_device(symbol) first");
  return m_value;
}

}  // namespace host

namespace jitkern::detail {

void panic_dim_index(const DLTensor* t, int64_t index, const host::DebugInfo& where) {
  throw_error("Dimension index " + std::to_string(index) + " out of range for " + describe_tensor(t) + " (ndim=" +
              std::to_string(t->ndim) + ") at " + where_text(where));
}
void panic_implicit_strides(const host::DebugInfo& where) {
  throw_error("TensorView::strides() at " + where_text(where) +
              ": the tensor has implicit (compact) strides; use stride(i), which computes them");
}
void panic_null_view(const host::DebugInfo& where) {
  throw_error("Use of an empty TensorView (an absent optional tensor?) at " + where_text(where));
}

}  // namespace jitkern::detail

namespace jitkern::ffi {

namespace {
std::string describe_any(const TVMFFIAny* a) {
  switch (a->type_index) {
    case kTVMFFINone: return "None";
    case kTVMFFIInt: return "int " + std::to_string(a->v_int64);
    case kTVMFFIBool: return a->v_int64 ? "bool True" : "bool False";
    case kTVMFFIFloat: return "float " + std::to_string(a->v_float64);
    case kTVMFFIOpaquePtr: return "an opaque pointer";
    case kTVMFFIDataType: return "a dtype";
    case kTVMFFIDevice: return "a device";
    case kTVMFFIDLTensorPtr:
    case kTVMFFITensor: return "a tensor";
    case kTVMFFIRawStr:
    case kTVMFFISmallStr:
    case kTVMFFIStr: return "a str";
    case kTVMFFIBytes:
    case kTVMFFISmallBytes: return "bytes";
    case kTVMFFIArray:
    case kTVMFFIList: return "a list/array";
    case kTVMFFIFunction: return "a function";
    default: return "an object of type index " + std::to_string(a->type_index);
  }
}
}  // namespace

namespace {
// The index-th name of "a, b, c", or empty.
std::string nth_name(const char* names, int32_t index) {
  if (names == nullptr) return {};
  const std::string all = names;
  std::size_t start = 0;
  for (int32_t i = 0; i < index; ++i) {
    start = all.find(',', start);
    if (start == std::string::npos) return {};
    ++start;
  }
  std::string name = all.substr(start, all.find(',', start) - start);
  const auto b = name.find_first_not_of(' '), e = name.find_last_not_of(' ');
  return b == std::string::npos ? std::string() : name.substr(b, e - b + 1);
}
}  // namespace

const char* describe_argument_error(const ArgumentError& e) noexcept {
  try {
    const int n = e.index + 1;
    const char* suffix = (n % 100 >= 11 && n % 100 <= 13) ? "th"
                         : n % 10 == 1                     ? "st"
                         : n % 10 == 2                     ? "nd"
                         : n % 10 == 3                     ? "rd"
                                                           : "th";
    const std::string name = nth_name(e.arg_names, e.index);
    const std::string which = name.empty() ? "the " + std::to_string(n) + suffix + " argument"
                                           : "argument '" + name + "' (the " + std::to_string(n) + suffix + ")";
    g_message = std::string(e.function) + "(): " + which + " must be " + e.expected + ", got " + describe_any(e.got);
  } catch (...) {
    return "invalid argument";
  }
  return g_message.c_str();
}

const char* describe_arity_error(const ArityError& e) noexcept {
  try {
    const std::string signature = e.arg_names ? std::string(e.function) + "(" + e.arg_names + ")" : std::string(e.function) + "()";
    g_message = signature + " takes " + std::to_string(e.expected) + " argument" + (e.expected == 1 ? "" : "s") + " but " +
                std::to_string(e.got) + (e.got == 1 ? " was" : " were") + " given";
  } catch (...) {
    return "wrong number of arguments";
  }
  return g_message.c_str();
}

const char* error_kind(const std::exception& e) noexcept {
  if (const auto* p = dynamic_cast<const host::PanicError*>(&e)) {
    switch (p->kind) {
      case host::ErrorKind::kType: return "TypeError";
      case host::ErrorKind::kValue: return "ValueError";
      case host::ErrorKind::kRuntime: return "RuntimeError";
      case host::ErrorKind::kIndex: return "IndexError";
      case host::ErrorKind::kTimeout: return "TimeoutError";
    }
  }
  if (dynamic_cast<const std::invalid_argument*>(&e) || dynamic_cast<const std::out_of_range*>(&e)) return "ValueError";
  return "RuntimeError";
}

const char* describe_exception(const char* function, const char* what) noexcept {
  try {
    g_message = std::string(function) + "(): " + what;
  } catch (...) {
    return what;
  }
  return g_message.c_str();
}

}  // namespace jitkern::ffi
