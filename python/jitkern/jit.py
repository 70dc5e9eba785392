"""load_jit, cache_once, make_cpp_args: the Python face of the JIT engine (which is C++)."""

from __future__ import annotations

import functools
import math
import numbers
import operator
import os
import sys
import threading
from typing import Any, Callable, Sequence, TypeVar

import tvm_ffi

from . import _engine

# host::ErrorKind::kTimeout crosses the C ABI as "TimeoutError", which tvm-ffi does not map by default.
tvm_ffi.register_error("TimeoutError", TimeoutError)

F = TypeVar("F", bound=Callable[..., Any])

_ENV: bytes | None = None
_MODULES: dict[str, "Module"] = {}  # registration prefix -> Module (the engine memoises the loads)
_MODULES_LOCK = threading.Lock()


def _context(cuda: bool) -> bytes:
    """The caller's part of a request: the current CUDA device when torch has CUDA up (torch.cuda is never
    initialised here: creating a CUDA context costs tens of milliseconds), and the tvm-ffi version."""
    global _ENV
    torch = sys.modules.get("torch") if cuda else None
    if torch is not None and torch.cuda.is_initialized():
        return _engine.encode_context(torch.cuda.current_device(), tvm_ffi.__version__)
    if _ENV is None:
        _ENV = _engine.encode_context(None, tvm_ffi.__version__)
    return _ENV


def _strings(owner: str, name: str, value: Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{owner}: {name} must be a list of strings, got {type(value).__name__}")
    for item in value:
        if not isinstance(item, str):
            raise TypeError(f"{owner}: {name} must contain only strings, got {item!r}")
    return tuple(value)


def _wrappers(owner: str, name: str, value: Sequence[tuple] | None) -> tuple[tuple[str, ...], ...]:
    """(export_name, cpp_expression) or (export_name, cpp_expression, argument_names) entries; the
    argument names (a list of strings or "a, b, c") name the parameters in argument errors."""
    if value is None:
        return ()
    expected = "(export_name, cpp_expression[, argument_names])"
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{owner}: {name} must be a list of {expected} tuples, got {type(value).__name__}")
    out = []
    for item in value:
        if not (type(item) in (tuple, list) and len(item) in (2, 3) and type(item[0]) is str and type(item[1]) is str):
            raise TypeError(f"{owner}: {name} must be a list of {expected} tuples, got {item!r}")
        if len(item) == 3:
            names = item[2]
            if not isinstance(names, str):
                if not (isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names)):
                    raise TypeError(f"{owner}: {name}: argument names must be a string or a list of strings, got {names!r}")
                names = ", ".join(names)
            out.append((item[0], item[1], names))
        else:
            out.append((item[0], item[1]))
    return tuple(out)


