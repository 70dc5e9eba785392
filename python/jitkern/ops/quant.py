"""The 8-bit quantization family (csrc/quant.cuh): per-tensor and per-token fp8, per-token-group fp8/int8
with the scale layouts FP8 GEMMs read, and RMSNorm (optionally after a residual add) written straight to
fp8 with a per-tensor, per-token or per-group (1x64, 1x128) scale. Inputs fp16/bf16/fp32 CUDA tensors
[..., H] (the last dimension contiguous, rows may be strided).

The norm + per-group ops belong here rather than to a family of their own: they give the bits and the
scale layouts of per_token_group_quant_8bit, whose rules (the group scale, UE8M0 packing, the layouts'
strides) live in this family (include/jitkern/impl/quant.cuh, group_scales_like), and they are one more
quantizing epilogue of the norm kernels beside rmsnorm_quant_fp8's; a second family would copy those rules.

q = saturate(round_to_nearest_even(x / s)), the division in fp32: fp8 e4m3 saturates to +-448 (+-inf too)
and keeps NaN; int8 saturates to +-127 and writes NaN as 0. A dynamic scale is max(amax, eps) / 448 (int8:
/ 127), where amax is the largest finite |x| of the tensor, row or group: NaN and +-inf do not enter it.
per_token_group_quant_8bit(rounding="sglang") gives SGLang's bits instead (Rounding; docs/ops.md says how).

The C++ entry points check every argument and name the bad one; Python picks the instantiation by dtype,
allocates outputs (it owns the scale layouts) and passes fp8 tensors as their bytes. Each op is also a
torch custom op (torch.ops.jitkern.*), which is what torch.compile traces."""

from __future__ import annotations

from typing import NamedTuple

from .._torch import compiling, torch
from ._declare import Family, TorchOp
from ._dtype_family import DtypeFamily
from ._fp8 import _bytes, _check_scale, check_group_size, check_scales_format, group_scales_for, group_scales_like
from ._shapes import as_rows


class Rounding(NamedTuple):
    """A rounding policy of the ops that take rounding= (device::quant::Rounding, include/jitkern/impl/quant.cuh,
    documents both): "exact", the IEEE quotient x / s (the default); "sglang", SGLang's per_token_group_quant_8bit
    arithmetic, bit for bit (the codes x * (448 / amax), a multiply a value)."""
    name: str
    cpp: str     # the C++ template argument
    suffix: str  # of the exports that build it: "" or "_sglang"


ROUNDINGS = {r.name: r for r in (Rounding("exact", "device::quant::Rounding::kExact", ""),
                                 Rounding("sglang", "device::quant::Rounding::kSglang", "_sglang"))}


def rounding_policy(rounding: str, public: str) -> Rounding:
    """rounding= of op `public` checked: its Rounding, or a ValueError naming the argument and the choices."""
    policy = ROUNDINGS.get(rounding) if isinstance(rounding, str) else None
    if policy is None:
        raise ValueError(f"{public}(): rounding must be one of {', '.join(map(repr, ROUNDINGS))}, got {rounding!r}")
    return policy


_NORM_GROUP_SIZES = (64, 128)  # the group sizes of the norm + per-group ops


def _norm_group_export(op: str, ue8m0: str, rounding: Rounding, group_size: int) -> str:
    """The export of a norm + per-group op for its scale format (ue8m0: "" or "_ue8m0"), rounding and group size:
    a module each, so that a first call builds one group size's kernels."""
    return f"{op}{ue8m0}{rounding.suffix}_g{group_size}"


# The norm + per-group ops: their C++ parameters and a module's compile seconds (estimates: about
# rmsnorm_quant_dynamic's kernels, for one group size; not yet measured).
_NORM_GROUP_OPS = {"rmsnorm_group_quant": ("input, weight, output_q, output_s, group_size, eps", 3.0),
                   "fused_add_rmsnorm_group_quant": ("input, residual, weight, output_q, output_s, group_size, eps", 3.25)}
