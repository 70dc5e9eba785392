"""RMSNorm variants of today's models (csrc/norm_variants.cuh), on the norm family's kernels: fp16/bf16/fp32
CUDA tensors [..., H] (leading dimensions flattened: a view for tensors written in place), fp32
accumulation, any hidden size, strided rows.

- `gemma_rmsnorm(input, weight, eps=1e-6, out=None)`: Gemma's norm, x * rsqrt(mean(x^2) + eps) * (1 + weight)
  in fp32, rounded once to the input's dtype (as the model's own code and flashinfer's gemma_rmsnorm);
- `gemma_fused_add_rmsnorm(input, residual, weight, eps=1e-6)`: residual += input (rounded to the dtype),
  input = gemma_rmsnorm(residual), both in place;
- `rmsnorm_hf(input, weight, eps=1e-6, out=None)`: transformers' order, weight * (x * rsqrt(mean(x^2) + eps))
  with the normalised value rounded to the input's dtype before the weight multiply (LlamaRMSNorm),
  where `rmsnorm` rounds once after it.

The keywords are the reference framework's (SGLang's); `enable_pdl` is accepted and ignored (PDL is used
wherever the GPU has it). The C++ entry points check every argument and name the bad one. Each op is a
torch custom op."""

from __future__ import annotations

from .._torch import compiling, torch
from ._declare import Family, TorchOp
from ._dtype_family import TOKEN_NORM_DEVICE_PARTS, DtypeFamily
from ._shapes import as_rows, empty_rows_like

_FAMILY = DtypeFamily("norm_variants", "jitkern_norm_variants::NormVariants", {
    "gemma_rmsnorm": "Tensor input, Tensor weight, Tensor(a!) out, float eps",
    "gemma_fused_add_rmsnorm": "Tensor(a!) input, Tensor(b!) residual, Tensor weight, float eps",
    "rmsnorm_hf": "Tensor input, Tensor weight, Tensor(a!) out, float eps",
}, compile_seconds={"gemma_rmsnorm": 3.3, "gemma_fused_add_rmsnorm": 3.3, "rmsnorm_hf": 3.3},  # as rmsnorm's: the same kernels
   device_parts={"gemma_rmsnorm": TOKEN_NORM_DEVICE_PARTS, "rmsnorm_hf": TOKEN_NORM_DEVICE_PARTS})
FAMILY = Family(_FAMILY)
spec = _FAMILY.spec
_FUNCTIONS = _FAMILY.functions
_norm_variants_module = _FAMILY.exports  # the per-dtype exports, for tests and benchmarks


def _normed(export: str, input, weight, out, eps):
    """The out-of-place ops: out (allocated when None) = the norm of input; traced as their torch ops."""
    if compiling():
        if out is None:
            return getattr(torch.ops.jitkern, export)(input, weight, eps)
        getattr(torch.ops.jitkern, f"{export}_out")(input, weight, out, eps)
        return out
    fn = _FUNCTIONS.get((export, getattr(input, "dtype", None))) or _FAMILY.function(export, input, export)
    if input.dim() == 2:
        if out is None:
            out = torch.empty_like(input)
        fn(input, weight, out, eps)
    else:
        if out is None:
            out = empty_rows_like(input)
        fn(as_rows(input, export, "input", writes=out is input), weight, as_rows(out, export, "out", writes=True), eps)
    return out


def _traced_as(name: str, op):
    """An out-of-place op's torch custom ops: `name` (returns the output) and `name`_out (fills `out`)."""
    def into(input, weight, out, eps):
        op(input, weight, eps, out)
    return (TorchOp(name, "(Tensor input, Tensor weight, float eps) -> Tensor", lambda input, weight, eps: op(input, weight, eps),
                    lambda input, weight, eps: empty_rows_like(input)),
            TorchOp(f"{name}_out", "(Tensor input, Tensor weight, Tensor(a!) out, float eps) -> ()", into))


@FAMILY.op("gemma_rmsnorm", torch=_traced_as("gemma_rmsnorm", lambda *args: gemma_rmsnorm(*args)))
def gemma_rmsnorm(input, weight, eps: float = 1e-6, out=None, enable_pdl: bool | None = None):
    """out = input * rsqrt(mean(input^2, -1) + eps) * (1 + weight) over the last dimension (out=input: in place)."""
    return _normed("gemma_rmsnorm", input, weight, out, eps)


@FAMILY.op("gemma_fused_add_rmsnorm", torch=(TorchOp("gemma_fused_add_rmsnorm", export="gemma_fused_add_rmsnorm"),))
def gemma_fused_add_rmsnorm(input, residual, weight, eps: float = 1e-6, enable_pdl: bool | None = None) -> None:
    """residual += input; input = gemma_rmsnorm(residual, weight) (both in place, [..., H])."""
    if compiling():
        return torch.ops.jitkern.gemma_fused_add_rmsnorm(input, residual, weight, eps)
    fn = _FUNCTIONS.get(("gemma_fused_add_rmsnorm", getattr(input, "dtype", None))) or _FAMILY.function(
        "gemma_fused_add_rmsnorm", input, "gemma_fused_add_rmsnorm")
    if isinstance(input, torch.Tensor) and input.dim() != 2:
        input, residual = (as_rows(t, "gemma_fused_add_rmsnorm", n, writes=True) for t, n in ((input, "input"), (residual, "residual")))
    fn(input, residual, weight, eps)


@FAMILY.op("rmsnorm_hf", torch=_traced_as("rmsnorm_hf", lambda *args: rmsnorm_hf(*args)))
def rmsnorm_hf(input, weight, eps: float = 1e-6, out=None):
    """out = weight * dtype(input * rsqrt(mean(input^2, -1) + eps)) (out=input: in place)."""
    return _normed("rmsnorm_hf", input, weight, out, eps)
