"""The RMSNorm family (csrc/norm.cuh): rmsnorm, fused_add_rmsnorm, fused_inplace_qknorm,
fused_inplace_qknorm_across_heads. fp16/bf16/fp32 CUDA tensors, fp32 accumulation, any hidden size,
rows may be strided (the last dimension must be contiguous)."""

from __future__ import annotations

import math

import torch

from ..jit import cache_once, load_jit, make_cpp_args

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_OPS = ("rmsnorm", "fused_add_rmsnorm", "qknorm", "qknorm_across_heads")


@cache_once
def _norm_module(dtype: torch.dtype):
    (t,) = make_cpp_args(dtype)
    return load_jit("norm", t, cuda_files=["norm.cuh"], cuda_wrappers=[(op, f"NormOps<{t}>::{op}") for op in _OPS])


def _check(name: str, x, dims: int | tuple[int, ...], dtype: torch.dtype | None = None, device=None) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_cuda:
        raise ValueError(f"{name} must be a CUDA tensor, got device {x.device}")
    if x.dtype not in _DTYPES:
        raise TypeError(f"{name} must be float16, bfloat16 or float32, got {x.dtype}")
    if dtype is not None and x.dtype != dtype:
        raise TypeError(f"{name} must have the same dtype as the input ({dtype}), got {x.dtype}")
    if device is not None and x.device != device:
        raise ValueError(f"{name} must be on {device}, got {x.device}")
    allowed = (dims,) if isinstance(dims, int) else dims
    if x.dim() not in allowed:
        raise ValueError(f"{name} must have {' or '.join(map(str, allowed))} dimensions, got shape {tuple(x.shape)}")
    if x.numel() > 0 and x.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous in its last dimension, got strides {x.stride()}")


def _check_eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite non-negative number, got {eps!r}")
    return float(eps)


def _check_weight(name: str, w, width: int, ref: torch.Tensor) -> None:
    _check(name, w, 1, ref.dtype, ref.device)
    if w.shape[0] != width:
        raise ValueError(f"{name} must have shape ({width},), got {tuple(w.shape)}")
    if not w.is_contiguous():
        raise ValueError(f"{name} must be contiguous")


def _validate_rmsnorm(input, weight, output, eps) -> None:
    _check("input", input, 2)
    _check_weight("weight", weight, input.shape[1], input)
    if output is not None:
        _check("output", output, 2, input.dtype, input.device)
        if output.shape != input.shape:
            raise ValueError(f"output must have the input's shape {tuple(input.shape)}, got {tuple(output.shape)}")
    _check_eps(eps)


def _validate_fused_add_rmsnorm(input, residual, weight, eps) -> None:
    _check("input", input, 2)
    _check("residual", residual, 2, input.dtype, input.device)
    if residual.shape != input.shape:
        raise ValueError(f"residual must have the input's shape {tuple(input.shape)}, got {tuple(residual.shape)}")
    _check_weight("weight", weight, input.shape[1], input)
    _check_eps(eps)


def _validate_qknorm(q, k, q_weight, k_weight, eps, head_dim) -> None:
    _check("q", q, (2, 3))
    _check("k", k, (2, 3), q.dtype, q.device)
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 0:
        raise ValueError(f"head_dim must be a positive int (or 0 when q and k are [N, H, D]), got {head_dim!r}")
    if head_dim == 0 and (q.dim() == 2 or k.dim() == 2):
        raise ValueError("head_dim must be a positive int when q or k is 2-D [N, H * D]")
    for name, t in (("q", q), ("k", k)):
        if t.dim() == 2 and t.shape[1] % head_dim != 0:
            raise ValueError(f"{name} width {t.shape[1]} is not a multiple of head_dim {head_dim}")
        if t.dim() == 3 and head_dim and t.shape[2] != head_dim:
            raise ValueError(f"{name}'s head dimension {t.shape[2]} differs from head_dim {head_dim}")
    dq, dk = (head_dim if t.dim() == 2 else t.shape[2] for t in (q, k))
    if q.shape[0] != k.shape[0] or dq != dk:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree in tokens and head dimension")
    _check_weight("q_weight", q_weight, dq, q)
    _check_weight("k_weight", k_weight, dk, q)
    _check_eps(eps)


def _validate_qknorm_across_heads(q, k, q_weight, k_weight, eps) -> None:
    _check("q", q, 2)
    _check("k", k, 2, q.dtype, q.device)
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"q and k must have the same number of tokens, got {q.shape[0]} and {k.shape[0]}")
    _check_weight("q_weight", q_weight, q.shape[1], q)
    _check_weight("k_weight", k_weight, k.shape[1], q)
    _check_eps(eps)


_Tensor = torch.Tensor
_FUNCTIONS: dict = {}  # (op, dtype) -> exported function, filled by the first valid call


def _call(op: str, validate, args: tuple, eps, *options) -> None:
    """Calls the exported op on args + (eps,) + options.

    The C++ side verifies every argument before it launches (dtype, shape, strides, device, eps), so the
    hot path does not repeat that in Python (measured: 3-11 us less host time per call, see
    docs/benchmarks.md). `validate` runs before the first call of an op and dtype, and after any
    failure, to name the bad argument in Python terms (TypeError / ValueError) instead of the C++
    message."""
    fn = _FUNCTIONS.get((op, getattr(args[0], "dtype", None)))
    if fn is None or type(eps) is not float:
        validate(*args, eps, *options)
        fn = _FUNCTIONS.setdefault((op, args[0].dtype), getattr(_norm_module(args[0].dtype), op))
        eps = float(eps)
    try:
        fn(*args, eps, *options)
    except Exception:
        _raise_precise(validate, (*args, eps, *options))
        raise


def _raise_precise(validate, args: tuple) -> None:
    try:
        validate(*args)
    except (TypeError, ValueError) as problem:
        raise problem from None


def rmsnorm(input: torch.Tensor, weight: torch.Tensor, output: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """output = input * rsqrt(mean(input^2, -1) + eps) * weight over [T, H] (pass output=input for in place)."""
    if output is None and isinstance(input, _Tensor):
        output = torch.empty_like(input)
    _call("rmsnorm", _validate_rmsnorm, (input, weight, output), eps)
    return output


def fused_add_rmsnorm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
    """residual += input; input = rmsnorm(residual) * weight (both in place)."""
    _call("fused_add_rmsnorm", _validate_fused_add_rmsnorm, (input, residual, weight), eps)


def fused_inplace_qknorm(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                         eps: float = 1e-6, *, head_dim: int = 0) -> None:
    """Per-head RMSNorm of q [N, Hq, D] and k [N, Hk, D] in place; with head_dim, q and k may also be
    2-D [N, H * D] (e.g. column slices of a fused qkv buffer)."""
    if type(head_dim) is not int:  # a bool or a float would pass tvm-ffi's integer conversion
        _validate_qknorm(q, k, q_weight, k_weight, eps, head_dim)
    _call("qknorm", _validate_qknorm, (q, k, q_weight, k_weight), eps, head_dim)


def fused_inplace_qknorm_across_heads(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                                      eps: float = 1e-6) -> None:
    """RMSNorm of every row of q [N, Wq] and k [N, Wk] over the whole row, in place."""
    _call("qknorm_across_heads", _validate_qknorm_across_heads, (q, k, q_weight, k_weight), eps)