# their exports -> (op, C++ member)
_NORM_GROUP = {_norm_group_export(op, ue8m0, r, g): (op, f"{op}{ue8m0}<{g}, {r.cpp}>") for op in _NORM_GROUP_OPS
               for ue8m0 in ("", "_ue8m0") for r in ROUNDINGS.values() for g in _NORM_GROUP_SIZES}


# per_token_group_quant_8bit's exports, one per output format (the base names, the exact rounding's) and rounding
# policy -> (base name, C++ member)
_GROUP_FORMATS = ("per_token_group_quant", "per_token_group_quant_ue8m0", "per_token_group_quant_int8")
_GROUP = {f"{op}{r.suffix}": (op, f"{op}<{r.cpp}>") for op in _GROUP_FORMATS for r in ROUNDINGS.values()}


def _norm_group_exports(op: str) -> tuple[str, ...]:
    """The exports a norm + per-group op may call: one per scale format, rounding and group size."""
    return tuple(e for e, (o, _) in _NORM_GROUP.items() if o == op)


_FAMILY = DtypeFamily("quant", "jitkern_quant::QuantOps", {
    "per_tensor_quant_static": "input, output_q, output_s",
    "per_tensor_quant_dynamic": "input, output_q, output_s",
    "per_token_quant": "input, output_q, output_s",
    **{e: "input, output_q, output_s, group_size, eps" for e in _GROUP},
    "rmsnorm_quant_static": "input, weight, output_q, scale, eps",
    "rmsnorm_quant_dynamic": "input, weight, output_q, output_s, eps",
    "fused_add_rmsnorm_quant_static": "input, residual, weight, output_q, scale, eps",
    "fused_add_rmsnorm_quant_dynamic": "input, residual, weight, output_q, output_s, eps",
    **{e: _NORM_GROUP_OPS[op][0] for e, (op, _) in _NORM_GROUP.items()},
},  # Each module's compile seconds, bf16 (H100 host, 16 builds at once): the order parallel builds start in.
   compile_seconds={"per_tensor_quant_static": 2.3, "per_tensor_quant_dynamic": 2.9, "per_token_quant": 2.0,
                    **{e: {"per_token_group_quant": 3.0, "per_token_group_quant_ue8m0": 2.8, "per_token_group_quant_int8": 3.0}[op]
                       for e, (op, _) in _GROUP.items()}, "rmsnorm_quant_static": 3.3,
                    "rmsnorm_quant_dynamic": 3.5, "fused_add_rmsnorm_quant_static": 3.7, "fused_add_rmsnorm_quant_dynamic": 3.4,
                    **{e: _NORM_GROUP_OPS[op][1] for e, (op, _) in _NORM_GROUP.items()}},
   members={e: member for e, (_, member) in (*_GROUP.items(), *_NORM_GROUP.items())},
   device_parts=dict.fromkeys(_NORM_GROUP, 3))  # csrc/quant.cuh's group kernels of few / many rows, the cluster kernel
FAMILY = Family(_FAMILY, helpers=("group_scales_like",))
spec = _FAMILY.spec


