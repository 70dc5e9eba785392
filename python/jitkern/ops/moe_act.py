"""The MoE gated-activation family (csrc/moe_act.cuh): silu_and_mul over the layouts MoE expert GEMMs write,
computing only the rows that hold tokens, with the count of such rows read on the device (no host sync, so
the ops replay in CUDA graphs), each also fused with fp8 e4m3 quantization, per token or per 1x128 group.

Sorted layout (a grouped GEMM over moe_align_block_size's order): input [P, 2d], sorted_token_ids int32 [P]
and num_tokens_post_pad int32 [1] as moe_align_block_size writes them, num_ids = topk_ids.numel() (the id
that marks padding). Row r is computed where r < num_tokens_post_pad[0] and 0 <= sorted_token_ids[r] <
num_ids.

Masked layout (low-latency expert-parallel dispatch): input [E, M, 2d], masked_m int32 [E]; rows
m < masked_m[e] of expert e are computed (a count outside [0, M] is taken as 0 or M). At most 1024 experts.

Rows that are not computed are neither read nor written: their outputs (and scales) keep what they held;
the allocating forms leave them uninitialised. A computed row is silu(input[..., :d]) * input[..., d:] in
fp32, rounded to the input's dtype, exactly what silu_and_mul writes; the fp8 forms quantize that rounded
product, so their codes and scales are those of per_token_quant_fp8 (s = max(amax, 1e-10) / 448 per row) or
per_token_group_quant_8bit (per group of 128, s = max(amax, eps) / 448, fp32 scales, under the rounding policy
given to both: rounding="exact" or "sglang") applied to it.

Inputs fp16/bf16/fp32 CUDA tensors, the last dimension contiguous, rows (and experts) strided. The C++
entry points check every argument and name the bad one. Each op is also a torch custom op
(torch.ops.jitkern.*, writing its given outputs), which is what torch.compile traces."""

from __future__ import annotations

from .._torch import compiling, torch
from ._declare import Family, TorchOp, _calling, param_names
from ._dtype_family import DtypeFamily
from ._fp8 import _bytes, check_group_size, scale_column_rows
from .quant import ROUNDINGS, rounding_policy

_SORTED = "Tensor input, Tensor sorted_token_ids, Tensor num_tokens_post_pad, int num_ids"
_MASKED = "Tensor input, Tensor masked_m"
_TOKEN = "Tensor(a!) output_q, Tensor(b!) output_s"
_GROUP = _TOKEN + ", int group_size, float eps"
# The group forms' exports, one per layout and rounding policy -> (the form, its C++ member).
_GROUP_EXPORTS = {f"{form}{r.suffix}": (form, f"{form}<{r.cpp}>")
                  for form in ("silu_and_mul_sorted_per_token_group_quant_fp8", "silu_and_mul_masked_per_token_group_quant_fp8")
                  for r in ROUNDINGS.values()}
_FAMILY = DtypeFamily("moe_act", "jitkern_moe_act::MoeActOps", {
    "silu_and_mul_sorted": f"{_SORTED}, Tensor(a!) out",
    "silu_and_mul_sorted_per_token_quant_fp8": f"{_SORTED}, {_TOKEN}",
    **{e: f"{_SORTED}, {_GROUP}" for e, (form, _) in _GROUP_EXPORTS.items() if "_sorted_" in form},
    "silu_and_mul_masked": f"{_MASKED}, Tensor(a!) out",
    "silu_and_mul_masked_per_token_quant_fp8": f"{_MASKED}, {_TOKEN}",
    **{e: f"{_MASKED}, {_GROUP}" for e, (form, _) in _GROUP_EXPORTS.items() if "_masked_" in form},
}, compile_seconds={"silu_and_mul_sorted": 2.6, "silu_and_mul_sorted_per_token_quant_fp8": 3.2, "silu_and_mul_masked": 2.6,
                    "silu_and_mul_masked_per_token_quant_fp8": 4.0, **{e: 3.2 for e in _GROUP_EXPORTS}},  # estimates
   members={e: member for e, (_, member) in _GROUP_EXPORTS.items()})
FAMILY = Family(_FAMILY)
spec = _FAMILY.spec
_FUNCTIONS = _FAMILY.functions


def _op(export: str):
    """The declaration of an op whose torch op writes the export's outputs (the allocating public forms
    allocate, then call it)."""
    return FAMILY.op(export, torch=(TorchOp(export, export=export),))


