"""The MoE routing family (csrc/moe.cuh): topk_softmax (DeepSeek-V2's grouped selection), topk_sigmoid (a
correction bias and DeepSeek-V3's grouped selection) and moe_align_block_size, with sgl-kernel's argument orders.

Top-k: gating_output [T, E] fp16/bf16/fp32 (rows may be strided), 1 <= E <= 512 experts, 1 <= k <= 32;
topk_weights [T, k] fp32 and topk_ids [T, k] int32 or int64. Experts are ranked by logit (softmax) or
by sigmoid + correction_bias (sigmoid); ties go to the lowest expert index, as torch.topk; a NaN logit
ranks below every number, so it is selected only when fewer than k other experts remain, and weighs 0 in
the softmax.

moe_align_block_size: the ids of each expert (their flat positions in topk_ids, in order: the output is
deterministic) padded to a multiple of block_size with topk_ids.numel(), experts in order; ids outside
[0, num_experts) are left out (expert parallelism's -1).

The C++ entry points check every argument and name the bad one. Each op is also a torch custom op
(torch.ops.jitkern.*), which is what torch.compile traces."""

from __future__ import annotations

from .._torch import ModuleExports, compiling, torch
from ..jit import JitSpec
from ._declare import Family, TorchOp, wrapper
from ._dtype_family import DtypeFamily, package_spec

_FAMILY = DtypeFamily("moe", "jitkern_moe::MoeOps", {
    "topk_softmax": "Tensor(a!) topk_weights, Tensor(b!) topk_ids, Tensor gating_output, bool renormalize",
    "topk_softmax_grouped": "Tensor(a!) topk_weights, Tensor(b!) topk_ids, Tensor gating_output, bool renormalize, int num_expert_group, "
                            "int topk_group, float routed_scaling_factor",
    "topk_sigmoid": "Tensor(a!) topk_weights, Tensor(b!) topk_ids, Tensor gating_output, Tensor? correction_bias, bool renormalize, "
                    "int num_expert_group, int topk_group, float routed_scaling_factor",
}, compile_seconds={"topk_softmax": 2.5, "topk_softmax_grouped": 2.6, "topk_sigmoid": 2.6})  # bf16 on an H100 host, 16 builds at once: the order builds start in
_FUNCTIONS = _FAMILY.functions
_ALIGN = {"moe_align_block_size": "Tensor topk_ids, int num_experts, int block_size, Tensor(a!) sorted_token_ids, Tensor(b!) expert_ids, "
                                  "Tensor(c!) num_tokens_post_pad"}


def align_spec() -> JitSpec:
    """The module of moe_align_block_size (one for every id dtype)."""
    return package_spec("moe_align", cuda_file="moe.cuh", wrappers=[wrapper(e, f"jitkern_moe::{e}<>", p) for e, p in _ALIGN.items()],
                        compile_seconds=1.8)


_align = ModuleExports(align_spec, _ALIGN, "moe_align")
FAMILY = Family(_FAMILY, _align)


@FAMILY.op("topk_softmax", "topk_softmax_grouped", torch=(TorchOp("topk_softmax", export="topk_softmax"),
                                                          TorchOp("topk_softmax_grouped", export="topk_softmax_grouped")))
def topk_softmax(topk_weights: torch.Tensor, topk_ids: torch.Tensor, gating_output: torch.Tensor, renormalize: bool = False, *,
                 num_expert_group: int = 1, topk_group: int = 1, routed_scaling_factor: float = 1.0):
    """topk_weights, topk_ids <- the k = topk_ids.shape[-1] experts of highest softmax(gating_output) per token
    and their probabilities (renormalize: divided by the sum of the k), times routed_scaling_factor. With
    num_expert_group > 1 (DeepSeek-V2) only among the topk_group groups (E / num_expert_group consecutive
    experts each) whose best logit ranks highest. Returns (topk_weights, topk_ids)."""
    export = "topk_softmax" if num_expert_group == 1 and topk_group == 1 and routed_scaling_factor == 1.0 else "topk_softmax_grouped"
    if compiling():
        if export == "topk_softmax":
            torch.ops.jitkern.topk_softmax(topk_weights, topk_ids, gating_output, renormalize)
        else:
            torch.ops.jitkern.topk_softmax_grouped(topk_weights, topk_ids, gating_output, renormalize, num_expert_group, topk_group,
                                                   routed_scaling_factor)
        return topk_weights, topk_ids
    fn = _FUNCTIONS.get((export, getattr(gating_output, "dtype", None))) or _FAMILY.function(export, gating_output, "topk_softmax",
                                                                                             "gating_output")
    if export == "topk_softmax":
        fn(topk_weights, topk_ids, gating_output, renormalize)
    else:
        fn(topk_weights, topk_ids, gating_output, renormalize, num_expert_group, topk_group, float(routed_scaling_factor))
    return topk_weights, topk_ids


