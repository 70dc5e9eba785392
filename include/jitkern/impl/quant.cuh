// 8-bit quantization building blocks shared by the quantization kernels (csrc/quant.cuh):
//   device::quant::Format<Q>         fp8 e4m3 or int8: the largest magnitude and the rounding of one value;
//   device::quant::finite_amax       the running amax that NaN and +-inf do not enter;
//   device::quant::dynamic_amax      the finite amax of the values a group of threads holds, at one
//                                    instruction per value where none is +-inf (half of one for
//                                    16-bit values held as packed pairs: fold_pairs);
//   device::quant::scale_for         the dynamic scale rule, max(amax, eps) / Q's largest value
//                                    (kDefaultScaleEps: eps of the ops that take none; normal_scale_for,
//                                    normal_reciprocal and normal_dynamic_divider: the same bits without
//                                    the divisions' range tests, where eps >= kNormalScaleEps);
//   device::quant::ue8m0_exponent    a scale rounded up to a power of two, as its biased exponent;
//   device::quant::Rounding          the rounding policy of the ops that offer one: the rules below, or
//                                    SGLang's arithmetic (device::quant::sglang);
//   device::quant::group_scale       a group's dynamic scale (optionally UE8M0) and GroupScales, where
//                                    it is stored (the layouts FP8 GEMMs read);
//   device::quant::quantize_group    a group of values held by a few lanes of a warp, quantized with its
//                                    dynamic scale, which is stored (quantize_group_with: stored by the caller);
//   device::quant::QuantizeRows      the norm kernels' epilogue that writes a row as 8-bit values
//                                    (impl/norm.cuh), with a static or a per-row dynamic scale;
//   device::quant::QuantizeGroups    the one that writes it as fp8 with a dynamic scale per group;
//   host::quant::verify_group_scales a per-group quantization's output_s checked, and its GroupScales.
//
// Rules (README, the quantization ops): q = saturate(round_to_nearest_even(x / s)), the division in
// fp32; fp8 saturates to +-448 and keeps NaN; int8 saturates to +-127 and writes NaN as 0. A dynamic
// amax ignores NaN and +-inf, so one bad element does not zero or poison the rest of its row. (Rounding::kSglang
// has SGLang's rules instead.)
#pragma once

#include <jitkern/impl/norm.cuh>
#ifndef __CUDACC_RTC__
#include <jitkern/tensor.h>
#endif
#include <jitkern/type.cuh>
#include <jitkern/vec.cuh>

#include <cstdint>
#include <type_traits>

