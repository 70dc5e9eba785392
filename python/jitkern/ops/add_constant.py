"""add_constant(src, c) = src + c for int32 CUDA tensors (the add-a-kernel tutorial's example)."""

from __future__ import annotations

import torch

from ..jit import cache_once, load_jit, make_cpp_args

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


@cache_once
def _add_constant_function(constant: int):
    args = make_cpp_args(constant)  # the constant is a template argument, as in the tutorial
    module = load_jit(
        "add_constant",
        *args,
        cuda_files=["add_constant.cuh"],
        cuda_wrappers=[("add_constant", f"add_constant<{args}>")],
    )
    # Keep the function object itself: looking it up on the module costs a dictionary walk per call.
    return module.add_constant


def _reject(src, constant, out) -> None:
    """The slow path: names the first thing wrong with the arguments."""
    if not isinstance(src, torch.Tensor):
        raise TypeError(f"add_constant: src must be a torch.Tensor, got {type(src).__name__}")
    if not src.is_cuda:
        raise ValueError(f"add_constant: src must be a CUDA tensor, got device {src.device}")
    if src.dtype is not torch.int32:
        raise TypeError(f"add_constant: src must have dtype torch.int32, got {src.dtype}")
    if not src.is_contiguous():
        raise ValueError("add_constant: src must be contiguous")
    if type(constant) is not int or not _INT32_MIN <= constant <= _INT32_MAX:
        raise TypeError(f"add_constant: constant must be an int in the int32 range, got {constant!r}")
    raise ValueError(
        f"add_constant: out must be a contiguous int32 tensor with src's shape {tuple(src.shape)} and device {src.device}"
    )


_FUNCTIONS: dict[int, object] = {}  # constant -> exported function, filled by the slow path
_Tensor, _INT32 = torch.Tensor, torch.int32


def add_constant(src: torch.Tensor, constant: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Returns src + constant (int32, wrapping on overflow like torch); writes into `out` if given."""
    # The hot path is one dictionary lookup and one combined check; _reject explains a failure.
    fn = _FUNCTIONS.get(constant) if type(constant) is int else None
    if fn is None or not (isinstance(src, _Tensor) and src.is_cuda and src.dtype is _INT32 and src.is_contiguous()):
        if not (isinstance(src, _Tensor) and src.is_cuda and src.dtype is _INT32 and src.is_contiguous()
                and type(constant) is int and _INT32_MIN <= constant <= _INT32_MAX):
            _reject(src, constant, out)
        fn = _FUNCTIONS.setdefault(constant, _add_constant_function(constant))
    if out is None:
        # Measured on H100: torch.empty_like (2.3 us) is cheaper than allocating in C++ through
        # tvm-ffi's environment allocator and returning the tensor (2.7 us), see docs/benchmarks.md.
        out = torch.empty_like(src)
    elif not (isinstance(out, _Tensor) and out.dtype is _INT32 and out.shape == src.shape and out.device == src.device
              and out.is_contiguous()):
        _reject(src, constant, out)
    if src.dim() == 1:
        fn(out, src)
    else:
        fn(out.view(-1), src.view(-1))
    return out
