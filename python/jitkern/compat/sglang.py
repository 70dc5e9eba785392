"""jitkern as the engine under the reference framework's (SGLang's) current JIT kernels.

The reference keeps its kernel package under `sglang/kernels/jit/` (headers in `include/`, kernel
sources in `csrc/`, the loader in `utils/`) and its op modules under `sglang/kernels/ops/<group>/`.
This module is that loader's interface on jitkern's engine:

    from jitkern.compat.sglang import cache_once, load_jit, make_cpp_args   # the one import switched

or, with the reference installed, `jitkern.compat.sglang.install()` once (before or after its op modules
are imported): their `load_jit` becomes this one and nothing else of theirs changes.

Kernels compile against the installed package's own headers (found at run time, never copied), so a
new release's headers need nothing here. What jitkern supplies binds them to the ABI: a kernel whose
include closure uses only tvm-ffi's tensor view compiles in *lean* mode (jitkern's TensorView and its
C-ABI export in place of tvm-ffi's C++ headers, the costliest part of a compile); a kernel that uses
more of tvm-ffi's C++ API (tensors it allocates, arrays, objects) compiles in *tvm-ffi* mode, with
tvm-ffi's headers and its export macro, as the reference builds it. `build_mode` says which, and why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import os
import pathlib
import re
import sys
from typing import Any, Callable, Iterator, Sequence

from .._engine import BuildError, effective
from ..jit import CPPArgList, JitSpec, cache_once

__all__ = ["ArchInfo", "CPPArgList", "CPP_DTYPE_MAP", "KERNEL_PATH", "build_mode", "cache_once", "get_jit_cuda_arch", "install",
           "is_arch_support_pdl", "jit_spec", "kernel_root", "load_jit", "make_cpp_args", "override_jit_cuda_arch",
           "parallel_compile", "record_calls", "set_kernel_root", "uninstall"]

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------------
# Where the reference's kernel package is


_kernel_root: pathlib.Path | None = None


def set_kernel_root(path: str | os.PathLike | None) -> None:
    """Use the reference kernel package at `path` (its `sglang/kernels/jit` directory, holding include/
    and csrc/) instead of the installed one; None goes back to the installed one."""
    global _kernel_root
    if path is None:
        _kernel_root = None
        return
    root = pathlib.Path(path).resolve()
    _check_root(root, f"set_kernel_root: {path}")
    _kernel_root = root


def _check_root(root: pathlib.Path, origin: str) -> None:
    if not ((root / "include").is_dir() and (root / "csrc").is_dir()):
        raise ValueError(f"{origin} is not the reference's JIT kernel package: it has no include/ and csrc/ directories")


def kernel_root() -> pathlib.Path:
    """The reference's JIT kernel package: set_kernel_root's, else the installed `sglang` package's
    `kernels/jit` (found without importing sglang)."""
    if _kernel_root is not None:
        return _kernel_root
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("jitkern.compat.sglang: the reference package (sglang) is not installed; install it, "
                           "or point set_kernel_root at its sglang/kernels/jit directory (e.g. of an unpacked wheel)")
    root = pathlib.Path(list(spec.submodule_search_locations)[0]).resolve() / "kernels" / "jit"
    _check_root(root, f"the installed sglang's {root}")
    return root


def __getattr__(name: str) -> Any:
    if name == "KERNEL_PATH":  # computed on use: the package may be installed after this module is imported
        return kernel_root()
    if name == "CPP_DTYPE_MAP":
        return _dtype_map()
    # The reference's other helpers (device_guard, empty_sentinel, ...) are its own, engine-independent.
    if importlib.util.find_spec("sglang") is not None:
        import sglang.kernels.jit.utils as reference_utils  # noqa: PLC0415

        if hasattr(reference_utils, name):
            return getattr(reference_utils, name)
    raise AttributeError(f"module 'jitkern.compat.sglang' has no attribute {name!r}")


# ---------------------------------------------------------------------------------------------------
# Template arguments


def _dtype_map() -> dict:
    import torch  # noqa: PLC0415

    names = {"float64": "double", "float32": "fp32_t", "float16": "fp16_t", "bfloat16": "bf16_t", "float8_e4m3fn": "fp8_e4m3_t",
             "float8_e4m3fnuz": "fp8_e4m3_t", "float8_e5m2": "fp8_e5m2_t", "float8_e5m2fnuz": "fp8_e5m2_t", "int8": "int8_t",
             "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t",
             "uint32": "uint32_t", "uint64": "uint64_t", "bool": "bool"}
    return {getattr(torch, k): v for k, v in names.items() if hasattr(torch, k)}


def make_cpp_args(*args: Any) -> CPPArgList:
    """C++ template arguments as the reference spells them: bool as true/false, int/float/str as str(),
    a torch dtype as its C++ alias (CPP_DTYPE_MAP, which includes double, bool and the unsigned types)."""

    def convert(arg: Any) -> str:
        if isinstance(arg, bool):
            return "true" if arg else "false"
        if isinstance(arg, (int, str, float)):
            return str(arg)
        if type(arg).__module__ == "torch" and type(arg).__name__ == "dtype":
            try:
                return _dtype_map()[arg]
            except KeyError:
                raise TypeError(f"make_cpp_args: no C++ type for {arg}") from None
        raise TypeError(f"make_cpp_args: unsupported argument {arg!r} of type {type(arg).__name__}; "
                        "expected bool, int, float, str or a torch dtype")

    return CPPArgList(convert(a) for a in args)


# ---------------------------------------------------------------------------------------------------
# The target architecture: one choice gives both the compile target and -DSGL_CUDA_ARCH


@dataclasses.dataclass(frozen=True)
class ArchInfo:
    major: int
    minor: int
    suffix: str = ""

    @property
    def target_name(self) -> str:
        return f"{self.major}.{self.minor}{self.suffix}"

    @property
    def jit_flag(self) -> str:
        return f"-DSGL_CUDA_ARCH={self.major * 100 + self.minor * 10}"

    @property
    def sm(self) -> str:
        """jitkern's spelling of the target, e.g. sm_90a."""
        return f"sm_{self.major}{self.minor}{self.suffix}"

    @classmethod
    def parse(cls, arch: str, origin: str) -> "ArchInfo":
        m = re.fullmatch(r"sm_(\d+)(\d)([af]?)", arch)
        if m is None:
            raise ValueError(f"{origin}: {arch!r} is no CUDA target; expected sm_XY, sm_XYa or sm_XYf, e.g. sm_90a")
        return cls(int(m.group(1)), int(m.group(2)), m.group(3))