@FAMILY.op("topk_sigmoid", torch=(TorchOp("topk_sigmoid", export="topk_sigmoid"),))
def topk_sigmoid(topk_weights: torch.Tensor, topk_ids: torch.Tensor, gating_output: torch.Tensor, renormalize: bool = False,
                 correction_bias: torch.Tensor | None = None, *, num_expert_group: int = 1, topk_group: int = 1,
                 routed_scaling_factor: float = 1.0):
    """The sigmoid router (DeepSeek-V3 with num_expert_group/topk_group): scores s = sigmoid(gating_output),
    experts ranked by s + correction_bias ([E]: fp32, or bf16/fp16 read as fp32); with num_expert_group > 1 only among the topk_group
    groups (E / num_expert_group consecutive experts each) whose two best biased scores sum highest.
    Weights: s of the chosen experts (renormalize: divided by their sum), times routed_scaling_factor.
    Returns (topk_weights, topk_ids)."""
    if compiling():
        torch.ops.jitkern.topk_sigmoid(topk_weights, topk_ids, gating_output, correction_bias, renormalize, num_expert_group, topk_group,
                                       routed_scaling_factor)
        return topk_weights, topk_ids
    fn = _FUNCTIONS.get(("topk_sigmoid", getattr(gating_output, "dtype", None))) or _FAMILY.function(
        "topk_sigmoid", gating_output, "topk_sigmoid", "gating_output")
    fn(topk_weights, topk_ids, gating_output, correction_bias, renormalize, num_expert_group, topk_group, float(routed_scaling_factor))
    return topk_weights, topk_ids


def align_sizes(num_ids: int, num_experts: int, block_size: int) -> tuple[int, int]:
    """The sizes of sorted_token_ids and expert_ids that moe_align_block_size needs for num_ids ids
    (enough for any assignment: at most min(num_ids, num_experts) experts are padded)."""
    padded = num_ids + min(num_ids, num_experts) * (block_size - 1)
    return padded, -(-padded // block_size)


@FAMILY.op("moe_align_block_size", torch=(
    TorchOp("moe_align_block_size", "(Tensor topk_ids, int num_experts, int block_size) -> (Tensor, Tensor, Tensor)",
            lambda ids, e, bs: moe_align_block_size(ids, e, bs), lambda *args: _align_outputs(*args)),
    TorchOp("moe_align_block_size_out", export="moe_align_block_size")))
def moe_align_block_size(topk_ids: torch.Tensor, num_experts: int, block_size: int, sorted_token_ids: torch.Tensor | None = None,
                         expert_ids: torch.Tensor | None = None, num_tokens_post_pad: torch.Tensor | None = None):
    """Sorts the ids of topk_ids (int32/int64, any shape and strides) by expert for a grouped GEMM of block_size rows:
    sorted_token_ids (int32) holds each expert's ids (flat positions in topk_ids) padded with
    topk_ids.numel() to a multiple of block_size, experts in order, then topk_ids.numel() to its end;
    expert_ids (int32) the expert of each block (-1 after the last); num_tokens_post_pad (int32 [1]) the
    padded total. Outputs not given are allocated with align_sizes. Returns the three."""
    if compiling():
        if sorted_token_ids is None and expert_ids is None and num_tokens_post_pad is None:
            return torch.ops.jitkern.moe_align_block_size(topk_ids, num_experts, block_size)
        sorted_token_ids, expert_ids, num_tokens_post_pad = _align_outputs(topk_ids, num_experts, block_size, sorted_token_ids, expert_ids,
                                                                           num_tokens_post_pad)  # the given ones are written
        torch.ops.jitkern.moe_align_block_size_out(topk_ids, num_experts, block_size, sorted_token_ids, expert_ids, num_tokens_post_pad)
        return sorted_token_ids, expert_ids, num_tokens_post_pad
    public = "moe_align_block_size"
    fn = _align.get(public) or _align.load_checked(public, public, (("topk_ids", topk_ids), ("sorted_token_ids", sorted_token_ids),
                                                                    ("expert_ids", expert_ids), ("num_tokens_post_pad", num_tokens_post_pad)))
    if sorted_token_ids is None or expert_ids is None or num_tokens_post_pad is None:
        sorted_token_ids, expert_ids, num_tokens_post_pad = _align_outputs(topk_ids, num_experts, block_size, sorted_token_ids, expert_ids,
                                                                           num_tokens_post_pad)
    # The ids are only read: a strided topk_ids (e.g. the first k columns of a wider buffer) is copied.
    fn(topk_ids.reshape(-1).contiguous(), num_experts, block_size, sorted_token_ids, expert_ids, num_tokens_post_pad)
    return sorted_token_ids, expert_ids, num_tokens_post_pad


def _align_outputs(topk_ids, num_experts, block_size, sorted_token_ids=None, expert_ids=None, num_tokens_post_pad=None):
    if not isinstance(topk_ids, torch.Tensor):
        raise TypeError(f"moe_align_block_size(): topk_ids must be a torch.Tensor, got {type(topk_ids).__name__}")
    for name, v in (("num_experts", num_experts), ("block_size", block_size)):
        if type(v) is not int:
            raise TypeError(f"moe_align_block_size(): {name} must be an int, got {type(v).__name__}")
    if block_size < 1:
        raise ValueError(f"moe_align_block_size(): block_size must be positive, got {block_size}")
    padded, blocks = align_sizes(topk_ids.numel(), max(num_experts, 1), block_size)  # the module names a bad num_experts
    new = lambda size: torch.empty(size, dtype=torch.int32, device=topk_ids.device)  # noqa: E731
    return (new(padded) if sorted_token_ids is None else sorted_token_ids, new(blocks) if expert_ids is None else expert_ids,
            new(1) if num_tokens_post_pad is None else num_tokens_post_pad)