namespace device::quant {

inline constexpr float kInf = __builtin_huge_valf();

template <typename Q>
struct Format;

template <>
struct Format<fp8_e4m3_t> {
  static constexpr float kMax = 448.0f;
  // Round to nearest even, saturating (+-inf -> +-448), NaN kept.
  static JITKERN_DEVICE uint8_t encode(float v) { return fp8_e4m3_t(v).__x; }
};

template <>
struct Format<int8_t> {
  static constexpr float kMax = 127.0f;
  static JITKERN_DEVICE uint8_t encode(float v) {
    if (v != v) return 0;
    return static_cast<uint8_t>(static_cast<int8_t>(__float2int_rn(fminf(fmaxf(v, -kMax), kMax))));
  }
};

JITKERN_DEVICE float finite_amax(float acc, float v) {
  const float a = fabsf(v);
  return a < kInf ? fmaxf(acc, a) : acc;  // false for NaN and inf
}

// The plain amax step (NaN left out by fmaxf) and the one that also leaves out +-inf, as fold operations.
struct AbsMax {
  JITKERN_DEVICE float operator()(float acc, float v) const { return fmaxf(acc, fabsf(v)); }
};
struct FiniteAbsMax {
  JITKERN_DEVICE float operator()(float acc, float v) const { return finite_amax(acc, v); }
};

// 16-bit values held as packed pairs (bf16x2_t, fp16x2_t: what a pair conversion writes).
template <typename V>
inline constexpr bool kIsPacked16 = std::is_same_v<V, bf16x2_t> || std::is_same_v<V, fp16x2_t>;
// Values in an AlignedVector of V.
template <typename V>
inline constexpr int kValuesPer = kIsPacked16<V> ? 2 : 1;

// op(acc, v) folded over the values of kM vectors of packed 16-bit pairs, from acc. AbsMax takes a packed
// max and a packed min (ptxas joins them three operands at a time; NaN is left out, as fmaxf does) and
// max(max, -min) of their halves: half an instruction a value and a few to finish, against a widening
// and a max a value.
template <typename V, int kN, int kM, typename Op>
  requires kIsPacked16<V>
JITKERN_DEVICE float fold_pairs(const AlignedVector<V, kN> (&x)[kM], const Op& op, float acc) {
  if constexpr (std::is_same_v<Op, AbsMax>) {
    V hi = x[0][0], lo = x[0][0];
#pragma unroll
    for (int i = 1; i < kM * kN; ++i) hi = __hmax2(hi, x[i / kN][i % kN]), lo = __hmin2(lo, x[i / kN][i % kN]);
    const fp32x2_t h = cast<fp32x2_t>(hi), l = cast<fp32x2_t>(lo);
    return op(acc, fmaxf(fmaxf(h.x, h.y), -fminf(l.x, l.y)));  // all NaN: NaN, which op leaves out
  } else {
#pragma unroll
    for (int i = 0; i < kM * kN; ++i) {
      const fp32x2_t v = cast<fp32x2_t>(x[i / kN][i % kN]);
      acc = op(op(acc, v.x), v.y);
    }
    return acc;
  }
}

// The dynamic scale of a row, group or tensor. Monotonic in amax, so the largest scale of parts is
// the scale of their largest amax (what the per-tensor atomic max relies on).
template <typename Q>
JITKERN_DEVICE float scale_for(float amax, float eps) {
  return fmaxf(amax, eps) / Format<Q>::kMax;
}

// scale_for<Q>(amax, eps) where eps >= kNormalScaleEps<Q>, without the IEEE division's range test: the product
// by RN(1 / Q's largest value) and one FMA correction, the IEEE quotient for every dividend from
// kNormalScaleEps<Q> to FLT_MAX (tests/python/ops/test_quant.py checks each one).
template <typename Q>
JITKERN_DEVICE float normal_scale_for(float amax, float eps) {
  constexpr float kMax = Format<Q>::kMax, kInvMax = 1.0f / kMax;
  const float m = fmaxf(amax, eps), q = m * kInvMax;
  return fmaf(fmaf(-kMax, q, m), kInvMax, q);
}

// The biased exponent of the smallest power of two >= s (s positive and finite): UE8M0.
JITKERN_DEVICE uint32_t ue8m0_exponent(float s) {
  const uint32_t bits = __float_as_uint(s);
  return (bits >> 23) + ((bits & 0x7fffffu) != 0 ? 1u : 0u);
}

// The row of flat group `group` (groups_per_row groups a row), with 32-bit division where it fits.
JITKERN_DEVICE int64_t group_row(int64_t group, int64_t groups_per_row, int64_t total_groups) {
  return total_groups <= UINT32_MAX ? int64_t{static_cast<uint32_t>(group) / static_cast<uint32_t>(groups_per_row)} : group / groups_per_row;
}

// A group's dynamic scale scale_for<Q>(amax, eps); kUE8M0: rounded up to a power of two, whose biased
// exponent is also returned in `exponent`.
template <typename Q, bool kUE8M0, bool kNormalEps = false>  // kNormalEps: eps >= kNormalScaleEps<Q> (normal_scale_for)
JITKERN_DEVICE float group_scale(float amax, float eps, uint32_t& exponent) {
  const float scale = kNormalEps ? normal_scale_for<Q>(amax, eps) : scale_for<Q>(amax, eps);
  if constexpr (!kUE8M0) return scale;
  exponent = ue8m0_exponent(scale);
  return __uint_as_float(exponent << 23);
}

// The rounding policy of the ops that offer one (Python's rounding=, python/jitkern/ops/quant.py's
// rounding_policy). kExact: the rules above (the IEEE quotient x / s). kSglang: SGLang's per_token_group_quant_8bit
// arithmetic, bit for bit (it is built with --use_fast_math, so its fp32 multiplies flush subnormals):
//   amax  max |x| with NaN left out and +-inf included (AbsMax, no second look), m = max(amax, eps);
//   scale s = m * RN(1 / Q's largest), and the codes x * k with k = Q's largest / m by div.approx.ftz
//         (0 where m > 2^126, so such a group's codes are 0, and NaN for +-inf);
//   codes fp8: satfinite RNE of the fp32 product, bf16 inputs keeping NaN, fp16 and fp32 inputs through
//         fminf(v, 448) first (NaN -> 448); int8: clamped to [-128, 127] and truncated (NaN -> -128);
//   UE8M0 e = ue8m0_exponent(s) and k = 2^(127 - e), the scale's inverse, by its bits (-inf for e = 255);
//         16-bit inputs multiply by k rounded to their own type, packed, then take min(v, 448) there (bf16
//         keeping NaN).
// device::quant::sglang holds that arithmetic; the kernels choose it with a Rounding template parameter.
enum class Rounding { kExact, kSglang };

namespace sglang {

// a * b in fp32, subnormal operands and results flushed to zero (fast-math's mul.ftz).
JITKERN_DEVICE float mul(float a, float b) {
  float r;
  asm("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// A group's scale, from m = max(amax, eps).
template <typename Q>
JITKERN_DEVICE float scale(float m) {
  return mul(m, 1.0f / Format<Q>::kMax);
}

// The multiplier of a group's codes (fp32 scales), from m = max(amax, eps): fast-math's Q's largest / m.
template <typename Q>
JITKERN_DEVICE float multiplier(float m) {
  float r;
  asm("div.approx.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(Format<Q>::kMax), "f"(m));
  return r;
}

// The multiplier of a group's codes for UE8M0 exponent e (ue8m0_exponent of scale<fp8>(m)): 2^(127 - e)
// by its bits, wrapping as a 32-bit shift does (e = 254: 0; e = 255: -inf).
JITKERN_DEVICE float ue8m0_multiplier(uint32_t exponent) {
  return __uint_as_float((254u - exponent) << 23);
}

// A group's scale (to store), UE8M0 exponent and code multiplier, from its amax (AbsMax: NaN out, +-inf in).
struct GroupScale {
  float scale, k;
  uint32_t exponent;
};
template <typename Q, bool kUE8M0>
JITKERN_DEVICE GroupScale group_scale(float amax, float eps) {
  const float m = fmaxf(amax, eps), s = scale<Q>(m);
  if constexpr (kUE8M0) {
    const uint32_t e = ue8m0_exponent(s);
    return {__uint_as_float(e << 23), ue8m0_multiplier(e), e};
  } else {
    return {s, multiplier<Q>(m), 0u};
  }
}

// The codes of two values a, b of input type T (fp16, bf16 or fp32) with multiplier k, a's in the low byte
// (fp32 scales; and UE8M0 for fp32 inputs).
template <typename Q, typename T>
JITKERN_DEVICE uint32_t encode_pair(float a, float b, float k) {
  float x = mul(a, k), y = mul(b, k);
  if constexpr (std::is_same_v<Q, fp8_e4m3_t>) {
    if constexpr (!std::is_same_v<T, bf16_t>) x = fminf(x, Format<Q>::kMax), y = fminf(y, Format<Q>::kMax);
    return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(x, y), __NV_SATFINITE, __NV_E4M3));
  } else {
    static_assert(std::is_same_v<Q, int8_t>);
    const auto code = [](float v) { return static_cast<uint32_t>(static_cast<uint8_t>(static_cast<int8_t>(fminf(fmaxf(v, -128.0f), 127.0f)))); };
    return code(x) | (code(y) << 8);
  }
}

// The fp8 codes of a packed pair of 16-bit values with a UE8M0 multiplier k (ue8m0_multiplier), the low
// half's in the low byte: multiplied in their own type, then min(v, 448) (bf16 keeping NaN).
template <typename P>
  requires kIsPacked16<P>
JITKERN_DEVICE uint32_t encode_pair_ue8m0(P x, float k) {
  if constexpr (std::is_same_v<P, bf16x2_t>) {
    const bf16x2_t p = __hmin2_nan(__hmul2(x, __float2bfloat162_rn(k)), __float2bfloat162_rn(Format<fp8_e4m3_t>::kMax));
    return static_cast<uint32_t>(__nv_cvt_bfloat16raw2_to_fp8x2(p, __NV_SATFINITE, __NV_E4M3));
  } else {
    const fp16x2_t p = __hmin2(__hmul2(x, __float2half2_rn(k)), __float2half2_rn(Format<fp8_e4m3_t>::kMax));
    return static_cast<uint32_t>(__nv_cvt_halfraw2_to_fp8x2(p, __NV_SATFINITE, __NV_E4M3));
  }
}

// The codes of values 2i and 2i + 1 of x (values of an input type, or packed pairs of 16-bit ones) with
// multiplier k, the first in the low byte; one value (kN = 1): its code twice.
template <typename Q, bool kUE8M0, typename V, int kN>
JITKERN_DEVICE uint32_t pair_codes(const AlignedVector<V, kN>& x, int i, float k) {
  if constexpr (kIsPacked16<V>) {
    if constexpr (kUE8M0) {
      return encode_pair_ue8m0(x[i], k);
    } else {
      const fp32x2_t v = cast<fp32x2_t>(x[i]);
      return encode_pair<Q, std::conditional_t<std::is_same_v<V, bf16x2_t>, bf16_t, fp16_t>>(v.x, v.y, k);
    }
  } else {
    const V a = x[kN == 1 ? 0 : 2 * i], b = x[kN == 1 ? 0 : 2 * i + 1];
    if constexpr (kUE8M0 && sizeof(V) == 2) return encode_pair_ue8m0(packed_t<V>(a, b), k);
    else return encode_pair<Q, V>(cast<float>(a), cast<float>(b), k);
  }
}

// The codes of x (kN values, or kN packed pairs) with multiplier k stored at ptr with one store (aligned to their count).
template <typename Q, bool kUE8M0, typename V, int kN>
JITKERN_DEVICE void store_codes(uint8_t* ptr, const AlignedVector<V, kN>& x, float k) {
  constexpr int kCodes = kN * kValuesPer<V>;
  if constexpr (kCodes == 1) {
    *ptr = static_cast<uint8_t>(pair_codes<Q, kUE8M0>(x, 0, k));
  } else if constexpr (kCodes == 2) {
    *reinterpret_cast<uint16_t*>(ptr) = static_cast<uint16_t>(pair_codes<Q, kUE8M0>(x, 0, k));
  } else {
    static_assert(kCodes % 4 == 0);
    AlignedVector<uint32_t, kCodes / 4> words;
#pragma unroll
    for (int j = 0; j < kCodes / 4; ++j) words[j] = pair_codes<Q, kUE8M0>(x, 2 * j, k) | (pair_codes<Q, kUE8M0>(x, 2 * j + 1, k) << 16);
    words.store(reinterpret_cast<uint32_t*>(ptr));
  }
}

}  // namespace sglang

// Where group g of row r puts its scale: fp32 at scales[r * row_stride + g * group_stride], or (UE8M0)
// the byte g % 4 of the int32 at words[r * row_stride + g / 4 * group_stride]. `flat`: fp32 scales whose
// index is the group's flat number r * groups_per_row + g (row-major, contiguous).
struct GroupScales {
  void* base;
  int64_t row_stride, group_stride;
  bool flat;