_arch_override: list[ArchInfo] = []


@contextlib.contextmanager
def override_jit_cuda_arch(major: int, minor: int, suffix: str | None = None) -> Iterator[None]:
    """Builds inside the block target (major, minor) (suffix: the arch-specific one jitkern picks for it
    unless given)."""
    arch = ArchInfo.parse(_arch_for(major, minor), "override_jit_cuda_arch") if suffix is None else ArchInfo(major, minor, suffix)
    _arch_override.append(arch)
    try:
        yield
    finally:
        _arch_override.pop()


def _arch_for(major: int, minor: int) -> str:
    from .. import _engine  # noqa: PLC0415

    return _engine.arch_for_capability(major, minor)


def get_jit_cuda_arch() -> ArchInfo:
    """The target of the next build: override_jit_cuda_arch's, else JITKERN_CUDA_ARCH (compile without a
    GPU), else the installed reference's own choice when jitkern is installed under it, else the current
    CUDA device's."""
    if _arch_override:
        return _arch_override[-1]
    env = effective("JITKERN_CUDA_ARCH")
    if env:
        return ArchInfo.parse(env, "JITKERN_CUDA_ARCH")
    if _installed:
        ref = sys.modules["sglang.kernels.jit.utils.arch"].get_jit_cuda_arch()
        return ArchInfo(ref.major, ref.minor, ref.suffix)
    import torch  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise RuntimeError("jitkern.compat.sglang: no CUDA device to compile for; set JITKERN_CUDA_ARCH (e.g. sm_90a) "
                           "or use override_jit_cuda_arch to compile without one")
    return ArchInfo.parse(_arch_for(*torch.cuda.get_device_capability()), "the current CUDA device")


def is_arch_support_pdl() -> bool:
    """Programmatic dependent launch: sm_90 and newer."""
    return get_jit_cuda_arch().major >= 9


# ---------------------------------------------------------------------------------------------------
# Lean or tvm-ffi mode: what the kernel's include closure uses of tvm-ffi's C++ API


