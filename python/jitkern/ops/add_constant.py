"""add_constant(src, c) = src + c for int32 CUDA tensors (the add-a-kernel tutorial's example).

The C++ entry point checks the tensors (names them, TypeError for a dtype, ValueError for a device,
layout or shape); Python checks only the constant, which picks the instantiation."""

from __future__ import annotations

from ..jit import JitSpec, make_cpp_args

try:
    import torch
except ImportError:  # the specs need no torch (CI compile-checks them); the op does
    torch = None

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def spec(constant: int) -> JitSpec:
    """The module for one constant (a template argument, as in the tutorial)."""
    args = make_cpp_args(constant)
    return JitSpec("add_constant", *args, cuda_files=["add_constant.cuh"],
                   cuda_wrappers=[("add_constant", f"add_constant<{args}>", "out, src")])


def _add_constant_function(constant: int):
    return spec(constant).load().add_constant  # the engine memoises loads


_FUNCTIONS: dict[int, object] = {}  # constant -> exported function


def add_constant(src: torch.Tensor, constant: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Returns src + constant (int32, wrapping on overflow like torch); writes into `out` if given."""
    fn = _FUNCTIONS.get(constant) if type(constant) is int else None
    if fn is None:
        if type(constant) is not int or not _INT32_MIN <= constant <= _INT32_MAX:
            raise TypeError(f"add_constant(): constant must be an int in the int32 range, got {constant!r}")
        fn = _FUNCTIONS.setdefault(constant, _add_constant_function(constant))
    if out is None:
        if not isinstance(src, torch.Tensor):
            raise TypeError(f"add_constant(): src must be a torch.Tensor, got {type(src).__name__}")
        # torch.empty_like is cheaper than allocating in C++ through tvm-ffi's allocator (docs/benchmarks.md).
        out = torch.empty_like(src, memory_format=torch.contiguous_format)
    fn(out, src)
    return out