def _group_op(form: str, layout: str):
    """The declaration of a group form: its exports (one per rounding policy) and its torch op, which takes the
    exports' arguments and the rounding policy's name and writes the given outputs."""
    params = f"{layout}, {_GROUP}, str rounding"

    def declare(function):
        torch_op = TorchOp(form, f"({params}) -> ()", _calling(function, param_names(params)))
        return FAMILY.op(*(e for e, (f, _) in _GROUP_EXPORTS.items() if f == form), torch=(torch_op,))(function)
    return declare


def _half(input, public: str, dtype=None):
    """An uninitialised [..., d] output for input [..., 2d]."""
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"{public}(): input must be a torch.Tensor, got {type(input).__name__}")
    return torch.empty((*input.shape[:-1], input.shape[-1] // 2), dtype=dtype or input.dtype, device=input.device)


def _group_scales(q, group_size: int, column_major_scales: bool, scale_tma_aligned: bool, public: str):
    """fp32 scales [..., rows, d / group_size] for q [..., rows, d]: row-major, or column-major over the rows
    (a [..., groups, rows] buffer transposed), each column padded to 16 bytes with scale_tma_aligned."""
    check_group_size(group_size, public)
    *lead, rows, d = q.shape
    padded = scale_column_rows(rows, column_major_scales, scale_tma_aligned, public)
    groups = d // group_size if group_size > 0 else 0
    if not column_major_scales:
        return torch.empty((*lead, rows, groups), dtype=torch.float32, device=q.device)
    return torch.empty((*lead, groups, padded), dtype=torch.float32, device=q.device)[..., :rows].transpose(-1, -2)


def _call(export: str, public: str, input, *args):
    fn = _FUNCTIONS.get((export, getattr(input, "dtype", None))) or _FAMILY.function(export, input, public)
    fn(input, *args)


# ---- sorted layout ---------------------------------------------------------------------------------

@_op("silu_and_mul_sorted")
def silu_and_mul_sorted(input: torch.Tensor, sorted_token_ids: torch.Tensor, num_tokens_post_pad: torch.Tensor, num_ids: int,
                        out: torch.Tensor | None = None) -> torch.Tensor:
    """out [P, d] = silu_and_mul(input [P, 2d]) on the rows of moe_align_block_size's sorted order that hold
    an id (< num_ids, below num_tokens_post_pad[0]); the others are left as they were. Returns out
    (allocated when not given)."""
    if out is None:
        out = _half(input, "silu_and_mul_sorted")
    if compiling():
        torch.ops.jitkern.silu_and_mul_sorted(input, sorted_token_ids, num_tokens_post_pad, num_ids, out)
    else:
        _call("silu_and_mul_sorted", "silu_and_mul_sorted", input, sorted_token_ids, num_tokens_post_pad, num_ids, out)
    return out


@_op("silu_and_mul_sorted_per_token_quant_fp8")
def silu_and_mul_sorted_per_token_quant_fp8(input: torch.Tensor, sorted_token_ids: torch.Tensor, num_tokens_post_pad: torch.Tensor,
                                            num_ids: int, *, output_q: torch.Tensor | None = None,
                                            output_s: torch.Tensor | None = None):
    """Returns (q [P, d] float8_e4m3fn, s [P, 1] fp32): silu_and_mul_sorted's rows quantized with one dynamic
    scale per computed row, s = max(amax(|row|), 1e-10) / 448 (per_token_quant_fp8's bits)."""
    public = "silu_and_mul_sorted_per_token_quant_fp8"
    q = _half(input, public, torch.float8_e4m3fn) if output_q is None else output_q
    s = torch.empty((q.shape[0], 1), dtype=torch.float32, device=q.device) if output_s is None else output_s
    if compiling():
        torch.ops.jitkern.silu_and_mul_sorted_per_token_quant_fp8(input, sorted_token_ids, num_tokens_post_pad, num_ids, q, s)
    else:
        _call(public, public, input, sorted_token_ids, num_tokens_post_pad, num_ids, _bytes(q, "output_q", public),
              s.view(-1) if isinstance(s, torch.Tensor) and s.dim() == 2 and s.shape[-1] == 1 else s)
    return q, s


@_group_op("silu_and_mul_sorted_per_token_group_quant_fp8", _SORTED)
def silu_and_mul_sorted_per_token_group_quant_fp8(input: torch.Tensor, sorted_token_ids: torch.Tensor, num_tokens_post_pad: torch.Tensor,
                                                  num_ids: int, group_size: int = 128, eps: float = 1e-10, *,
                                                  column_major_scales: bool = False, scale_tma_aligned: bool = False, rounding: str = "exact",
                                                  output_q: torch.Tensor | None = None, output_s: torch.Tensor | None = None):
    """Returns (q [P, d] float8_e4m3fn, s [P, d / 128] fp32): silu_and_mul_sorted's rows quantized per group
    of group_size (128) outputs, s = max(amax(|group|), eps) / 448: per_token_group_quant_8bit's bits (with
    the same rounding, "exact" or "sglang") and scale layouts (row-major, column_major_scales,
    scale_tma_aligned)."""
    public = "silu_and_mul_sorted_per_token_group_quant_fp8"
    policy = rounding_policy(rounding, public)
    q = _half(input, public, torch.float8_e4m3fn) if output_q is None else output_q
    s = _group_scales(q, group_size, column_major_scales, scale_tma_aligned, public) if output_s is None else output_s
    if compiling():
        torch.ops.jitkern.silu_and_mul_sorted_per_token_group_quant_fp8(input, sorted_token_ids, num_tokens_post_pad, num_ids, q, s,
                                                                        group_size, eps, policy.name)
    else:
        _call(public + policy.suffix, public, input, sorted_token_ids, num_tokens_post_pad, num_ids, _bytes(q, "output_q", public), s,
              group_size, float(eps))
    return q, s


# ---- masked layout ---------------------------------------------------------------------------------

@_op("silu_and_mul_masked")
def silu_and_mul_masked(input: torch.Tensor, masked_m: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out [E, M, d] = silu_and_mul(input [E, M, 2d]) on rows m < masked_m[e] of each expert e; the others are
    left as they were. Returns out (allocated when not given)."""
    if out is None:
        out = _half(input, "silu_and_mul_masked")
    if compiling():
        torch.ops.jitkern.silu_and_mul_masked(input, masked_m, out)
    else:
        _call("silu_and_mul_masked", "silu_and_mul_masked", input, masked_m, out)
    return out


@_op("silu_and_mul_masked_per_token_quant_fp8")
def silu_and_mul_masked_per_token_quant_fp8(input: torch.Tensor, masked_m: torch.Tensor, *, output_q: torch.Tensor | None = None,
                                            output_s: torch.Tensor | None = None):
    """Returns (q [E, M, d] float8_e4m3fn, s [E, M, 1] fp32): silu_and_mul_masked's rows quantized with one
    dynamic scale per computed row, s = max(amax(|row|), 1e-10) / 448 (per_token_quant_fp8's bits)."""
    public = "silu_and_mul_masked_per_token_quant_fp8"
    q = _half(input, public, torch.float8_e4m3fn) if output_q is None else output_q
    s = torch.empty((*q.shape[:-1], 1), dtype=torch.float32, device=q.device) if output_s is None else output_s
    if compiling():
        torch.ops.jitkern.silu_and_mul_masked_per_token_quant_fp8(input, masked_m, q, s)
    else:
        _call(public, public, input, masked_m, _bytes(q, "output_q", public, flatten=False),
              s.squeeze(-1) if isinstance(s, torch.Tensor) and s.dim() == 3 and s.shape[-1] == 1 else s)
    return q, s


@_group_op("silu_and_mul_masked_per_token_group_quant_fp8", _MASKED)
def silu_and_mul_masked_per_token_group_quant_fp8(input: torch.Tensor, masked_m: torch.Tensor, group_size: int = 128, eps: float = 1e-10, *,
                                                  column_major_scales: bool = False, scale_tma_aligned: bool = False, rounding: str = "exact",
                                                  output_q: torch.Tensor | None = None, output_s: torch.Tensor | None = None):
    """Returns (q [E, M, d] float8_e4m3fn, s [E, M, d / 128] fp32): silu_and_mul_masked's rows quantized per
    group of group_size (128) outputs, s = max(amax(|group|), eps) / 448 (per_token_group_quant_8bit's bits,
    with the same rounding: "exact" or "sglang"). column_major_scales: s is an [E, d / 128, M] buffer
    transposed (the MN-major layout masked grouped GEMMs read), each expert's columns padded to 16 bytes with
    scale_tma_aligned."""
    public = "silu_and_mul_masked_per_token_group_quant_fp8"
    policy = rounding_policy(rounding, public)
    q = _half(input, public, torch.float8_e4m3fn) if output_q is None else output_q
    s = _group_scales(q, group_size, column_major_scales, scale_tma_aligned, public) if output_s is None else output_s
    if compiling():
        torch.ops.jitkern.silu_and_mul_masked_per_token_group_quant_fp8(input, masked_m, q, s, group_size, eps, policy.name)
    else:
        _call(public + policy.suffix, public, input, masked_m, _bytes(q, "output_q", public, flatten=False), s, group_size, float(eps))
    return q, s