  // Stores flat group `group`'s scale (group_scale's result and exponent); one thread per group.
  template <bool kUE8M0>
  JITKERN_DEVICE void store(int64_t group, int64_t groups_per_row, int64_t total_groups, float scale, uint32_t exponent) const {
    if (!kUE8M0 && flat) {
      static_cast<float*>(base)[group] = scale;
      return;
    }
    const int64_t row = group_row(group, groups_per_row, total_groups);
    store_at<kUE8M0>(row, group - row * groups_per_row, groups_per_row, scale, exponent);
  }
  // The same for group g of row `row`.
  template <bool kUE8M0>
  JITKERN_DEVICE void store_at(int64_t row, int64_t g, int64_t groups_per_row, float scale, uint32_t exponent) const {
    if constexpr (kUE8M0) {
      uint8_t* word = static_cast<uint8_t*>(base) + 4 * (row * row_stride + g / 4 * group_stride);
      word[g % 4] = static_cast<uint8_t>(exponent);
      if (g == groups_per_row - 1)  // the last word's unused bytes: 0, not whatever the buffer held
        for (int64_t b = g % 4 + 1; b < 4; ++b) word[b] = 0;
    } else {
      static_cast<float*>(base)[row * row_stride + g * group_stride] = scale;
    }
  }
};

// The dynamic amax of the values a group of threads holds. fold(op) folds op(acc, v) over this thread's
// values from 0 (both ops below also combine two partial folds); reduce_max(v) combines the group's
// partials (every thread gets the result; a second call must be safe, e.g. behind a barrier); any(b) is
// b, or a vote over the threads that reduce together when groups share a warp's shuffles. The plain max |v| (NaN left out by fmaxf) costs one instruction per
// value; only where it is inf is the group folded again without +-inf. `finite`: the group holds no
// +-inf, so its divisions may skip Divider's inf guard.
template <typename Fold, typename ReduceMax, typename Any>
JITKERN_DEVICE float dynamic_amax(const Fold& fold, const ReduceMax& reduce_max, const Any& any, bool& finite) {
  const float plain = reduce_max(fold(AbsMax{}));
  finite = plain < kInf;
  if (!any(!finite)) return plain;
  const float amax = reduce_max(fold(FiniteAbsMax{}));
  return finite ? plain : amax;
}

// x / s for an 8-bit code, which equals the code of the IEEE fp32 division, without a division per element:
// q0 = x * inv with inv = RN(1 / s), then one FMA residual correction, q0 - (q0 * s - x) * inv. Its error
// against x / s is (1 - s * inv)(q0 - x / s), under 2^-23 ulp: the fp32 result can differ from the IEEE
// quotient only where x / s is that close to an fp32 rounding midpoint, and the 8-bit code only where that
// midpoint is beside one of the type's rounding boundaries (values of at most 8 significant bits); an
// exhaustive host search of those cases over every divisor mantissa found none (docs/benchmarks/design.md).
// The residual is exact while |x| >= 2^-101, and for s >= 2^-64 a smaller x gives |x / s| <
// 2^-37, a zero code either way; s <= 2^126 keeps inv normal. A scale outside [2^-64, 2^126] (or NaN, or
// negative) divides the slow way (`slow`). The residual is formed as q0 * s - x and subtracted, which keeps
// the sign of a zero quotient (x = -0 gives -0). x = +-inf makes the residual NaN: fast() then returns x *
// inv, which is what x / s gives. `simple`: the dividends are known to be finite and x * inv not to
// overflow (a dynamic scale from their own amax keeps |x / s| <= Q's largest value), so every element takes
// fast_finite() (no test per element).
struct Divider {
  float s, inv;
  bool slow, simple;
  JITKERN_DEVICE explicit Divider(float scale, bool finite_dividends = false)
      : s(scale), inv(1.0f / scale), slow(!(scale >= 0x1p-64f && scale <= 0x1p126f)), simple(finite_dividends && !slow) {}
  // A scale known to be in the fast range, with its reciprocal RN(1 / scale) (normal_reciprocal).
  JITKERN_DEVICE Divider(float scale, float reciprocal, bool finite_dividends)
      : s(scale), inv(reciprocal), slow(false), simple(finite_dividends) {}
  // Only where !slow, and x is not +-inf.
  JITKERN_DEVICE float fast_finite(float x) const {
    const float q0 = x * inv;
    return fmaf(-fmaf(q0, s, -x), inv, q0);
  }
  // Only where !slow.
  JITKERN_DEVICE float fast(float x) const {
    const float q = fast_finite(x);
    return q == q ? q : x * inv;
  }
  JITKERN_DEVICE float operator()(float x) const { return slow ? x / s : fast(x); }
};

// The smallest eps for which every dynamic scale scale_for<Q>(amax, eps) is in Divider's fast range
// (Divider::slow is false: at least 2^-64, and at most FLT_MAX / Q's largest value < 2^126).
template <typename Q>
inline constexpr float kNormalScaleEps = Format<Q>::kMax * 0x1p-64f;
// Whether a kernel built with kNormalEps under kRounding takes eps (the host's launch rules): the exact rounding
// needs eps >= kNormalScaleEps<Q> (not NaN); the sglang rounding has no range tests to skip.
template <Rounding kRounding, typename Q = fp8_e4m3_t>
constexpr bool normal_eps_holds(float eps) {
  return kRounding == Rounding::kSglang || eps >= kNormalScaleEps<Q>;
}

// RN(1 / s) for s in Divider's fast range [2^-64, 2^126], without the IEEE division's range test: the
// approximate reciprocal and one Newton step, as nvcc's 1.0f / s computes it there (the same test checks each s).
JITKERN_DEVICE float normal_reciprocal(float s) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(s));
  return fmaf(r, fmaf(-r, s, 1.0f), r);
}

