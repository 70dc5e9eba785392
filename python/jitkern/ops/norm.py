"""The RMSNorm family (csrc/norm.cuh): rmsnorm, fused_add_rmsnorm, fused_inplace_qknorm,
fused_inplace_qknorm_across_heads. fp16/bf16/fp32 CUDA tensors [..., H] (leading
dimensions are flattened: a view for tensors written in place), fp32 accumulation, any hidden size,
rows may be strided (the last dimension must be contiguous).

The C++ entry points check every argument before they launch and name the bad one (TypeError for a
dtype, ValueError for a shape, stride, device or value). Python only picks the instantiation by the
input's dtype, which C++ cannot do. Each op is also a torch custom op (torch.ops.jitkern.*), which is
what torch.compile traces; eager calls go straight to the exported function."""

from __future__ import annotations

from .._torch import compiling, torch
from ._declare import Family, TorchOp
from ._dtype_family import TOKEN_NORM_DEVICE_PARTS, DtypeFamily
from ._shapes import as_rows, empty_rows_like

_FAMILY = DtypeFamily("norm", "jitkern_norm::NormOps", {
    "rmsnorm": "Tensor input, Tensor weight, Tensor(a!) output, float eps",
    "fused_add_rmsnorm": "Tensor(a!) input, Tensor(b!) residual, Tensor weight, float eps",
    "qknorm": "Tensor(a!) q, Tensor(b!) k, Tensor q_weight, Tensor k_weight, float eps, int head_dim",
    "qknorm_across_heads": "Tensor(a!) q, Tensor(b!) k, Tensor q_weight, Tensor k_weight, float eps",
},  # Each module's compile seconds, bf16 (H100 host, 16 builds at once): the order parallel builds start in.
   compile_seconds={"rmsnorm": 3.3, "fused_add_rmsnorm": 3.3, "qknorm": 3.3, "qknorm_across_heads": 3.1},
   device_parts={"rmsnorm": TOKEN_NORM_DEVICE_PARTS})
FAMILY = Family(_FAMILY)
_FUNCTIONS = _FAMILY.functions
spec = _FAMILY.spec
_norm_module = _FAMILY.exports


# The torch custom ops are what torch.compile traces: their implementations are the eager paths below;
# their fake implementations only describe outputs, so tracing never builds a module.
@FAMILY.op("rmsnorm", torch=(TorchOp("rmsnorm", "(Tensor input, Tensor weight, float eps) -> Tensor",
                                     lambda input, weight, eps: rmsnorm(input, weight, None, eps),
                                     lambda input, weight, eps: empty_rows_like(input)),
                             TorchOp("rmsnorm_out", export="rmsnorm")))
def rmsnorm(input: torch.Tensor, weight: torch.Tensor, output: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """output = input * rsqrt(mean(input^2, -1) + eps) * weight over the last dimension of [..., H] (pass output=input
    for in place)."""
    if compiling():
        if output is None:
            return torch.ops.jitkern.rmsnorm(input, weight, eps)
        torch.ops.jitkern.rmsnorm_out(input, weight, output, eps)
        return output
    fn = _FUNCTIONS.get(("rmsnorm", getattr(input, "dtype", None))) or _FAMILY.function("rmsnorm", input, "rmsnorm")
    if input.dim() == 2:
        if output is None:
            output = torch.empty_like(input)
        fn(input, weight, output, eps)
    else:
        if output is None:
            output = empty_rows_like(input)
        fn(as_rows(input, "rmsnorm", "input", writes=output is input), weight, as_rows(output, "rmsnorm", "output", writes=True), eps)
    return output


@FAMILY.op("fused_add_rmsnorm", torch=(TorchOp("fused_add_rmsnorm", export="fused_add_rmsnorm"),))
def fused_add_rmsnorm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
    """residual += input; input = rmsnorm(residual) * weight (both in place, [..., H])."""
    if compiling():
        return torch.ops.jitkern.fused_add_rmsnorm(input, residual, weight, eps)
    fn = _FUNCTIONS.get(("fused_add_rmsnorm", getattr(input, "dtype", None))) or _FAMILY.function("fused_add_rmsnorm", input,
                                                                                                        "fused_add_rmsnorm")
    if isinstance(input, torch.Tensor) and input.dim() != 2:
        input, residual = (as_rows(t, "fused_add_rmsnorm", n, writes=True) for t, n in ((input, "input"), (residual, "residual")))
    fn(input, residual, weight, eps)


@FAMILY.op("qknorm", torch=(TorchOp("qknorm", export="qknorm"),))
def fused_inplace_qknorm(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                         eps: float = 1e-6, *, head_dim: int = 0) -> None:
    """Per-head RMSNorm of q [..., Hq, D] and k [..., Hk, D] in place; with head_dim, q and k may also be
    2-D [N, H * D] (e.g. column slices of a fused qkv buffer)."""
    if compiling():
        return torch.ops.jitkern.qknorm(q, k, q_weight, k_weight, eps, head_dim)
    fn = _FUNCTIONS.get(("qknorm", getattr(q, "dtype", None))) or _FAMILY.function("qknorm", q, "fused_inplace_qknorm", "q")
    if isinstance(q, torch.Tensor) and q.dim() > 3:
        q, k = (as_rows(t, "fused_inplace_qknorm", n, writes=True, trailing=2) for t, n in ((q, "q"), (k, "k")))
    fn(q, k, q_weight, k_weight, eps, head_dim)


@FAMILY.op("qknorm_across_heads", torch=(TorchOp("qknorm_across_heads", export="qknorm_across_heads"),))
def fused_inplace_qknorm_across_heads(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                                      eps: float = 1e-6) -> None:
    """RMSNorm of every row of q [..., Wq] and k [..., Wk] over the whole row, in place."""
    if compiling():
        return torch.ops.jitkern.qknorm_across_heads(q, k, q_weight, k_weight, eps)
    fn = _FUNCTIONS.get(("qknorm_across_heads", getattr(q, "dtype", None))) or _FAMILY.function(
        "qknorm_across_heads", q, "fused_inplace_qknorm_across_heads", "q")
    if isinstance(q, torch.Tensor) and q.dim() != 2:
        q, k = (as_rows(t, "fused_inplace_qknorm_across_heads", n, writes=True) for t, n in ((q, "q"), (k, "k")))
    fn(q, k, q_weight, k_weight, eps)