# tvm-ffi headers that <jitkern/compat/tvm_ffi_lean.h> stands in for, and C headers that cost little.
_LEAN_TVM_HEADERS = frozenset({"tvm/ffi/container/tensor.h", "tvm/ffi/dtype.h", "tvm/ffi/optional.h",
                               "tvm/ffi/extra/c_env_api.h", "tvm/ffi/c_api.h"})
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)
# Names of tvm-ffi's C++ API beyond TensorView and Optional<TensorView> (qualified, or its macros).
_TVM_CPP_USE = re.compile(r"\bffi::(?:Tensor|Array|Map|Shape|ShapeView|String|Function|TypedFunction|Any|AnyView|ObjectRef|Object|"
                          r"ObjectPtr|Tuple|Variant|Module|Bytes|Expected|Error|DLDataTypeToString|StringToDLDataType|"
                          r"make_object|GetRef|details)\b|\bffi::Optional<(?!\s*(?:tvm::ffi::)?TensorView\s*>)|\bTVM_FFI_[A-Z_]+\b|"
                          r"\busing\s+namespace\s+tvm::ffi\b")


@dataclasses.dataclass(frozen=True)
class _Scanned:
    includes: tuple[tuple[bool, str], ...]  # (quoted, name)
    tvm_use: str  # the first use of tvm-ffi's C++ API, or ""


_SCANNED: dict[tuple[str, int, int], _Scanned] = {}


def _scan_file(path: str) -> _Scanned:
    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size)
    hit = _SCANNED.get(key)
    if hit is None:
        text = pathlib.Path(path).read_text(errors="replace")
        text = re.sub(r"//[^\n]*", "", text)  # commented-out code decides nothing
        use = _TVM_CPP_USE.search(text)
        hit = _SCANNED[key] = _Scanned(tuple((q == '"', n) for q, n in _INCLUDE.findall(text)), use.group(0) if use else "")
    return hit


def build_mode(files: Sequence[str], include_dirs: Sequence[str]) -> tuple[str, str]:
    """("lean", "") when the files' include closure (followed through `include_dirs` and the files'
    own directories) uses no more of tvm-ffi's C++ API than its tensor view; else ("tvm-ffi", what it
    uses, e.g. "tvm/ffi/function.h included by moe/x.cuh"). Headers outside those directories (the
    standard library, CUDA, CUTLASS) are not followed."""
    seen: set[str] = set()
    stack = [os.path.abspath(f) for f in files]
    while stack:
        path = stack.pop()
        if path in seen or not os.path.isfile(path):
            continue
        seen.add(path)
        scanned = _scan_file(path)
        if scanned.tvm_use:
            return "tvm-ffi", f"{scanned.tvm_use} in {path}"
        here = os.path.dirname(path)
        for quoted, name in scanned.includes:
            if name.startswith("tvm/ffi/") and name not in _LEAN_TVM_HEADERS:
                return "tvm-ffi", f"{name} included by {path}"
            for d in ([here] if quoted else []) + list(include_dirs):
                candidate = os.path.normpath(os.path.join(d, name))
                if os.path.isfile(candidate):
                    stack.append(candidate)
                    break
    return "lean", ""


# ---------------------------------------------------------------------------------------------------
# load_jit


def _jitkern_include_dir() -> str:
    return effective("JITKERN_INCLUDE_DIR")


def _dependency_include_paths(names: Sequence[str]) -> list[str]:
    """Include directories of the reference's registered header-only dependencies (cutlass, flashinfer,
    ...), from its own registry (utils/deps.py, loaded by path: importing sglang is not needed)."""
    if not names:
        return []
    deps_file = kernel_root() / "utils" / "deps.py"
    spec = importlib.util.spec_from_file_location("_jitkern_sglang_deps", deps_file)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"jitkern.compat.sglang: cannot read the reference's dependency registry {deps_file}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    registry = module.REGISTERED_DEPENDENCIES
    paths: list[str] = []
    for name in sorted(set(names)):
        if name not in registry:
            raise ValueError(f"extra_dependencies: dependency {name!r} is not registered; registered: {', '.join(sorted(registry))}")
        try:
            paths += registry[name]()
        except RuntimeError:
            raise
        except Exception as e:  # e.g. ModuleNotFoundError from the registry's own search
            raise RuntimeError(f"extra_dependencies: {name} is not available: {type(e).__name__}: {e}") from e
    return paths


def _resolve(files: Sequence[str] | None, root: pathlib.Path) -> list[str]:
    return [str(p if p.is_absolute() else (root / "csrc" / p).resolve()) for p in map(pathlib.Path, files or [])]


# The export a self-exporting module (header_only=False) gives jitkern, which needs one to build.
_SELF_EXPORTING = ("jitkern_self_exporting_module", "[]() {}")