// The Divider of the dynamic scale scale_for<Q>(amax, eps) where eps >= kNormalScaleEps<Q>: the same bits
// without the divisions' range tests (normal_scale_for, normal_reciprocal). `finite`: Divider's.
template <typename Q>
JITKERN_DEVICE Divider normal_dynamic_divider(float amax, float eps, bool finite) {
  const float s = normal_scale_for<Q>(amax, eps);
  return Divider(s, normal_reciprocal(s), finite);
}

// The scale floor of the dynamic ops without an eps argument (per-tensor, per-token, norm + quant, the
// MoE activations' per-token form): their scales' reciprocals never overflow, so their stores skip that case.
inline constexpr float kDefaultScaleEps = 1e-10f;
static_assert(kDefaultScaleEps >= kNormalScaleEps<fp8_e4m3_t>);

// encode(divide) with the division x / s that s allows, decided once per vector, not per element.
template <bool kMaySlow, typename Encode>
JITKERN_DEVICE void with_division(const Divider& s, const Encode& encode) {
  if (s.simple) {
    encode([&](float v) { return s.fast_finite(v); });
  } else if (kMaySlow && s.slow) {
    encode([&](float v) { return v / s.s; });
  } else {
    encode([&](float v) { return s.fast(v); });
  }
}

// kVec values of T (kVec a multiple of 4) divided by s, as 8-bit codes four to a 32-bit word, into
// words[0, kVec / 4): assembled as words, since a byte array costs ~2 instructions a byte to pack; fp8
// converts two values per instruction. kMaySlow = false: the caller guarantees !s.slow (a dynamic scale
// whose eps is at least kNormalScaleEps), which leaves one branch per vector instead of two (4% of
// rmsnorm_quant_fp8's time in a same-run comparison).
template <typename Q, bool kMaySlow = true, typename T, int kVec>
  requires(!kIsPacked16<T> && kVec % 4 == 0)
