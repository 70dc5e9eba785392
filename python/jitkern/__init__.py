"""jitkern: just-in-time CUDA/C++ kernels, compiled on first use, cached, called through tvm-ffi."""

from ._engine import PACKAGE_DIR, BuildError, CacheMissError
from ._torch import torch_op
from .jit import DTYPES, CPPArgList, JitSpec, Module, cache_once, cpp_type, load_jit, make_cpp_args, warmup

__version__ = "0.1.0"
INCLUDE_DIR = PACKAGE_DIR / "include"
CSRC_DIR = PACKAGE_DIR / "csrc"



def __getattr__(name: str):
    if name == "Event":  # jitkern.Event needs torch, which the rest of this package does not
        from .ops.wait_value import Event

        return Event
    raise AttributeError(f"module 'jitkern' has no attribute {name!r}")


__all__ = ["BuildError", "CacheMissError", "CPPArgList", "DTYPES", "JitSpec", "Module", "cache_once", "cpp_type", "load_jit", "make_cpp_args",
           "torch_op", "warmup", "INCLUDE_DIR", "CSRC_DIR"]