def jit_spec(*args: Any, cpp_files: Sequence[str] | None = None, cuda_files: Sequence[str] | None = None,
             cpp_wrappers: Sequence[tuple] | None = None, cuda_wrappers: Sequence[tuple] | None = None,
             extra_cflags: Sequence[str] | None = None, extra_cuda_cflags: Sequence[str] | None = None,
             extra_ldflags: Sequence[str] | None = None, extra_include_paths: Sequence[str] | None = None,
             extra_dependencies: Sequence[str] | None = None, header_only: bool = True, mode: str | None = None) -> tuple[JitSpec, str, str]:
    """The JitSpec load_jit builds for these arguments, with its mode and the mode's reason: `mode`
    None decides from the sources (build_mode), "lean" or "tvm-ffi" forces one."""
    if mode not in (None, "lean", "tvm-ffi"):
        raise ValueError(f"jit_spec: mode must be None, 'lean' or 'tvm-ffi', got {mode!r}")
    if not isinstance(header_only, bool):
        raise TypeError(f"load_jit: header_only must be a bool, got {type(header_only).__name__}")
    root = kernel_root()
    includes = [str(root / "include"), *(extra_include_paths or []), *_dependency_include_paths(list(extra_dependencies or []))]
    cpp, cuda = _resolve(cpp_files, root), _resolve(cuda_files, root)
    reason = "forced"
    if mode is None:
        mode, reason = ("tvm-ffi", "header_only=False: the sources export themselves") if not header_only else build_mode(cpp + cuda, includes)
    compat = os.path.join(_jitkern_include_dir(), "jitkern", "compat")
    if mode == "lean":
        prelude, tail = [os.path.join(compat, "tvm_ffi_lean.h")], [os.path.join(compat, "sglang_lean_export.h")]
    else:
        prelude, tail = [], [os.path.join(compat, "sglang_tvm_export.h")]
    # The runtime calls of a host side compiled without cudafe++ (host_without_cudafe).
    host_launch = [os.path.join(compat, "host_launch.h")]
    cpp_wrappers, cuda_wrappers = list(cpp_wrappers or []), list(cuda_wrappers or [])
    if not header_only and not cpp_wrappers and not cuda_wrappers:
        (cuda_wrappers if cuda else cpp_wrappers).append(_SELF_EXPORTING)
    cuda_flags = list(extra_cuda_cflags or [])
    arch = None
    if cuda:
        arch = get_jit_cuda_arch()
        cuda_flags.insert(0, arch.jit_flag)
    # The headers every module starts with, and the kernel file's own first one: what their host sides share.
    shared = host_launch + prelude + [lead for lead in [_leading_header(cuda[0], includes[0]) if cuda else None] if lead]
    spec = JitSpec("sglang_" + str(args[0]) if args else "sglang", *(str(a) for a in args[1:]),
                   cpp_files=prelude + cpp + tail if cpp else None, cuda_files=shared + cuda + tail if cuda else None,
                   cpp_wrappers=cpp_wrappers, cuda_wrappers=cuda_wrappers, extra_cflags=extra_cflags, extra_cuda_cflags=cuda_flags,
                   extra_ldflags=extra_ldflags, extra_include_paths=includes, cuda_arch=arch.sm if arch else None,
                   host_without_cudafe=bool(cuda), host_shared_files=len(shared) if cuda else 0)
    return spec, mode, reason


# A source's text before its first directive: comments and blank lines only.
_LEADING = re.compile(r'(?:\s|//[^\n]*|/\*.*?\*/)*', re.S)
_ONCE = re.compile(r'#[ \t]*pragma[ \t]+once[ \t]*(?://[^\n]*)?\n')
_FIRST_INCLUDE = re.compile(r'#[ \t]*include[ \t]*<([^>"\n]+)>[ \t]*(?://[^\n]*)?\n')


def _leading_header(source: str, include_root: str) -> str | None:
    """The header `source` includes before anything else (nothing but comments, blank lines and `#pragma
    once` before it), as the compiler finds it in the reference's include root (the first -I), where that
    header has `#pragma once`: included first by the generated source, it gives the same tokens at the
    same place, and the kernel's own #include of it then adds nothing."""
    text = pathlib.Path(source).read_text(errors="replace")
    at = _LEADING.match(text).end()
    once = _ONCE.match(text, at)
    if once:
        at = _LEADING.match(text, once.end()).end()
    m = _FIRST_INCLUDE.match(text, at)
    if m is None:
        return None
    path = include_root + "/" + m.group(1)  # spelled as the compiler spells it (its __FILE__)
    if not os.path.isfile(path):
        return None
    header = pathlib.Path(path).read_text(errors="replace")
    return path if _ONCE.match(header, _LEADING.match(header).end()) else None


_record_to: str | None = None