JITKERN_DEVICE void quantized_words(uint32_t* words, const AlignedVector<T, kVec>& x, const Divider& s) {
  const auto encode = [&](auto divide) {
#pragma unroll
    for (int j = 0; j < kVec; j += 4) {
      if constexpr (std::is_same_v<Q, fp8_e4m3_t>) {  // two values per conversion, RNE, NaN kept
        const auto pair = [&](int k) {
          return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(divide(cast<float>(x[k])), divide(cast<float>(x[k + 1]))),
                                                                __NV_SATFINITE, __NV_E4M3));
        };
        words[j / 4] = pair(j) | (pair(j + 2) << 16);
      } else {
        const auto byte = [&](int k) { return static_cast<uint32_t>(Format<Q>::encode(divide(cast<float>(x[k])))); };
        words[j / 4] = __byte_perm(__byte_perm(byte(j), byte(j + 1), 0x0040), __byte_perm(byte(j + 2), byte(j + 3), 0x0040), 0x5410);
      }
    }
  };
  with_division<kMaySlow>(s, encode);
}

// kVec values of T (or kVec packed pairs of 16-bit values) divided by s and written as bytes with one
// store (ptr aligned to their count); kMaySlow: as quantized_words.
template <typename Q, bool kMaySlow = true, typename T, int kVec>
  requires(!kIsPacked16<T>)