class JitSpec:
    """Everything that defines a kernel module, as a frozen value: the module name and template
    arguments (`args`), kernel files, exported wrappers, flags, include paths, build directory and,
    optionally, a fixed CUDA target (`cuda_arch`, e.g. "sm_90a"; by default the current device's).
    `host_without_nvcc=True` compiles the CUDA sources' host code with the host compiler alone and their
    kernels into a device image that launches go through by name (host::LaunchKernel does it): a quarter
    less compile work; the sources must keep kernel bodies under `#ifdef __CUDACC__`, and host code under
    `#ifndef __CUDACC_RTC__` for NVRTC to compile the kernels of builds run many at once (else nvcc does;
    docs/add-a-kernel.md). With it, `host_prelude=True` starts the host pass with `<jitkern/host_prelude.h>`
    (jitkern's headers), which builds run many at once compile once for all their host passes, and
    `device_parts=N` (2 to 8) has a lone build's nvcc compile the kernels in N device passes at once where
    the CPUs allow, each building those its launch code names under `host::in_device_part` for its number:
    it waits for the longest pass instead of one pass over them all (docs/add-a-kernel.md).
    `host_without_cudafe=True` (for kernel files written for nvcc, e.g. the reference framework's: see
    jitkern.compat.sglang) compiles their host side from nvcc's host preprocessing, rewritten, without
    cudafe++; where the rewrite cannot be sure, nvcc's host chain compiles it. With it, `host_shared_files=N`
    says that the first N `cuda_files` are headers many modules start with: their host side is compiled
    once per process (GCC's precompiled headers) for the later modules that start with the same text.

    `compile_seconds` estimates what its compile takes (jitkern's own modules give what they measured; 0:
    unknown): parallel builds (`warmup`, `jitkern prebuild`) start the costliest first, so that no long
    compile is left to run alone at the end. It is no part of the module's identity.

    `build()` compiles (or finds in the cache) and returns the library's path without loading it;
    `load()` returns the loaded module. Equal specs are equal values (usable as dictionary keys). The
    engine (C++) validates the contents and reports a bad one as ValueError naming the field.
    """

    __slots__ = ("args", "cpp_files", "cuda_files", "cpp_wrappers", "cuda_wrappers", "extra_cflags", "extra_cuda_cflags",
                 "extra_ldflags", "extra_include_paths", "build_directory", "cuda_arch", "host_without_nvcc", "host_prelude",
                 "host_without_cudafe", "host_shared_files", "device_parts", "compile_seconds", "_request")

    def __init__(
        self,
        *args: str,
        cpp_files: Sequence[str] | None = None,
        cuda_files: Sequence[str] | None = None,
        cpp_wrappers: Sequence[tuple] | None = None,
        cuda_wrappers: Sequence[tuple] | None = None,
        extra_cflags: Sequence[str] | None = None,
        extra_cuda_cflags: Sequence[str] | None = None,
        extra_ldflags: Sequence[str] | None = None,
        extra_include_paths: Sequence[str] | None = None,
        build_directory: str | None = None,
        cuda_arch: str | None = None,
        host_without_nvcc: bool = False,
        host_prelude: bool = False,
        host_without_cudafe: bool = False,
        host_shared_files: int = 0,
        device_parts: int = 1,
        compile_seconds: float = 0.0,
    ) -> None:
        owner = "JitSpec"
        if not args:
            raise TypeError(f"{owner}: at least one positional argument (the module name) is required")
        for a in args:
            if not isinstance(a, str):
                raise TypeError(f"{owner}: positional arguments (name and template arguments) must be strings, got {a!r}")
        for name, value in (("build_directory", build_directory), ("cuda_arch", cuda_arch)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{owner}: {name} must be a string, got {type(value).__name__}")
        for name, flag in (("host_without_nvcc", host_without_nvcc), ("host_prelude", host_prelude),
                           ("host_without_cudafe", host_without_cudafe)):
            if not isinstance(flag, bool):
                raise TypeError(f"{owner}: {name} must be a bool, got {type(flag).__name__}")
        for name, count in (("host_shared_files", host_shared_files), ("device_parts", device_parts)):
            if type(count) is not int:
                raise TypeError(f"{owner}: {name} must be an int, got {type(count).__name__}")
        # float first: the numbers.Real check is an ABC lookup, about 10 us the first time in a process
        if type(compile_seconds) is not float and (not isinstance(compile_seconds, numbers.Real) or isinstance(compile_seconds, bool)):
            raise TypeError(f"{owner}: compile_seconds must be a number of seconds, got {type(compile_seconds).__name__}")
        try:
            seconds = float(compile_seconds)
        except OverflowError:
            seconds = math.inf
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"{owner}: compile_seconds must be finite and >= 0, got {compile_seconds!r}")
        setattr_ = object.__setattr__
        setattr_(self, "args", args)
        setattr_(self, "cpp_files", _strings(owner, "cpp_files", cpp_files))
        setattr_(self, "cuda_files", _strings(owner, "cuda_files", cuda_files))
        setattr_(self, "cpp_wrappers", _wrappers(owner, "cpp_wrappers", cpp_wrappers))
        setattr_(self, "cuda_wrappers", _wrappers(owner, "cuda_wrappers", cuda_wrappers))
        setattr_(self, "extra_cflags", _strings(owner, "extra_cflags", extra_cflags))
        setattr_(self, "extra_cuda_cflags", _strings(owner, "extra_cuda_cflags", extra_cuda_cflags))
        setattr_(self, "extra_ldflags", _strings(owner, "extra_ldflags", extra_ldflags))
        setattr_(self, "extra_include_paths", _strings(owner, "extra_include_paths", extra_include_paths))
        setattr_(self, "build_directory", build_directory or None)
        setattr_(self, "cuda_arch", cuda_arch or None)
        setattr_(self, "host_without_nvcc", host_without_nvcc)
        setattr_(self, "host_prelude", host_prelude)
        setattr_(self, "host_without_cudafe", host_without_cudafe)
        setattr_(self, "host_shared_files", host_shared_files)
        setattr_(self, "device_parts", device_parts)
        setattr_(self, "compile_seconds", seconds + 0.0)  # -0.0 as 0.0
        setattr_(self, "_request", _engine.encode_request(
            args, self.cpp_files, self.cuda_files, self.cpp_wrappers, self.cuda_wrappers, self.extra_cflags,
            self.extra_cuda_cflags, self.extra_ldflags, self.extra_include_paths, build_directory, cuda_arch,
            host_without_nvcc, host_prelude, host_without_cudafe, host_shared_files, device_parts))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("JitSpec is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JitSpec) and self._request == other._request

    def __hash__(self) -> int:
        return hash(self._request)

    def __repr__(self) -> str:
        return f"JitSpec{self.args!r}"

    @property
    def name(self) -> str:
        return self.args[0]

    def replace(self, **changes: Any) -> "JitSpec":
        """A copy with some fields changed, e.g. spec.replace(cuda_arch="sm_100a")."""
        fields = {k: getattr(self, k) for k in JitSpec.__slots__ if k not in ("args", "_request")}
        unknown = set(changes) - set(fields) - {"args"}
        if unknown:
            raise TypeError(f"JitSpec.replace: unknown field(s) {', '.join(sorted(unknown))}")
        args = changes.pop("args", self.args)
        if not isinstance(args, (list, tuple)):  # a string would be taken apart into one-character arguments
            raise TypeError(f"JitSpec.replace: args must be a tuple of strings (the name, then template arguments), got {type(args).__name__}")
        fields.update(changes)
        return JitSpec(*args, **fields)

    def _wire(self) -> bytes:
        return self._request + _context(bool(self.cuda_files) and not self.cuda_arch)

    def build(self) -> str:
        """Compiles the module (or finds it in the cache) and returns its library's path; loads nothing."""
        return _engine.build(self._wire(), _engine.BUILD)

    def _check(self) -> None:
        """ValueError naming the field for anything a build would refuse before compiling; builds nothing."""
        _engine.check_request(self._request)

    def _build_reporting(self, parallel: bool = False) -> tuple[str, bool]:
        """build(), and whether this call ran the compiler; `parallel`: one of many builds run at once
        (warmup, `jitkern prebuild`)."""
        path, outcome = _engine.build(self._wire(), _engine.BUILD_REPORTING | (_engine.PARALLEL if parallel else 0)).splitlines()
        return path, outcome == "compiled"

    def load(self) -> "Module":
        """Builds if needed, loads and returns the module. A module stays loaded for the life of the process: once
        loaded, load() returns it without a lookup, also after a source changes (build() then compiles the new
        library, which a new process loads)."""
        path, prefix, *exports = _engine.build(self._wire(), _engine.LOAD).splitlines()
        module = _MODULES.get(prefix)
        if module is None:
            with _MODULES_LOCK:
                module = _MODULES.setdefault(prefix, Module(path, exports, prefix, self._parameters()))
        return module

    def _parameters(self) -> dict[str, tuple[str, ...]]:
        """export -> its parameter names, where its wrapper names them (the third element)."""
        return {w[0]: tuple(n.strip() for n in w[2].split(",") if n.strip()) for w in (*self.cpp_wrappers, *self.cuda_wrappers) if len(w) == 3}


def usable_cpus() -> int:
    """The CPUs this process may keep busy (its affinity, lowered to a cgroup CPU quota; the engine's count):
    parallel builds' default."""
    return _engine._LIB.jitkern_usable_cpus()


def costliest_first(specs: Sequence["JitSpec"]) -> list["JitSpec"]:
    """The order parallel builds start in: the largest compile_seconds first (the makespan of a parallel
    build is bounded below by its longest compile; started last, that one would run alone at the end);
    specs of equal cost keep their order."""
    return sorted(specs, key=lambda spec: -spec.compile_seconds)


def warmup(*specs: "JitSpec", workers: int | None = None) -> list["Module"]:
    """Builds the given specs in parallel threads, the costliest first (each compile runs its own processes;
    `workers`: builds at once, at least 1; default None: one build per usable CPU; JITKERN_DEVICE_COMPILER=auto gives several builds' kernels
    to NVRTC, the least compile work), then loads them in order; returns the modules. Use it
    before capturing CUDA graphs or serving, so that no call compiles. The engine's builds are thread- and
    process-safe; a failure raises after every build ends."""
    from concurrent.futures import ThreadPoolExecutor

    for spec in specs:
        if not isinstance(spec, JitSpec):
            raise TypeError(f"warmup: expected JitSpec values, got {type(spec).__name__}")
    if workers is None:
        workers = min(usable_cpus(), max(1, len(specs)))
    elif isinstance(workers, bool) or not hasattr(type(workers), "__index__"):  # numpy's ints too
        raise TypeError(f"warmup: workers must be an int or None, got {type(workers).__name__}")
    elif (workers := operator.index(workers)) < 1:
        raise ValueError(f"warmup: workers must be at least 1 (None: one build per usable CPU), got {workers}")
    with ThreadPoolExecutor(max_workers=workers) as pool:
        unique = list(dict.fromkeys(costliest_first(specs)))
        futures = {spec: pool.submit(spec._build_reporting, len(unique) > 1 and workers > 1) for spec in unique}
        for spec in specs:  # the first failure in the caller's order is the one raised
            futures[spec].result()
    return [spec.load() for spec in specs]


def load_jit(*args: str, **kwargs: Any) -> "Module":
    """Compiles (or loads from the cache) a kernel module and returns it: `JitSpec(*args, **kwargs).load()`.

    `args` name the build: the module name followed by its template arguments (different kernels or
    instantiations must differ). `cpp_files`/`cuda_files` are relative to the package's csrc/ unless
    absolute. `cpp_wrappers`/`cuda_wrappers` export C++ functions as `module.<export_name>`. Further
    keywords: extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths, build_directory.
    """
    return JitSpec(*args, **kwargs).load()


def _keyword_call(function: Any, name: str, parameters: tuple[str, ...] | None) -> Any:
    """`function` (positional only, as tvm-ffi calls) made callable with keywords by its parameter names."""
    signature = f"{name}({', '.join(parameters)})" if parameters else f"{name}()"

    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            args = _bind(args, kwargs)
        return function(*args)

    def _bind(args: tuple, kwargs: dict) -> tuple:
        if not parameters:
            raise TypeError(f"{name}() takes positional arguments only: its parameters are not named (name them in "
                            f"its wrapper's third element, e.g. (\"{name}\", \"<expression>\", \"x, y\"))")
        bound = dict(zip(parameters, args))
        for key, value in kwargs.items():
            if key not in parameters:
                raise TypeError(f"{signature} got an unexpected keyword argument {key!r}")
            if key in bound:
                raise TypeError(f"{signature} got multiple values for argument {key!r}")
            bound[key] = value
        missing = [p for p in parameters if p not in bound]
        if missing:
            raise TypeError(f"{signature} missing argument{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}")
        return tuple(bound[p] for p in parameters) + args[len(parameters):]

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"{signature}: the module's export (positional or keyword arguments)"
    return call


class Module:
    """A loaded kernel module: one attribute per exported function, callable with positional arguments or
    with keywords by the parameter names its wrapper gives, plus `path` and `exports` (export names that
    would shadow these are refused by the engine). positional(module, name) gives an export's
    tvm_ffi.Function itself, for hot paths."""

    def __init__(self, path: str, exports: list[str], prefix: str, parameters: dict[str, tuple[str, ...]] | None = None) -> None:
        self.path = path
        self.exports = tuple(exports)
        functions = self.__dict__["__functions__"] = {name: tvm_ffi.get_global_func(prefix + name) for name in exports}
        for name, function in functions.items():
            setattr(self, name, _keyword_call(function, name, (parameters or {}).get(name)))

    def __getitem__(self, name: str) -> Any:
        if name not in self.exports:
            raise KeyError(f"module {self.path} exports no function {name!r}; it has {', '.join(self.exports)}")
        return getattr(self, name)

    def __getattr__(self, name: str) -> Any:  # only reached for names that are not exports
        exports = self.__dict__.get("exports", ())
        raise AttributeError(f"module {self.__dict__.get('path')} exports no function {name!r}; it has {', '.join(exports)}")

    def __repr__(self) -> str:
        return f"<jitkern.Module {self.path} exports={list(self.exports)}>"


def positional(module: Module, name: str) -> Any:
    """`module`'s export `name` as the tvm_ffi.Function itself: positional arguments only, one Python call
    level less than the module's attribute (what the ops' hot paths call)."""
    return module.__dict__["__functions__"][name]


def cache_once(fn: F) -> F:
    """Memoises `fn` by its arguments, forever, thread-safely (the function runs once per key).

    Unlike functools.lru_cache this keeps no LRU bookkeeping and is a plain dictionary lookup on the
    hot path, which torch.compile can trace through.
    """
    cache: dict[Any, Any] = {}
    lock = threading.Lock()
    keywords = object()  # heads a keyword call's key: no positional call's arguments can equal it

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        key = (keywords, args, tuple(sorted(kwargs.items()))) if kwargs else args
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


# The one table of element types: torch dtype name -> C++ alias of <jitkern/type.cuh> (integers are
# the standard types). tests/python/compile/test_cuda_compile.py checks every row against the headers.
DTYPES = {
    "float32": "fp32_t",
    "float16": "fp16_t",
    "bfloat16": "bf16_t",
    "float8_e4m3fn": "fp8_e4m3_t",
    "float8_e5m2": "fp8_e5m2_t",
    "int8": "int8_t",
    "uint8": "uint8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
}


def cpp_type(dtype: Any) -> str:
    """The C++ alias of a torch dtype (or of its name, e.g. "bfloat16")."""
    name = dtype if isinstance(dtype, str) else (str(dtype).removeprefix("torch.")
                                                  if type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype" else None)
    if name is None:
        raise TypeError(f"cpp_type: expected a torch dtype or a dtype name, got {dtype!r}")
    try:
        return DTYPES[name]
    except KeyError:
        raise TypeError(f"unsupported torch dtype {dtype}; supported: {', '.join(DTYPES)}") from None


def _cpp_arg(arg: Any) -> str:
    if isinstance(arg, bool) or type(arg).__name__ == "bool_":  # numpy.bool_ too
        return "true" if arg else "false"
    if isinstance(arg, numbers.Integral):  # int, numpy integers
        return str(int(arg))
    if isinstance(arg, numbers.Real):  # numpy floats' repr (e.g. np.float64(0.1)) is not a C++ literal
        value = float(arg)
        if not math.isfinite(value):
            raise ValueError(f"make_cpp_args: {arg!r} has no C++ literal")
        return repr(value)
    if type(arg).__module__ == "torch" and type(arg).__name__ == "dtype":
        try:
            return cpp_type(arg)
        except TypeError as e:
            raise TypeError(f"make_cpp_args: {e}") from None
    raise TypeError(
        f"make_cpp_args: unsupported argument {arg!r} of type {type(arg).__name__}; "
        "expected bool, int, float or a torch dtype"
    )


def make_cpp_args(*args: Any) -> CPPArgList:
    """Converts Python values to C++ template-argument spellings (bool, int, float, torch dtypes)."""
    return CPPArgList(_cpp_arg(a) for a in args)
