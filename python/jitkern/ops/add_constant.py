"""add_constant(src, c) = src + c for int32 CUDA tensors (the add-a-kernel tutorial's example).

The C++ entry point checks the tensors (names them, TypeError for a dtype, ValueError for a device,
layout or shape); Python checks only the constant, which picks the instantiation. The op is also a
torch custom op (torch.ops.jitkern.add_constant), which is what torch.compile traces."""

from __future__ import annotations

from .._torch import check_cuda_tensor, check_not_capturing, compiling, torch
from ..jit import JitSpec, make_cpp_args, positional
from ._declare import Family, TorchOp, wrapper

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_EXPORTS = {"add_constant": "out, src"}


def spec(constant: int) -> JitSpec:
    """The module for one constant (a template argument, as in the tutorial)."""
    args = make_cpp_args(constant)
    return JitSpec("add_constant", *args, cuda_files=["add_constant.cuh"],
                   cuda_wrappers=[wrapper(e, f"{e}<{args}>", params) for e, params in _EXPORTS.items()])


def _add_constant_function(constant: int):
    return positional(spec(constant).load(), "add_constant")  # the engine memoises loads


_FUNCTIONS: dict[int, object] = {}  # constant -> exported function


def _checked(constant):
    if type(constant) is not int or not _INT32_MIN <= constant <= _INT32_MAX:
        raise TypeError(f"add_constant(): constant must be an int in the int32 range, got {constant!r}")
    return constant


class _PerConstant:
    """The family's modules: one per constant."""
    params, PER_CONSTANT = _EXPORTS, True

    @staticmethod
    def specs(exports=None, dtypes=None, constants=()) -> list[JitSpec]:
        return [spec(_checked(c)) for c in constants]

    @staticmethod
    def warmup(exports=None, dtypes=(), constants=()) -> None:
        """Loads (building in parallel where needed) add_constant for these constants."""
        from ..jit import warmup as build_all

        for constant, module in zip(constants, build_all(*(spec(c) for c in constants))):
            _FUNCTIONS.setdefault(constant, positional(module, "add_constant"))


FAMILY = Family(_PerConstant)


def _add_constant_out(src, constant, out):
    add_constant(src, constant, out)


@FAMILY.op("add_constant", torch=(
    TorchOp("add_constant", "(Tensor src, int constant) -> Tensor", None,
            lambda src, constant: torch.empty_like(src, memory_format=torch.contiguous_format)),
    TorchOp("add_constant_out", "(Tensor src, int constant, Tensor(a!) out) -> ()", _add_constant_out)))
def add_constant(src: torch.Tensor, constant: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Returns src + constant (int32, wrapping on overflow like torch); writes into `out` if given."""
    if compiling():
        if out is None:
            return torch.ops.jitkern.add_constant(src, constant)
        torch.ops.jitkern.add_constant_out(src, constant, out)
        return out
    fn = _FUNCTIONS.get(constant) if type(constant) is int else None
    if fn is None:
        _checked(constant)
        check_cuda_tensor("add_constant", "src", src)
        check_not_capturing(f"add_constant for constant {constant}", f"jitkern.ops.warmup(constants=[{constant}])")
        fn = _FUNCTIONS.setdefault(constant, _add_constant_function(constant))
    if out is None:
        if not isinstance(src, torch.Tensor):
            raise TypeError(f"add_constant(): src must be a torch.Tensor, got {type(src).__name__}")
        # torch.empty_like is cheaper than allocating in C++ through tvm-ffi's allocator (docs/benchmarks/add_constant.md).
        out = torch.empty_like(src, memory_format=torch.contiguous_format)
    fn(out, src)
    return out