JITKERN_DEVICE void store_quantized(uint8_t* ptr, const AlignedVector<T, kVec>& x, const Divider& s) {
  if constexpr (kVec % 4 == 0) {
    AlignedVector<uint32_t, kVec / 4> words;
    quantized_words<Q, kMaySlow>(words.data, x, s);
    words.store(reinterpret_cast<uint32_t*>(ptr));
  } else {
    with_division<kMaySlow>(s, [&](auto divide) {
      AlignedVector<uint8_t, kVec> q;
#pragma unroll
      for (int j = 0; j < kVec; ++j) q[j] = Format<Q>::encode(divide(cast<float>(x[j])));
      q.store(ptr);
    });
  }
}
// Packed pairs: widened to floats by their bits.
template <typename Q, bool kMaySlow = true, typename T, int kVec>
  requires kIsPacked16<T>
JITKERN_DEVICE void store_quantized(uint8_t* ptr, const AlignedVector<T, kVec>& x, const Divider& s) {
  AlignedVector<float, 2 * kVec> f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const fp32x2_t v = cast<fp32x2_t>(x[k]);
    f[2 * k] = v.x, f[2 * k + 1] = v.y;
  }
  store_quantized<Q, kMaySlow>(ptr, f, s);
}

// One group of values held by kLanes consecutive lanes (kLanes divides 32, so groups never straddle warps),
// kPerLane vectors each (of T, or of packed 16-bit pairs): the lane's vector j goes to out + j * kLanes *
// (its count of values), or with kContiguous (at most 16 codes a lane) to out + j * (its count of values),
// all of them with one store. Its dynamic scale group_scale<Q, kUE8M0>(finite amax, eps) divides it, and the
// group's first lane calls store_scale(scale, exponent). `lanes`: the mask of the lanes that call this
// together (the whole warp, or only the group's own), whose votes and shuffles they share. `valid`: the
// lane's group exists (the others only take part in the votes and shuffles). kRounding: the codes and scale
// as Rounding says (kSglang: one plain amax, no vote, and sglang::'s arithmetic). kNormalEps: eps >=
// kNormalScaleEps<Q>, so the exact scale and its reciprocal skip the divisions' range tests (the same bits).
template <typename Q, int kLanes, int kPerLane, bool kUE8M0, bool kContiguous = false, Rounding kRounding = Rounding::kExact,
          bool kNormalEps = false, typename T, int kVec, typename StoreScale>
JITKERN_DEVICE void quantize_group_with(const AlignedVector<T, kVec> (&x)[kPerLane], bool valid, uint8_t* out, float eps, unsigned lanes,
                                        const StoreScale& store_scale) {
  const auto fold = [&](auto op) {
    float acc = 0.0f;
    if constexpr (kIsPacked16<T>) {
      if (valid) acc = fold_pairs(x, op, acc);
    } else {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j)
        if (valid) acc = op(acc, norm::VecMath<T, kVec>::fold(x[j], op, 0.0f));
    }
    return acc;
  };
  constexpr int kCodes = kVec * kValuesPer<T>;  // a vector's
  if constexpr (kRounding == Rounding::kSglang) {
    const sglang::GroupScale g = sglang::group_scale<Q, kUE8M0>(warp::reduce_max_nonnegative<kLanes>(fold(AbsMax{}), lanes), eps);
    if (!valid) return;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) sglang::store_codes<Q, kUE8M0>(out + j * (kContiguous ? 1 : kLanes) * kCodes, x[j], g.k);
    if (threadIdx.x % kLanes == 0) store_scale(g.scale, g.exponent);
    return;
  }
  // A second look (a group holding +-inf) is voted for by all of `lanes`.
  bool finite;
  const float amax = dynamic_amax(fold, [&](float v) { return warp::reduce_max_nonnegative<kLanes>(v, lanes); },
                                  [&](bool b) { return __any_sync(lanes, b); }, finite);
  uint32_t exponent = 0;
  const float scale = group_scale<Q, kUE8M0, kNormalEps>(amax, eps, exponent);
  if (!valid) return;
  const Divider s = kNormalEps ? Divider(scale, normal_reciprocal(scale), finite) : Divider(scale, finite);
  if constexpr (kContiguous) {
    static_assert(kCodes % 4 == 0 && kPerLane * kCodes <= 16, "contiguous: at most 16 codes a lane, whole words");
    AlignedVector<uint32_t, kPerLane * kCodes / 4> words;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      if constexpr (kIsPacked16<T>) {  // widened to floats by their bits, as store_quantized does
        AlignedVector<float, kCodes> f;
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const fp32x2_t v = cast<fp32x2_t>(x[j][k]);
          f[2 * k] = v.x, f[2 * k + 1] = v.y;
        }
        quantized_words<Q>(words.data + j * kCodes / 4, f, s);
      } else {
        quantized_words<Q>(words.data + j * kCodes / 4, x[j], s);
      }
    }
    words.store(reinterpret_cast<uint32_t*>(out));
  } else {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) store_quantized<Q>(out + j * kLanes * kVec * kValuesPer<T>, x[j], s);
  }
  if (threadIdx.x % kLanes == 0) store_scale(scale, exponent);
}