def _rows(x, public: str):
    """x as [rows, H] (a view where the strides allow); 1-D is one row."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{public}(): input must be a torch.Tensor, got {type(x).__name__}")
    return x if x.dim() == 2 else as_rows(x, public, "input", writes=False)  # the common case without a call


def _empty_q(x, dtype=None):
    return torch.empty(x.shape, dtype=dtype or torch.float8_e4m3fn, device=x.device)


# ---- per-tensor ------------------------------------------------------------------------------------

# The torch custom ops are functional forms (fused_add_rmsnorm_quant_fp8's also writes residual); their fakes
# allocate what the eager paths allocate.
@FAMILY.op("per_tensor_quant_static", "per_tensor_quant_dynamic", torch=(TorchOp(
    "per_tensor_quant_fp8", "(Tensor input, Tensor? scale) -> (Tensor, Tensor)",
    lambda input, scale: per_tensor_quant_fp8(input, None, None if scale is None else scale.clone(), scale is not None),
    lambda input, scale: (_empty_q(input), torch.empty(1, dtype=torch.float32, device=input.device))),))
def per_tensor_quant_fp8(input: torch.Tensor, output_q: torch.Tensor | None = None, output_s: torch.Tensor | None = None,
                         is_static: bool = False):
    """Returns (q, s): q = fp8(input / s) with one fp32 scale s ([1]). Static: s is output_s, as given.
    Dynamic: s = max(amax(|input|), 1e-10) / 448 is computed and written to output_s, whatever it held."""
    if is_static and output_s is None:
        raise ValueError("per_tensor_quant_fp8(): is_static=True needs the scale in output_s")
    if compiling():
        q, s = torch.ops.jitkern.per_tensor_quant_fp8(input, output_s if is_static else None)
        return _into(q, s, output_q, None if is_static else output_s)
    fn = _FAMILY.function("per_tensor_quant_static" if is_static else "per_tensor_quant_dynamic", input, "per_tensor_quant_fp8")
    q = _empty_q(input) if output_q is None else output_q
    s = torch.empty(1, dtype=torch.float32, device=input.device) if output_s is None else output_s
    fn(_rows(input, "per_tensor_quant_fp8"), _bytes(q, "output_q", "per_tensor_quant_fp8"), _check_scale(s, "per_tensor_quant_fp8", "output_s"))
    return q, s


def _into(q, s, output_q, output_s):
    """Under torch.compile the ops are functional: given output buffers are filled by copy."""
    if output_q is not None:
        output_q.copy_(q)
        q = output_q
    if output_s is not None:
        output_s.copy_(s)
        s = output_s
    return q, s


# ---- per-token -------------------------------------------------------------------------------------

def _token_scales(x):
    return torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)


@FAMILY.op("per_token_quant", torch=(TorchOp("per_token_quant_fp8", "(Tensor input) -> (Tensor, Tensor)", None,
                                                lambda input: (_empty_q(input), _token_scales(input))),))
def per_token_quant_fp8(input: torch.Tensor, output_q: torch.Tensor | None = None, output_s: torch.Tensor | None = None):
    """Returns (q, s): one dynamic scale per row, s[..., 0] = max(amax(|row|), 1e-10) / 448, s of shape
    [..., 1] (fp32); q = fp8(row / s)."""
    if compiling():
        return _into(*torch.ops.jitkern.per_token_quant_fp8(input), output_q, output_s)
    fn = _FAMILY.function("per_token_quant", input, "per_token_quant_fp8")
    q = _empty_q(input) if output_q is None else output_q
    s = _token_scales(input) if output_s is None else output_s
    fn(_rows(input, "per_token_quant_fp8"), _bytes(q, "output_q", "per_token_quant_fp8"), s.view(-1))
    return q, s


# ---- per-token-group -------------------------------------------------------------------------------

def _ue8m0_suffix(scale_ue8m0: bool) -> str:
    """The suffix of the export for UE8M0 scales ("_ue8m0"); a given output_s holds that format (check_scales_format)."""
    return "_ue8m0" if scale_ue8m0 else ""


# (The op's implementation and fake default `rounding` too: torch leaves out an argument equal to its schema default.)
@FAMILY.op(*_GROUP, torch=(TorchOp(
    "per_token_group_quant_8bit",
    "(Tensor input, int group_size, bool int8, float eps, bool column_major_scales, bool scale_tma_aligned, bool scale_ue8m0,"
    ' str rounding="exact") -> (Tensor, Tensor)',
    lambda input, group_size, int8, eps, cm, tma, ue8m0, rounding="exact": per_token_group_quant_8bit(
        input, group_size, torch.int8 if int8 else None, eps, column_major_scales=cm, scale_tma_aligned=tma, scale_ue8m0=ue8m0,
        rounding=rounding),
    lambda input, group_size, int8, eps, cm, tma, ue8m0, rounding="exact": (
        _empty_q(input, torch.int8 if int8 else None),
        group_scales_like(input, group_size, column_major_scales=cm, scale_tma_aligned=tma, scale_ue8m0=ue8m0))),))
def per_token_group_quant_8bit(input: torch.Tensor, group_size: int, dtype=None, eps: float = 1e-10, *,
                               column_major_scales: bool = False, scale_tma_aligned: bool = False, scale_ue8m0: bool = False,
                               rounding: str = "exact", output_q: torch.Tensor | None = None, output_s: torch.Tensor | None = None):
    """Returns (q, s): one scale per group of group_size (32, 64 or 128) consecutive elements of a row,
    s = max(amax(|group|), eps) / 448 for fp8 (dtype float8_e4m3fn, the default) or / 127 for int8;
    q = round(group / s). scale_ue8m0: s rounded up to a power of two and stored as its 8-bit exponent,
    packed four per int32 (fp8 only). The layout flags: group_scales_like. rounding: "exact" (the rules
    above) or "sglang" (SGLang's per_token_group_quant_8bit bits: docs/ops.md)."""
    public = "per_token_group_quant_8bit"
    policy = rounding_policy(rounding, public)
    dtype = torch.float8_e4m3fn if dtype is None else dtype
    if dtype not in (torch.float8_e4m3fn, torch.int8):
        raise TypeError(f"{public}(): dtype must be torch.float8_e4m3fn or torch.int8, got {dtype}")
    if scale_ue8m0 and dtype != torch.float8_e4m3fn:
        raise ValueError(f"{public}(): scale_ue8m0 needs dtype=torch.float8_e4m3fn, got {dtype}")
    check_scales_format(output_s, scale_ue8m0, public)
    if compiling():
        q, s = torch.ops.jitkern.per_token_group_quant_8bit(input, group_size, dtype == torch.int8, eps, column_major_scales,
                                                            scale_tma_aligned, scale_ue8m0, policy.name)
        return _into(q, s, output_q, output_s)
    # The export of the outputs' format (C++ checks the outputs against it): each compiles only its own kernels.
    if (dtype if output_q is None else getattr(output_q, "dtype", None)) == torch.int8:
        export = "per_token_group_quant_int8"
    else:
        export = "per_token_group_quant" + _ue8m0_suffix(scale_ue8m0)
    fn = _FAMILY.function(export + policy.suffix, input, public)
    check_group_size(group_size, public)
    q = _empty_q(input, dtype) if output_q is None else output_q
    s = output_s if output_s is not None else group_scales_for(input, group_size, column_major_scales, scale_tma_aligned, scale_ue8m0, public)
    s2 = s.view(-1, s.shape[-1]) if s.dim() != 2 else s
    fn(_rows(input, public), _bytes(q, "output_q", public, allow_int8=True), s2, group_size, float(eps))
    return q, s


# ---- RMSNorm + quantization ------------------------------------------------------------------------

def _norm_quant(op: str, public: str, input, residual, weight, eps, scale, output_q, output_s):
    fn = _FAMILY.function(op + ("_dynamic" if scale is None else "_static"), input, public)
    q = _empty_q(input) if output_q is None else output_q
    if scale is None:
        s = _token_scales(input) if output_s is None else output_s
        scales = s.view(-1)
    else:
        s = scales = _check_scale(scale, public)
    head = (_rows(input, public),) if residual is None else (_rows(input, public), as_rows(residual, public, "residual", writes=True))
    fn(*head, weight, _bytes(q, "output_q", public), scales, eps)
    return q, s


def _fake_norm_quant(input, *args):
    scale = args[-1]
    return _empty_q(input), (_token_scales(input) if scale is None else torch.empty(1, dtype=torch.float32, device=input.device))


@FAMILY.op("rmsnorm_quant_static", "rmsnorm_quant_dynamic", torch=(TorchOp(
    "rmsnorm_quant_fp8", "(Tensor input, Tensor weight, float eps, Tensor? scale) -> (Tensor, Tensor)",
    lambda input, weight, eps, scale: _norm_quant("rmsnorm_quant", "rmsnorm_quant_fp8", input, None, weight, eps,
                                                  None if scale is None else scale.clone(), None, None),
    _fake_norm_quant),))
def rmsnorm_quant_fp8(input: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, scale: torch.Tensor | None = None,
                      output_q: torch.Tensor | None = None, output_s: torch.Tensor | None = None):
    """Returns (q, s): y = rmsnorm(input) * weight (rounded to input's dtype, as rmsnorm writes it),
    q = fp8(y / s), in one pass. With scale (fp32, one element): s = scale (static). Without: one dynamic
    scale per row, s[..., 0] = max(amax(|y|), 1e-10) / 448."""
    if compiling():
        return _into(*torch.ops.jitkern.rmsnorm_quant_fp8(input, weight, eps, scale), output_q, None if scale is not None else output_s)
    return _norm_quant("rmsnorm_quant", "rmsnorm_quant_fp8", input, None, weight, eps, scale, output_q, output_s)


@FAMILY.op("fused_add_rmsnorm_quant_static", "fused_add_rmsnorm_quant_dynamic", torch=(TorchOp(
    "fused_add_rmsnorm_quant_fp8", "(Tensor input, Tensor(a!) residual, Tensor weight, float eps, Tensor? scale) -> (Tensor, Tensor)",
    lambda input, residual, weight, eps, scale: _norm_quant(
        "fused_add_rmsnorm_quant", "fused_add_rmsnorm_quant_fp8", input, residual, weight, eps,
        None if scale is None else scale.clone(), None, None),
    _fake_norm_quant),))
def fused_add_rmsnorm_quant_fp8(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *,
                                scale: torch.Tensor | None = None, output_q: torch.Tensor | None = None,
                                output_s: torch.Tensor | None = None):
    """residual += input (in place, as fused_add_rmsnorm), then rmsnorm_quant_fp8 of the new residual.
    input is left as it was. Returns (q, s)."""
    if compiling():
        q, s = torch.ops.jitkern.fused_add_rmsnorm_quant_fp8(input, residual, weight, eps, scale)
        return _into(q, s, output_q, None if scale is not None else output_s)
    return _norm_quant("fused_add_rmsnorm_quant", "fused_add_rmsnorm_quant_fp8", input, residual, weight, eps, scale, output_q, output_s)


# ---- RMSNorm + per-group quantization --------------------------------------------------------------

def _norm_group_quant(op: str, public: str, input, residual, weight, eps, group_size, column_major_scales, scale_tma_aligned,
                      scale_ue8m0, rounding, output_q, output_s):
    check_group_size(group_size, public)
    if group_size not in _NORM_GROUP_SIZES:
        raise ValueError(f"{public}(): group_size must be {' or '.join(map(str, _NORM_GROUP_SIZES))}, got {group_size}")
    policy = rounding_policy(rounding, public)
    fn = _FAMILY.function(_norm_group_export(op, _ue8m0_suffix(scale_ue8m0), policy, group_size), input, public)
    q = _empty_q(input) if output_q is None else output_q
    s = output_s if output_s is not None else group_scales_for(input, group_size, column_major_scales, scale_tma_aligned, scale_ue8m0, public)
    s2 = s.view(-1, s.shape[-1]) if s.dim() != 2 else s
    head = (_rows(input, public),) if residual is None else (_rows(input, public), as_rows(residual, public, "residual", writes=True))
    fn(*head, weight, _bytes(q, "output_q", public), s2, group_size, eps)
    return q, s


def _fake_norm_group_quant(input, *args):
    group_size, cm, tma, ue8m0 = args[-5:-1]
    return _empty_q(input), group_scales_like(input, group_size, column_major_scales=cm, scale_tma_aligned=tma, scale_ue8m0=ue8m0)


_GROUP_FLAGS = "int group_size, bool column_major_scales, bool scale_tma_aligned, bool scale_ue8m0, str rounding"


@FAMILY.op(*_norm_group_exports("rmsnorm_group_quant"), torch=(TorchOp(
    "rmsnorm_group_quant_fp8", f"(Tensor input, Tensor weight, float eps, {_GROUP_FLAGS}) -> (Tensor, Tensor)",
    lambda input, weight, eps, group_size, cm, tma, ue8m0, rounding: _norm_group_quant(
        "rmsnorm_group_quant", "rmsnorm_group_quant_fp8", input, None, weight, eps, group_size, cm, tma, ue8m0, rounding, None, None),
    _fake_norm_group_quant),))
def rmsnorm_group_quant_fp8(input: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, group_size: int = 128,
                            column_major_scales: bool = False, scale_tma_aligned: bool = False, scale_ue8m0: bool = False,
                            rounding: str = "exact", output_q: torch.Tensor | None = None, output_s: torch.Tensor | None = None):
    """Returns (q, s): y = rmsnorm(input) * weight (rounded to input's dtype, as rmsnorm writes it), quantized
    to fp8 e4m3 in groups of group_size (64 or 128) consecutive elements of a row, each with its dynamic
    scale max(amax(|group|), 1e-10) / 448, in one pass, as per_token_group_quant_8bit quantizes the row and
    in its scale layouts (the flags: group_scales_like; scale_ue8m0: powers of two as packed exponents) and
    with its rounding= ("exact" or "sglang": per_token_group_quant_8bit's bits for the rounded row);
    against rmsnorm then per_token_group_quant_8bit, the row's sum of squares may round an ulp apart
    (docs/ops.md says where and what it changes). The last dimension must be a multiple of group_size;
    input, weight and q must allow 16-byte vectors."""
    check_scales_format(output_s, scale_ue8m0, "rmsnorm_group_quant_fp8")
    if compiling():
        q, s = torch.ops.jitkern.rmsnorm_group_quant_fp8(input, weight, eps, group_size, column_major_scales, scale_tma_aligned, scale_ue8m0,
                                                         rounding)
        return _into(q, s, output_q, output_s)
    return _norm_group_quant("rmsnorm_group_quant", "rmsnorm_group_quant_fp8", input, None, weight, eps, group_size, column_major_scales,
                             scale_tma_aligned, scale_ue8m0, rounding, output_q, output_s)


@FAMILY.op(*_norm_group_exports("fused_add_rmsnorm_group_quant"), torch=(TorchOp(
    "fused_add_rmsnorm_group_quant_fp8",
    f"(Tensor input, Tensor(a!) residual, Tensor weight, float eps, {_GROUP_FLAGS}) -> (Tensor, Tensor)",
    lambda input, residual, weight, eps, group_size, cm, tma, ue8m0, rounding: _norm_group_quant(
        "fused_add_rmsnorm_group_quant", "fused_add_rmsnorm_group_quant_fp8", input, residual, weight, eps, group_size, cm, tma, ue8m0,
        rounding, None, None),
    _fake_norm_group_quant),))
def fused_add_rmsnorm_group_quant_fp8(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *,
                                      group_size: int = 128, column_major_scales: bool = False, scale_tma_aligned: bool = False,
                                      scale_ue8m0: bool = False, rounding: str = "exact", output_q: torch.Tensor | None = None,
                                      output_s: torch.Tensor | None = None):
    """residual += input (in place, as fused_add_rmsnorm), then rmsnorm_group_quant_fp8 of the new residual.
    input is left as it was. Returns (q, s)."""
    check_scales_format(output_s, scale_ue8m0, "fused_add_rmsnorm_group_quant_fp8")
    if compiling():
        q, s = torch.ops.jitkern.fused_add_rmsnorm_group_quant_fp8(input, residual, weight, eps, group_size, column_major_scales,
                                                                   scale_tma_aligned, scale_ue8m0, rounding)
        return _into(q, s, output_q, output_s)
    return _norm_group_quant("fused_add_rmsnorm_group_quant", "fused_add_rmsnorm_group_quant_fp8", input, residual, weight, eps, group_size,
                             column_major_scales, scale_tma_aligned, scale_ue8m0, rounding, output_q, output_s)
