"""jitkern: just-in-time CUDA/C++ kernels, compiled on first use, cached, called through tvm-ffi."""

import importlib

from ._engine import PACKAGE_DIR, BuildError, CacheMissError

__version__ = "0.1.0"
INCLUDE_DIR = PACKAGE_DIR / "include"
CSRC_DIR = PACKAGE_DIR / "csrc"

# The rest loads on first use, so that `import jitkern` and the `jitkern` command import neither tvm-ffi
# nor torch (which tvm-ffi imports where it is installed: seconds on a GPU host) until they need them.
_LAZY = {"CPPArgList": "jit", "DTYPES": "jit", "JitSpec": "jit", "Module": "jit", "cache_once": "jit", "cpp_type": "jit",
         "load_jit": "jit", "make_cpp_args": "jit", "warmup": "jit", "torch_op": "_torch", "Event": "ops.wait_value"}


def __getattr__(name: str):
    if name == "ops":  # the op modules (they need torch)
        return importlib.import_module(".ops", __name__)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jitkern' has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(f".{module}", __name__), name)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "ops"})


__all__ = ["BuildError", "CacheMissError", "CPPArgList", "DTYPES", "JitSpec", "Module", "cache_once", "cpp_type", "load_jit", "make_cpp_args",
           "torch_op", "warmup", "INCLUDE_DIR", "CSRC_DIR"]