// quantize_group_with called by every lane of the warp, storing the scale of flat group `group` (GroupScales).
template <typename Q, int kLanes, int kPerLane, bool kUE8M0, bool kContiguous = false, Rounding kRounding = Rounding::kExact, typename T,
          int kVec>
JITKERN_DEVICE void quantize_group(const AlignedVector<T, kVec> (&x)[kPerLane], bool valid, uint8_t* out, float eps, const GroupScales& scales,
                                   int64_t group, int64_t groups_per_row, int64_t total_groups) {
  quantize_group_with<Q, kLanes, kPerLane, kUE8M0, kContiguous, kRounding>(x, valid, out, eps, 0xffffffffu, [&](float scale, uint32_t exponent) {
    scales.store<kUE8M0>(group, groups_per_row, total_groups, scale, exponent);
  });
}

template <typename T, int kVec>
JITKERN_DEVICE float vector_amax(const AlignedVector<T, kVec>& x, float acc) {
#pragma unroll
  for (int j = 0; j < kVec; ++j) acc = finite_amax(acc, cast<float>(x[j]));
  return acc;
}

// The norm epilogue (see device::norm::StoreOutput for the interface) that writes the normalised row,
// rounded to T as rmsnorm would write it, as Q values: q[row] = y / s. Static: s is *static_scale (read
// after the kernel's PDL wait). Dynamic: s = scale_for<Q>(amax of the row's y, eps), written to
// scales[row]; eps must be at least kNormalScaleEps<Q>. Rows are tokens (one row problem, one row per
// token).
template <typename Q, bool kDynamic>
struct QuantizeRows {
  uint8_t* q;
  int64_t q_row_stride;        // elements
  float* scales;               // dynamic: one per row
  const float* static_scale;   // static
  float eps;

  template <typename T, int kVec>
  struct Row {
    static constexpr bool kNeedsAmax = kDynamic;
    uint8_t* q;
    float* scale_out;
    const float* static_scale;
    float eps;
    template <typename Fold, typename ReduceMax>
    JITKERN_DEVICE Divider scale(const Fold& fold, const ReduceMax& reduce_max) const {
      if constexpr (kDynamic) {
        bool finite;
        const float amax = dynamic_amax(fold, reduce_max, [](bool b) { return b; }, finite);
        return normal_dynamic_divider<Q>(amax, eps, finite);
      } else {
        return Divider(*static_scale);
      }
    }
    JITKERN_DEVICE void store(const AlignedVector<T, kVec>& y, int64_t at, const Divider& s) const {
      store_quantized<Q, !kDynamic>(q + at, y, s);
    }
    JITKERN_DEVICE void finish(const Divider& s) const {
      if constexpr (kDynamic) *scale_out = s.s;
    }
  };

  template <typename T, int kVec>
  JITKERN_DEVICE Row<T, kVec> row(const norm::RowPointers<T>&, uint32_t r) const {
    return {q + r * q_row_stride, kDynamic ? scales + r : nullptr, static_scale, eps};
  }
  // The same rows, `tokens` further on (launches of at most 2^30 rows).
  QuantizeRows shifted(int64_t tokens) const {
    QuantizeRows s = *this;
    s.q += tokens * q_row_stride;
    if (kDynamic) s.scales += tokens;
    return s;
  }
  // Whether kVec-element stores are aligned for every row.
  bool allows_vector(int vec) const { return reinterpret_cast<uintptr_t>(q) % vec == 0 && q_row_stride % vec == 0; }
};

