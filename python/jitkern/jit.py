"""load_jit, cache_once, make_cpp_args: the Python face of the JIT engine (which is C++)."""

from __future__ import annotations

import functools
import itertools
import math
import os
import sys
import threading
from typing import Any, Callable, Sequence, TypeVar

import tvm_ffi

from . import _engine

F = TypeVar("F", bound=Callable[..., Any])

_ENV: dict[str, str] | None = None
_MODULES: dict[tuple, "Module"] = {}
_MODULES_LOCK = threading.Lock()
_REGISTRATIONS = itertools.count()


def _env() -> dict[str, str]:
    global _ENV
    if _ENV is None:
        _ENV = _engine.environment_paths()
    return _ENV


def _str_list(name: str, value: Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"load_jit: {name} must be a list of strings, got {type(value).__name__}")
    for item in value:
        if not isinstance(item, str):
            raise TypeError(f"load_jit: {name} must contain only strings, got {item!r}")
        if "\n" in item or "\t" in item or not item:
            raise ValueError(f"load_jit: {name} entries must be non-empty and contain no tab or newline, got {item!r}")
    return tuple(value)


def _wrappers(name: str, value: Sequence[tuple[str, str]] | None) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    out = []
    for item in value:
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            raise TypeError(f"load_jit: {name} must be a list of (export_name, cpp_expression) string pairs, got {item!r}")
        export, expr = item
        if not export.isidentifier():
            raise ValueError(f"load_jit: {name} export name {export!r} is not a valid identifier")
        if "\n" in expr or "\t" in expr or not expr.strip():
            raise ValueError(f"load_jit: {name} expression for {export!r} must be a non-empty single line")
        out.append((export, expr))
    return tuple(out)


def _cuda_target() -> list[tuple[str, str]]:
    """The target for CUDA sources when torch already has CUDA up: its current device's arch.

    Otherwise the engine decides ($JITKERN_CUDA_ARCH, else a driver query). torch.cuda is never
    initialised here: creating a CUDA context costs tens of milliseconds.
    """
    if os.environ.get("JITKERN_CUDA_ARCH"):
        return []
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return []
    device = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(device)
    # Architecture-specific features (wgmma, setmaxnreg, ...) need the 'a' target on sm_90 and later.
    return [("cuda_arch", f"sm_{major}{minor}{'a' if major >= 9 else ''}"), ("cuda_device", str(device))]


def load_jit(
    *args: str,
    cpp_files: Sequence[str] | None = None,
    cuda_files: Sequence[str] | None = None,
    cpp_wrappers: Sequence[tuple[str, str]] | None = None,
    cuda_wrappers: Sequence[tuple[str, str]] | None = None,
    extra_cflags: Sequence[str] | None = None,
    extra_cuda_cflags: Sequence[str] | None = None,
    extra_ldflags: Sequence[str] | None = None,
    extra_include_paths: Sequence[str] | None = None,
    build_directory: str | None = None,
) -> "Module":
    """Compiles (or loads from the cache) a kernel module and returns it (a jitkern.jit.Module).

    `args` name the build: the module name followed by its template arguments (different kernels or
    instantiations must differ). `cpp_files`/`cuda_files` are relative to the package's csrc/ unless
    absolute. `cpp_wrappers`/`cuda_wrappers` export C++ functions as `module.<export_name>`.
    """
    if not args:
        raise TypeError("load_jit: at least one positional argument (the module name) is required")
    for a in args:
        if not isinstance(a, str) or not a or "\n" in a or "\t" in a:
            raise TypeError(f"load_jit: positional arguments must be non-empty single-line strings, got {a!r}")
    key = (
        args,
        _str_list("cpp_files", cpp_files),
        _str_list("cuda_files", cuda_files),
        _wrappers("cpp_wrappers", cpp_wrappers),
        _wrappers("cuda_wrappers", cuda_wrappers),
        _str_list("extra_cflags", extra_cflags),
        _str_list("extra_cuda_cflags", extra_cuda_cflags),
        _str_list("extra_ldflags", extra_ldflags),
        _str_list("extra_include_paths", extra_include_paths),
        build_directory,
    )
    if build_directory is not None and (not isinstance(build_directory, str) or not build_directory):
        raise TypeError(f"load_jit: build_directory must be a non-empty string, got {build_directory!r}")
    module = _MODULES.get(key)
    if module is not None:
        return module

    request: list[tuple[str, str]] = [("name", a) for a in args]
    request += [("cpp_file", f) for f in key[1]] + [("cuda_file", f) for f in key[2]]
    request += [("cpp_wrapper", f"{n}\t{e}") for n, e in key[3]] + [("cuda_wrapper", f"{n}\t{e}") for n, e in key[4]]
    request += [("cflag", f) for f in key[5]] + [("cuda_cflag", f) for f in key[6]]
    request += [("ldflag", f) for f in key[7]] + [("include", f) for f in key[8]]
    if build_directory:
        request.append(("build_directory", build_directory))
    if key[2]:
        request += _cuda_target()
    request += list(_env().items())
    prefix = f"jitkern:{next(_REGISTRATIONS)}:"  # unique per load: a rebuilt library never shadows a loaded one
    path = _engine.build(request, register_prefix=prefix)
    module = Module(path, [n for n, _ in key[3]] + [n for n, _ in key[4]], prefix)
    with _MODULES_LOCK:
        return _MODULES.setdefault(key, module)


