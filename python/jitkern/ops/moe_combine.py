"""The MoE combine family (csrc/moe_combine.cuh): each token's top-k expert outputs summed into one row.

moe_sum(input [T, k, H]) -> [T, H]: the sum over k (vLLM's moe_sum, with an output argument in its order).
moe_weighted_sum(input [T, k, H], topk_weights [T, k] fp32, topk_ids=None, shared_output=None,
routed_scaling_factor=1.0) -> [T, H]: routed_scaling_factor * sum_j topk_weights[t, j] * input[t, j] over
the experts whose topk_ids are >= 0 (expert parallelism marks other ranks' experts -1), plus the shared
expert's row: the combine step of a routed MoE layer with its shared expert, in one pass.

Rows fp16/bf16/fp32 (input and output strided per token, the last dimension contiguous), 1 <= k <= 64,
ids int32 or int64; the sum is accumulated in fp32 and rounded once to the rows' dtype. Each op is also a
torch custom op (torch.ops.jitkern.*), which is what torch.compile traces."""

from __future__ import annotations

from .._torch import compiling, torch
from ._declare import Family, TorchOp
from ._dtype_family import DtypeFamily

_FAMILY = DtypeFamily("moe_combine", "jitkern_moe_combine::MoeCombineOps", {
    "moe_sum": "Tensor input, Tensor(a!) output",
    "moe_weighted_sum": "Tensor input, Tensor(a!) output, Tensor topk_weights, Tensor? topk_ids, Tensor? shared_output, "
                        "float routed_scaling_factor",
}, compile_seconds={"moe_sum": 1.5, "moe_weighted_sum": 1.7})  # estimates (the order parallel builds start in)
FAMILY = Family(_FAMILY)
spec = _FAMILY.spec
_FUNCTIONS = _FAMILY.functions


def _output_for(input, public: str):
    if not isinstance(input, torch.Tensor) or input.dim() != 3:
        raise ValueError(f"{public}(): input must be a [num_tokens, topk, hidden_size] tensor, got "
                         f"{tuple(input.shape) if isinstance(input, torch.Tensor) else type(input).__name__}")
    return torch.empty((input.shape[0], input.shape[2]), dtype=input.dtype, device=input.device)


@FAMILY.op("moe_sum", torch=(TorchOp("moe_sum", "(Tensor input) -> Tensor", lambda input: moe_sum(input),
                                     lambda input: _output_for(input, "moe_sum")),
                             TorchOp("moe_sum_out", export="moe_sum")))
def moe_sum(input: torch.Tensor, output: torch.Tensor | None = None) -> torch.Tensor:
    """output [T, H] = input [T, k, H] summed over k (fp32 accumulation, one rounding); returns output
    (allocated when not given). moe_sum(input, output) is vLLM's order."""
    if compiling():
        if output is None:
            return torch.ops.jitkern.moe_sum(input)
        torch.ops.jitkern.moe_sum_out(input, output)
        return output
    fn = _FUNCTIONS.get(("moe_sum", getattr(input, "dtype", None))) or _FAMILY.function("moe_sum", input, "moe_sum")
    if output is None:
        output = _output_for(input, "moe_sum")
    fn(input, output)
    return output


@FAMILY.op("moe_weighted_sum", torch=(TorchOp(
    "moe_weighted_sum", "(Tensor input, Tensor topk_weights, Tensor? topk_ids, Tensor? shared_output, float routed_scaling_factor) -> Tensor",
    lambda input, w, ids, shared, scale: moe_weighted_sum(input, w, ids, shared, routed_scaling_factor=scale),
    lambda input, w, ids, shared, scale: _output_for(input, "moe_weighted_sum")),))
def moe_weighted_sum(input: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor | None = None,
                     shared_output: torch.Tensor | None = None, *, routed_scaling_factor: float = 1.0,
                     output: torch.Tensor | None = None) -> torch.Tensor:
    """output [T, H] = routed_scaling_factor * sum_j topk_weights[t, j] * input[t, j, :] over the experts with
    topk_ids[t, j] >= 0 (all of them without topk_ids), + shared_output[t, :] where given; fp32 math, one
    rounding. Returns output (allocated when not given)."""
    if compiling():
        out = torch.ops.jitkern.moe_weighted_sum(input, topk_weights, topk_ids, shared_output, float(routed_scaling_factor))
        return out if output is None else output.copy_(out)
    fn = _FUNCTIONS.get(("moe_weighted_sum", getattr(input, "dtype", None))) or _FAMILY.function("moe_weighted_sum", input, "moe_weighted_sum")
    if output is None:
        output = _output_for(input, "moe_weighted_sum")
    fn(input, output, topk_weights, topk_ids, shared_output, float(routed_scaling_factor))
    return output