// The norm epilogue (see device::norm::StoreOutput) that writes the normalised row, rounded to T as rmsnorm
// would write it, as fp8 in groups of kGroup consecutive elements, each divided by its own dynamic scale
// group_scale<fp8, kUE8M0>(finite amax of the group, eps), stored where GroupScales says (row = token): the
// bits per_token_group_quant gives for the rounded row. The norm kernels hand consecutive vectors to
// consecutive lanes (vector i of a block of whole warps' vectors to lane i), so with hidden a multiple of
// kGroup a group is one vector in each of kGroup / kVec consecutive lanes, all of them holding it or none:
// its amax is a shuffle reduction among those lanes alone, while the row stays in registers. That takes
// kGroup / kVec <= 32, 16-byte vectors (kVectorsOnly: the caller checks the operands allow them). kRounding:
// the codes and scales of per_token_group_quant with that rounding. eps >= kNormalScaleEps<fp8>.
template <int kGroup, bool kUE8M0, Rounding kRounding = Rounding::kExact>
struct QuantizeGroups {
  static constexpr bool kVectorsOnly = true;
  static constexpr bool kOneVectorPerThread = true;  // a group reduction per store
  static constexpr int64_t kMinRowElements = kGroup;  // rows are whole groups
  uint8_t* q;
  int64_t q_row_stride;  // elements
  GroupScales scales;
  int64_t groups_per_row;
  int64_t first_row;  // of this launch, in the scales' rows
  float eps;

  template <typename T, int kVec>
  struct Row {
    static constexpr bool kNeedsAmax = false;
    static constexpr int kLanes = kGroup / kVec;
    uint8_t* q;
    GroupScales scales;
    int64_t row, groups_per_row;
    float eps;
    template <typename Fold, typename ReduceMax>
    JITKERN_DEVICE float scale(const Fold&, const ReduceMax&) const {
      return 0.0f;
    }
    JITKERN_DEVICE void store(const AlignedVector<T, kVec>& y, int64_t at, float) const {
      if constexpr (kLanes <= kWarpThreads) {  // else never launched (kVectorsOnly)
        const auto store_scale = [&](float s, uint32_t e) { scales.template store_at<kUE8M0>(row, at / kGroup, groups_per_row, s, e); };
        const unsigned lanes = norm::WarpGroup<kLanes>::lanes();
        if constexpr (sizeof(T) == 2) {  // as packed pairs: the amax by packed max and min (fold_pairs)
          AlignedVector<packed_t<T>, kVec / 2> x[1];
#pragma unroll
          for (int k = 0; k < kVec / 2; ++k) x[0][k] = packed_t<T>(y[2 * k], y[2 * k + 1]);
          quantize_group_with<fp8_e4m3_t, kLanes, 1, kUE8M0, false, kRounding, true>(x, true, q + at, eps, lanes, store_scale);
        } else {
          const AlignedVector<T, kVec> x[1] = {y};
          quantize_group_with<fp8_e4m3_t, kLanes, 1, kUE8M0, false, kRounding, true>(x, true, q + at, eps, lanes, store_scale);
        }
      }
    }
    JITKERN_DEVICE void finish(float) const {}
  };

  template <typename T, int kVec>
  JITKERN_DEVICE Row<T, kVec> row(const norm::RowPointers<T>&, uint32_t r) const {
    return {q + r * q_row_stride, scales, first_row + r, groups_per_row, eps};
  }
  // The same rows, `tokens` further on (launches of at most 2^30 rows).
  QuantizeGroups shifted(int64_t tokens) const {
    QuantizeGroups s = *this;
    s.q += tokens * q_row_stride;
    s.first_row += tokens;
    return s;
  }
  bool allows_vector(int vec) const { return reinterpret_cast<uintptr_t>(q) % vec == 0 && q_row_stride % vec == 0; }
};

}  // namespace device::quant

#ifndef __CUDACC_RTC__
namespace host::quant {

struct CheckedGroupScales {
  device::quant::GroupScales scales;
  bool ue8m0;  // int32 words of four UE8M0 exponents, else fp32 scales
};

// output_s of a per-group quantization of `rows` rows of `groups` groups: fp32 [rows, groups] with any
// strides (row-major, column-major, TMA-aligned column-major) or int32 [rows, ceil(groups / 4)] of
// packed UE8M0 exponents, on `device`.
inline CheckedGroupScales verify_group_scales(jitkern::TensorView output_s, int64_t rows, int64_t groups, SymbolicDevice& device) {
  const bool ue8m0 = is_type<int32_t>(output_s.dtype());
  auto s_rows = SymbolicSize{"output_s_row_stride"}, s_groups = SymbolicSize{"output_s_group_stride"};
  TensorMatcher({rows, ue8m0 ? div_ceil(groups, 4) : groups})
      .with_strides({s_rows, s_groups})
      .with_dtype<float, int32_t>()
      .with_device(device_v<kDLCUDA>, device)
      .verify(output_s, "output_s");
  const int64_t s_row = s_rows.has_value() ? s_rows.unwrap() : 0, s_group = s_groups.has_value() ? s_groups.unwrap() : 0;
  check_disjoint(Extents{rows, ue8m0 ? div_ceil(groups, 4) : groups}, Extents{s_row, s_group}, "output_s");
  const bool flat = !ue8m0 && (groups <= 1 || s_group == 1) && (rows <= 1 || s_row == groups);
  return {{output_s.data_ptr(), s_row, s_group, flat}, ue8m0};
}

}  // namespace host::quant
#endif  // __CUDACC_RTC__