class Module:
    """A loaded kernel module: one attribute per exported function (a tvm_ffi.Function).

    The engine loads the library itself and registers its exports as tvm-ffi global functions
    under `prefix` (cheaper than tvm_ffi.load_module on the warm path, measured)."""

    def __init__(self, path: str, exports: list[str], prefix: str) -> None:
        self.path = path
        self._exports = tuple(exports)
        for name in exports:
            setattr(self, name, tvm_ffi.get_global_func(prefix + name))

    def __getitem__(self, name: str) -> Any:
        if name not in self._exports:
            raise KeyError(f"module {self.path} exports no function {name!r}; it has {', '.join(self._exports)}")
        return getattr(self, name)

    def __getattr__(self, name: str) -> Any:  # only reached for names that are not exports
        exports = self.__dict__.get("_exports", ())
        raise AttributeError(f"module {self.__dict__.get('path')} exports no function {name!r}; it has {', '.join(exports)}")

    def __repr__(self) -> str:
        return f"<jitkern.Module {self.path} exports={list(self._exports)}>"


def cache_once(fn: F) -> F:
    """Memoises `fn` by its arguments, forever, thread-safely (the function runs once per key).

    Unlike functools.lru_cache this keeps no LRU bookkeeping and is a plain dictionary lookup on the
    hot path, which torch.compile can trace through.
    """
    cache: dict[Any, Any] = {}
    lock = threading.Lock()

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(sorted(kwargs.items()))) if kwargs else args
        try:
            return cache[key]
        except KeyError:
            pass
        with lock:
            if key not in cache:
                cache[key] = fn(*args, **kwargs)
            return cache[key]

    wrapper.cache_clear = cache.clear  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


class CPPArgList(list):
    """C++ template arguments; str() joins them with ', ' for use inside <...>."""

    def __str__(self) -> str:
        return ", ".join(self)


_TORCH_DTYPES = {
    "torch.float32": "fp32_t",
    "torch.float16": "fp16_t",
    "torch.bfloat16": "bf16_t",
    "torch.float8_e4m3fn": "fp8_e4m3_t",
    "torch.int8": "int8_t",
    "torch.int32": "int32_t",
    "torch.int64": "int64_t",
}


def _cpp_arg(arg: Any) -> str:
    if isinstance(arg, bool):
        return "true" if arg else "false"
    if isinstance(arg, int):
        return str(arg)
    if isinstance(arg, float):
        if not math.isfinite(arg):
            raise ValueError(f"make_cpp_args: {arg!r} has no C++ literal")
        return repr(arg)
    if type(arg).__module__ == "torch" and type(arg).__name__ == "dtype":
        try:
            return _TORCH_DTYPES[str(arg)]
        except KeyError:
            raise TypeError(
                f"make_cpp_args: unsupported torch dtype {arg}; supported: {', '.join(_TORCH_DTYPES)}"
            ) from None
    raise TypeError(
        f"make_cpp_args: unsupported argument {arg!r} of type {type(arg).__name__}; "
        "expected bool, int, float or a torch dtype"
    )


def make_cpp_args(*args: Any) -> CPPArgList:
    """Converts Python values to C++ template-argument spellings (bool, int, float, torch dtypes)."""
    return CPPArgList(_cpp_arg(a) for a in args)
