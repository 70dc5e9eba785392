"""The reference framework's 0.5.9 kernel-loading names on jitkern: a package written for that interface
switches with one import line (`from jitkern.compat import load_jit, cache_once, make_cpp_args, ...`) and
one call saying where its relative kernel files live (`set_csrc_dir`); its kernels compile against
jitkern's <sgl_kernel/...> headers. The reference's current kernel package (sglang/kernels/jit) runs on
jitkern through jitkern.compat.sglang instead, with its own headers; jitkern.compat.check checks it.

Kernel errors raised through modules loaded here are still jitkern's TypeError/ValueError, in classes
that also derive from RuntimeError, which is what the reference's callers catch.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from ..jit import DTYPES, CPPArgList, JitSpec, cache_once, make_cpp_args, positional

__all__ = ["CPP_DTYPE_MAP", "CPPArgList", "cache_once", "is_arch_support_pdl", "load_jit", "make_cpp_args", "set_csrc_dir"]

_csrc_dir: str | None = None


def set_csrc_dir(path: str | os.PathLike) -> None:
    """Relative `cpp_files`/`cuda_files` of later `load_jit` calls resolve against `path` (the reference
    resolves them against its own csrc directory; jitkern's default is its package's csrc/)."""
    global _csrc_dir
    _csrc_dir = os.path.abspath(os.fspath(path))


class CompatTypeError(TypeError, RuntimeError):
    pass


class CompatValueError(ValueError, RuntimeError):
    pass


_AS_RUNTIME = {TypeError: CompatTypeError, ValueError: CompatValueError}


def _raising_runtime_errors(fn: Any) -> Any:
    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except (TypeError, ValueError) as e:
            if isinstance(e, RuntimeError):
                raise
            raise _AS_RUNTIME[ValueError if isinstance(e, ValueError) else TypeError](str(e)) from e

    return call


class _CompatModule:
    """A loaded module whose exports raise RuntimeError subclasses; `module` is jitkern's Module."""

    def __init__(self, module: Any) -> None:
        self.module = module
        for name in module.exports:
            setattr(self, name, _raising_runtime_errors(positional(module, name)))  # positional, as the reference's


def load_jit(*args: Any, cpp_files: list[str] | None = None, cuda_files: list[str] | None = None, **kwargs: Any) -> _CompatModule:
    """jitkern.load_jit with the reference's calling convention: template arguments may be a CPPArgList
    (from make_cpp_args), relative files resolve against set_csrc_dir's directory when it was called."""
    names = [str(a) for a in args]
    resolve = (lambda files: files if files is None or _csrc_dir is None else [os.path.join(_csrc_dir, f) for f in files])
    return _CompatModule(JitSpec(*names, cpp_files=resolve(cpp_files), cuda_files=resolve(cuda_files), **kwargs).load())


@functools.cache
def is_arch_support_pdl() -> bool:
    """Programmatic dependent launch needs sm_90 or newer (the current CUDA device)."""
    import torch

    return torch.cuda.get_device_capability()[0] >= 9


def __getattr__(name: str) -> Any:
    if name == "CPP_DTYPE_MAP":  # torch.dtype -> C++ alias, built on first use (torch is optional)
        import torch

        return {getattr(torch, k): v for k, v in DTYPES.items() if hasattr(torch, k)}
    raise AttributeError(f"module 'jitkern.compat' has no attribute {name!r}")
