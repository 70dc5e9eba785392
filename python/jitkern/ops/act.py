"""The gated activation family (csrc/act.cuh): silu_and_mul, gelu_and_mul, gelu_tanh_and_mul, and SiLU-and-mul
written straight to fp8 e4m3 (silu_and_mul_quant_fp8 with a static scale,
silu_and_mul_per_token_group_quant_fp8 with per-token-group scales). Inputs fp16/bf16/fp32 CUDA tensors
[..., 2d] (leading dimensions are flattened; rows may be strided, the last dimension contiguous), any d.
The activation is computed in fp32 on the first half, multiplied by the second half and rounded to the
input's dtype; the fp8 forms quantize that rounded value, so they are bit-equal to silu_and_mul followed
by per_tensor_quant_fp8 (static) or per_token_group_quant_8bit (dynamic).

The C++ entry points check every argument and name the bad one; Python picks the instantiation by the
input's dtype and allocates outputs. Each op is also a torch custom op (torch.ops.jitkern.*), which is
what torch.compile traces."""

from __future__ import annotations

from .._torch import compiling, torch
from ._declare import Family, TorchOp
from ._dtype_family import DtypeFamily
from ._fp8 import _bytes, _check_scale, check_group_size, check_scales_format, group_scales_for, group_scales_like
from ._shapes import as_rows

_ACTIVATIONS = ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul")
_FAMILY = DtypeFamily("act", "jitkern_act::ActOps", {
    **{op: "Tensor input, Tensor(a!) out" for op in _ACTIVATIONS},
    "silu_and_mul_quant": "input, output_q, scale",
    "silu_and_mul_group_quant": "input, output_q, output_s, group_size, eps",
},  # Each module's compile seconds, bf16 (H100 host, 16 builds at once): the order parallel builds start in.
   compile_seconds={"silu_and_mul": 1.6, "gelu_and_mul": 1.6, "gelu_tanh_and_mul": 2.1, "silu_and_mul_quant": 2.2, "silu_and_mul_group_quant": 2.9})
FAMILY = Family(_FAMILY)
spec = _FAMILY.spec
_FUNCTIONS = _FAMILY.functions