def record_calls(path: str | os.PathLike | None) -> None:
    """Appends every later load_jit call's arguments to `path` as a JSON line (None stops): the calls
    `python -m jitkern.compat.check --calls` replays, e.g. recorded while the reference's tests run."""
    global _record_to
    _record_to = None if path is None else os.fspath(path)


def load_jit(*args: Any, cpp_files: Sequence[str] | None = None, cuda_files: Sequence[str] | None = None,
             cpp_wrappers: Sequence[tuple] | None = None, cuda_wrappers: Sequence[tuple] | None = None,
             extra_cflags: Sequence[str] | None = None, extra_cuda_cflags: Sequence[str] | None = None,
             extra_ldflags: Sequence[str] | None = None, extra_include_paths: Sequence[str] | None = None,
             extra_dependencies: Sequence[str] | None = None, header_only: bool = True) -> Any:
    """The reference's load_jit on jitkern's engine: same arguments, same meaning (relative files resolve
    against the package's csrc/, `extra_dependencies` names entries of the reference's dependency
    registry, `header_only=False` sources export themselves), and a tvm_ffi Module as the result. A
    kernel that fails in lean mode is built again in tvm-ffi mode before the error is raised."""
    kwargs = dict(cpp_files=cpp_files, cuda_files=cuda_files, cpp_wrappers=cpp_wrappers, cuda_wrappers=cuda_wrappers,
                  extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags,
                  extra_include_paths=extra_include_paths, extra_dependencies=extra_dependencies, header_only=header_only)
    if _record_to is not None:  # the calls compat.check can replay (--calls)
        with open(_record_to, "a") as f:
            f.write(json.dumps({"args": [str(a) for a in args], "kwargs": {k: v for k, v in kwargs.items() if v is not None}},
                               default=str) + "\n")
    spec, mode, _ = jit_spec(*args, **kwargs)
    try:
        loaded = spec.load()
    except BuildError as lean_error:
        if mode != "lean":
            raise
        logger.info("jitkern.compat.sglang: %s failed in lean mode, building it with tvm-ffi's headers: %s",
                    spec.name, str(lean_error).splitlines()[0])
        loaded = jit_spec(*args, **kwargs, mode="tvm-ffi")[0].load()
    import tvm_ffi  # noqa: PLC0415

    # The engine has loaded it (and what it needs: modules carry no RUNPATH); tvm-ffi's view of the same
    # library is what the reference's callers expect (every export, its attribute and item access).
    return tvm_ffi.load_module(loaded.path)


def parallel_compile(builders: Sequence[Callable[[], Any]], max_workers: int | None = None) -> list[Any]:
    """Runs the builders (calls that end in load_jit) in threads; results in order, the first failure
    raised after all ran."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    builders = list(builders)
    if len(builders) <= 1:
        return [b() for b in builders]
    with ThreadPoolExecutor(max_workers=max_workers or min(len(builders), os.cpu_count() or 1)) as pool:
        futures = [pool.submit(b) for b in builders]
    return [f.result() for f in futures]


# ---------------------------------------------------------------------------------------------------
# install: jitkern under the installed reference


_installed: dict[tuple[str, str], Any] = {}  # (module, attribute) -> the reference's original
_REPLACED = {"load_jit": load_jit, "parallel_compile": parallel_compile}


def install() -> None:
    """Makes jitkern the engine of the installed reference: `load_jit` and `parallel_compile` in every
    sglang module already imported (its loader package included, where later imports take them from)
    become this module's. Its other helpers (cache_once, make_cpp_args, arch detection, ...) stay its
    own. Idempotent; `uninstall()` undoes it, also in modules imported in between."""
    import sglang.kernels.jit.utils  # noqa: F401, PLC0415  (the loader package and its submodules)
    import sglang.kernels.jit.utils.arch  # noqa: F401, PLC0415

    utils = sys.modules["sglang.kernels.jit.utils"]
    originals = {name: _installed.get((utils.__name__, name), getattr(utils, name)) for name in _REPLACED}
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "sglang" or module_name.startswith("sglang.")):
            continue
        for name, ours in _REPLACED.items():
            current = module.__dict__.get(name)
            if current is originals[name] or (current is ours and (module_name, name) not in _installed):
                _installed[(module_name, name)] = originals[name]
                setattr(module, name, ours)


def uninstall() -> None:
    """Gives the reference its own loader back."""
    for (module_name, name), original in _installed.items():
        module = sys.modules.get(module_name)
        if module is not None:
            setattr(module, name, original)
    _installed.clear()