def _half_like(input, dtype=None):
    """An uninitialised [..., d] output for input [..., 2d]."""
    return torch.empty((*input.shape[:-1], input.shape[-1] // 2), dtype=dtype or input.dtype, device=input.device)


def _act_and_mul(op: str, out, input):
    if input is None:  # the returning form
        input, out = out, None
    elif isinstance(out, torch.Tensor) and isinstance(input, torch.Tensor) and out.dim() and input.dim() and \
            out.shape[-1] == 2 * input.shape[-1] > 0:
        input, out = out, input  # sgl-kernel's (input, out) order: the input is the one twice as wide
    if compiling():
        if out is None:
            return getattr(torch.ops.jitkern, op)(input)
        getattr(torch.ops.jitkern, op + "_out")(input, out)
        return out
    fn = _FUNCTIONS.get((op, getattr(input, "dtype", None))) or _FAMILY.function(op, input, op)
    rows = input if input.dim() == 2 else as_rows(input, op, "input", writes=False)
    if out is None:
        out = _half_like(input)
    fn(rows, as_rows(out, op, "out", writes=True))
    return out


def _activation(op: str):
    """The declaration of an activation: the returning torch op and the one writing `out` (what torch.compile
    traces; their implementations are the eager path, their fakes only describe outputs)."""
    return FAMILY.op(op, torch=(TorchOp(op, "(Tensor input) -> Tensor", lambda input: _act_and_mul(op, input, None), _half_like),
                                TorchOp(op + "_out", export=op)))


@_activation("silu_and_mul")
def silu_and_mul(out: torch.Tensor, input: torch.Tensor | None = None) -> torch.Tensor:
    """out[..., :] = silu(input[..., :d]) * input[..., d:] for input [..., 2d], out [..., d]; returns out.
    silu_and_mul(out, input) is vLLM's order; silu_and_mul(input) allocates and returns the output; two
    tensors in sgl-kernel's (input, out) order also work (the input is the one twice as wide)."""
    return _act_and_mul("silu_and_mul", out, input)


@_activation("gelu_and_mul")
def gelu_and_mul(out: torch.Tensor, input: torch.Tensor | None = None) -> torch.Tensor:
    """gelu(input[..., :d]) * input[..., d:] with the exact (erf) GeLU; arguments as silu_and_mul."""
    return _act_and_mul("gelu_and_mul", out, input)


@_activation("gelu_tanh_and_mul")
def gelu_tanh_and_mul(out: torch.Tensor, input: torch.Tensor | None = None) -> torch.Tensor:
    """gelu(input[..., :d], approximate="tanh") * input[..., d:]; arguments as silu_and_mul."""
    return _act_and_mul("gelu_tanh_and_mul", out, input)


def _rows(x, public: str, name: str, writes: bool):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{public}(): {name} must be a torch.Tensor, got {type(x).__name__}")
    return x if x.dim() == 2 else as_rows(x, public, name, writes=writes)


@FAMILY.op("silu_and_mul_quant", torch=(TorchOp("silu_and_mul_quant_fp8", "(Tensor input, Tensor scale) -> Tensor", None,
                                                   lambda input, scale: _half_like(input, torch.float8_e4m3fn)),))
def silu_and_mul_quant_fp8(input: torch.Tensor, scale: torch.Tensor, *, output_q: torch.Tensor | None = None) -> torch.Tensor:
    """Returns q [..., d] (float8_e4m3fn) = fp8(silu_and_mul(input) / scale) with one static fp32 scale
    (one element), in one pass: the bits of per_tensor_quant_fp8(silu_and_mul(input), scale, is_static=True)."""
    public = "silu_and_mul_quant_fp8"
    if compiling():
        q = torch.ops.jitkern.silu_and_mul_quant_fp8(input, scale)
        return q if output_q is None else output_q.copy_(q)
    fn = _FAMILY.function("silu_and_mul_quant", input, public)
    q = _half_like(input, torch.float8_e4m3fn) if output_q is None else output_q
    fn(_rows(input, public, "input", False), _bytes(q, "output_q", public), _check_scale(scale, public))
    return q


@FAMILY.op("silu_and_mul_group_quant", torch=(TorchOp(
    "silu_and_mul_per_token_group_quant_fp8",
    "(Tensor input, int group_size, float eps, bool column_major_scales, bool scale_tma_aligned, bool scale_ue8m0) -> (Tensor, Tensor)",
    lambda input, group_size, eps, cm, tma, ue8m0: silu_and_mul_per_token_group_quant_fp8(
        input, group_size, eps, column_major_scales=cm, scale_tma_aligned=tma, scale_ue8m0=ue8m0),
    lambda input, group_size, eps, cm, tma, ue8m0: (
        _half_like(input, torch.float8_e4m3fn),
        group_scales_like(_half_like(input), group_size, column_major_scales=cm, scale_tma_aligned=tma, scale_ue8m0=ue8m0))),))
def silu_and_mul_per_token_group_quant_fp8(input: torch.Tensor, group_size: int = 128, eps: float = 1e-10, *,
                                           column_major_scales: bool = False, scale_tma_aligned: bool = False,
                                           scale_ue8m0: bool = False, output_q: torch.Tensor | None = None,
                                           output_s: torch.Tensor | None = None):
    """Returns (q, s): y = silu_and_mul(input) [..., d] quantized to fp8 per group of group_size (128)
    consecutive outputs of a row, s = max(amax(|group|), eps) / 448, in one pass; the scale layouts and
    the bits of per_token_group_quant_8bit(y, group_size, eps=eps, ...) (see group_scales_like)."""
    public = "silu_and_mul_per_token_group_quant_fp8"
    check_scales_format(output_s, scale_ue8m0, public)
    if compiling():
        q, s = torch.ops.jitkern.silu_and_mul_per_token_group_quant_fp8(input, group_size, eps, column_major_scales, scale_tma_aligned,
                                                                         scale_ue8m0)
        return (q if output_q is None else output_q.copy_(q)), (s if output_s is None else output_s.copy_(s))
    fn = _FAMILY.function("silu_and_mul_group_quant", input, public)
    check_group_size(group_size, public)
    q = _half_like(input, torch.float8_e4m3fn) if output_q is None else output_q
    s = output_s if output_s is not None else group_scales_for(q, group_size, column_major_scales, scale_tma_aligned, scale_ue8m0, public)
    s2 = s.view(-1, s.shape[-1]) if s.dim() != 2 else s
    fn(_rows(input, public, "input", False), _bytes(q, "output_q", public), s2, group_size, float(eps))
    return q, s
