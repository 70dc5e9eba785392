"""Compatibility check: compiles the JIT kernels of an installed reference package (SGLang's
`sglang/kernels/jit`) through jitkern for one target, without a GPU, and prints a table.

    python -m jitkern.compat.check [--kernels DIR] [--arch sm_90a] [--only PATTERN ...] [--time-budget S]

Which kernel files and which instantiations: every `load_jit` call in the reference's op modules
(`sglang/kernels/ops/**.py`), found by reading them (torch is not needed). The function around a call
is run on its own with representative arguments (a dtype is bfloat16; integers by parameter name,
e.g. head_dim 128; otherwise its default) and with stand-ins for the loader's names that record the
call instead of building. One instantiation per kernel file is compiled. A file whose call cannot be
reproduced that way is listed as "not instantiated" with the reason; `--calls FILE` takes recorded
calls instead (JSON lines of load_jit's arguments, from jitkern.compat.sglang.record_calls).

An instantiation that fails in both modes (a size or type the kernel does not take) is followed by up
to RETRIES other argument sets the function accepted; the row names the one that compiled.

Outcomes: "lean" and "tvm-ffi" (compiles, in that mode; tvm-ffi mode is the reference's own build:
its headers, tvm-ffi's, its export macro), "fails" (both modes, first error shown), "skipped" (a HIP
kernel, another arch than the target, a dependency that is not installed), "not instantiated" (why),
"not run" (the time budget was spent).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import logging
import os
import pathlib
import re
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Sequence

from .._engine import effective
from . import sglang as compat

# Representative values of the op modules' integer parameters, by name (a parameter with a default
# keeps it). Chosen among what the reference's kernels accept for a typical model.
INT_VALUES = {"head_dim": 128, "rope_dim": 64, "hidden_size": 4096, "hidden_dim": 4096, "dim": 4096, "d": 4096, "world_size": 8,
              "page_size": 64, "topk": 8, "top_k": 8, "num_top_k": 8, "cluster_size": 2, "block_size": 128, "quant_group_size": 128,
              "group_size": 128, "block_dim": 128, "num_threads": 256, "n": 128, "k": 128, "w": 128, "ratio": 4, "num_experts": 64,
              "max_tokens": 256, "item_size_bytes": 256, "hot_buffer_size": 1024, "nope_bytes": 512, "rope_bytes": 128,
              "group_bytes": 128, "head_bytes": 256, "k_row_bytes": 256, "v_row_bytes": 256, "num_steps": 4, "vec": 8, "lanes": 4,
              "units": 4, "max_copies": 4, "num_single": 1, "nc": 4, "nv": 4, "swizzle": 128, "layout": 0, "top_k_block_size": 64,
              "channels_inner": 64, "w1": 128}
DEFAULT_INT = 128
# Flags that are set in the common configuration (others start unset).
TRUE_FLAGS = {"aligned", "row_major", "use_pdl", "is_neox", "enable_pdl", "contiguous"}
HIP_PATH = re.compile(r"hip|rocm|gfx9|aiter|musa", re.I)
# An architecture a file or op is written for, by its name: sm90, sm_100, blackwell.
ARCH_MARKER = re.compile(r"sm_?(\d{2,3})|(blackwell|tcgen05)|(hopper)", re.I)


# ---------------------------------------------------------------------------------------------------
# Stand-ins the op functions run against


class _Recorded(Exception):
    def __init__(self, args: tuple, kwargs: dict) -> None:
        super().__init__("recorded")
        self.args_, self.kwargs = args, kwargs


class _DType:
    __module__ = "torch"

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _DType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    @property
    def itemsize(self) -> int:
        return {"float64": 8, "float32": 4, "int64": 8, "int32": 4, "float16": 2, "bfloat16": 2, "int16": 2}.get(self.name, 1)


_DType.__name__ = "dtype"
_CPP = {"float64": "double", "float32": "fp32_t", "float16": "fp16_t", "bfloat16": "bf16_t", "float8_e4m3fn": "fp8_e4m3_t",
        "float8_e5m2": "fp8_e5m2_t", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t",
        "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t", "bool": "bool"}


class _Anything:
    """Absorbs whatever an op module does at import time that the check does not need."""

    def __init__(self, *a: Any, **k: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *a: Any, **k: Any) -> Any:
        if len(a) == 1 and callable(a[0]) and not k:
            return a[0]  # a decorator
        return _Anything()

    def __getitem__(self, item: Any) -> Any:
        return _Anything()

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)

    def __iter__(self) -> Any:
        return iter(())

    def __bool__(self) -> bool:
        return False


def _fake_torch() -> types.ModuleType:
    torch = types.ModuleType("torch")
    for name in _CPP:
        setattr(torch, name, _DType(name))
    torch.dtype = _DType
    torch.half, torch.float, torch.bfloat16 = torch.float16, torch.float32, torch.bfloat16
    torch.__getattr__ = lambda name: _Anything()  # type: ignore[attr-defined]
    return torch


def _make_cpp_args(*args: Any) -> compat.CPPArgList:
    out = []
    for a in args:
        if isinstance(a, bool):
            out.append("true" if a else "false")
        elif isinstance(a, _DType):
            out.append(_CPP[a.name])
        else:
            out.append(str(a))
    return compat.CPPArgList(out)


def _record(*args: Any, **kwargs: Any) -> Any:
    raise _Recorded(args, kwargs)


def _loader_names(kernel_root: pathlib.Path) -> dict[str, Any]:
    return {"load_jit": _record, "make_cpp_args": _make_cpp_args, "cache_once": lambda f: f, "is_arch_support_pdl": lambda: True,
            "KERNEL_PATH": kernel_root, "get_activation_cuda_cflags": lambda: ["--use_fast_math"], "is_hip_runtime": lambda: False,
            "is_musa_runtime": lambda: False, "is_sail_runtime": lambda: False, "cuda_stubs_dir": lambda: "/usr/local/cuda/lib64/stubs",
            "get_jit_cuda_arch": lambda: compat.get_jit_cuda_arch(), "CPPArgList": compat.CPPArgList}


# ---------------------------------------------------------------------------------------------------
# Finding the calls


@dataclasses.dataclass
class Call:
    op: str  # the op module, relative to ops/
    function: str
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    files: tuple = ()  # kernel files, relative to csrc/ (or absolute)
    problem: str = ""  # why it could not be reproduced
    others: list = dataclasses.field(default_factory=list)  # further (args, kwargs) the op function gave, for a retry


def _is_load_jit(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (getattr(node.func, "id", None) == "load_jit" or getattr(node.func, "attr", None) == "load_jit")


def _literal_files(call: ast.Call) -> tuple:
    files: list[str] = []
    for kw in call.keywords:
        if kw.arg in ("cuda_files", "cpp_files") and isinstance(kw.value, (ast.List, ast.Tuple)):
            files += [e.value for e in kw.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return tuple(files)


# Further tries when an op function refuses the first arguments: another dtype, larger or smaller
# integers, flags set.
VARIANTS = [{}, {"out": "float8_e4m3fn"}, {"dtype": "float16"}, {"dtype": "float32"}, {"dtype": "float64"}, {"scale": 4}, {"scale": 16}, {"flag": True},
            {"scale": 1 / 128}]


def _arguments(fn: types.FunctionType, node: ast.FunctionDef, variant: dict) -> dict[str, Any]:
    """Representative arguments for the op function `fn` (those without defaults), as `variant` varies them."""
    code = fn.__code__
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    defaults = dict(zip(code.co_varnames[code.co_argcount - len(fn.__defaults__ or ()):code.co_argcount], fn.__defaults__ or ()))
    defaults.update(fn.__kwdefaults__ or {})
    annotations = {a.arg: ast.unparse(a.annotation) if a.annotation else "" for a in node.args.args + node.args.kwonlyargs}
    out: dict[str, Any] = {}
    for name in names:
        if name in ("self", "cls") or name in defaults:
            continue
        ann = annotations.get(name, "")
        if "dtype" in ann or "dtype" in name:
            quantized = "out" in name or "quant" in name or "fp8" in name
            integral = "index" in name or "seq" in name or re.search(r"position|_ids", fn.__name__)
            out[name] = _DType("int64" if integral else variant["out"] if quantized and "out" in variant else variant.get("dtype", "bfloat16"))
        elif ann == "bool" or name.startswith(("use_", "is_", "has_", "do_", "apply_", "enable_", "skip_", "with_")):
            out[name] = variant.get("flag", name in TRUE_FLAGS)
        elif ann == "float":
            out[name] = 1.0
        elif ann == "str":
            out[name] = ""
        elif "mode" in name or "kind" in name:  # an enumeration: its first value
            out[name] = 0
        else:
            out[name] = max(1, int(INT_VALUES.get(name, DEFAULT_INT) * variant.get("scale", 1)))
    return out


_NAMESPACES: dict[str, dict[str, Any]] = {}


def _sibling(stmt: ast.ImportFrom, filename: str, kernel_root: pathlib.Path) -> dict[str, Any] | None:
    """The namespace of an op module imported from another (relatively or as sglang.kernels.ops.*), run
    the same way; None for anything else."""
    ops = kernel_root.parent / "ops"
    if stmt.level:
        base = pathlib.Path(filename).parent
        for _ in range(stmt.level - 1):
            base = base.parent
        parts = (stmt.module or "").split(".") if stmt.module else []
    elif (stmt.module or "").startswith("sglang.kernels.ops."):
        base, parts = ops, stmt.module.split(".")[3:]
    else:
        return None
    target = base.joinpath(*parts)
    path = target / "__init__.py" if target.is_dir() else target.with_suffix(".py")
    if not path.is_file():
        return None
    key = str(path)
    if key not in _NAMESPACES:
        _NAMESPACES[key] = {}  # a cycle sees an empty module
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except SyntaxError:
            return None
        _NAMESPACES[key] = _module_namespace(tree, kernel_root, key, "jitkern_check_" + path.stem)
    return _NAMESPACES[key]


def _module_namespace(tree: ast.Module, kernel_root: pathlib.Path, filename: str, modname: str) -> dict[str, Any]:
    """The op module's top level run statement by statement, imports replaced by stand-ins (torch, the
    loader's names, other op modules run the same way) or absorbers; a statement that fails is left out."""
    ns: dict[str, Any] = {"__name__": modname, "__file__": filename, "__builtins__": __builtins__}
    loader, torch = _loader_names(kernel_root), _fake_torch()
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                top = (alias.asname or alias.name).split(".")[0]
                ns[top] = torch if alias.name == "torch" else _Anything()
            continue
        if isinstance(stmt, ast.ImportFrom):
            sibling = _sibling(stmt, filename, kernel_root)
            for alias in stmt.names:
                if alias.name == "*":
                    continue
                name = alias.asname or alias.name
                if alias.name in loader:
                    ns[name] = loader[alias.name]
                elif stmt.module == "torch":
                    ns[name] = getattr(torch, alias.name)
                else:
                    ns[name] = sibling.get(alias.name, _Anything()) if sibling is not None else _Anything()
            continue
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bare = ast.FunctionDef(name=stmt.name, args=stmt.args, body=stmt.body, decorator_list=[], returns=None,
                                   type_comment=None, type_params=[])
            stmt = ast.fix_missing_locations(ast.copy_location(bare, stmt))
        try:
            exec(compile(ast.Module(body=[stmt], type_ignores=[]), filename, "exec"), ns)  # noqa: S102
        except Exception:  # noqa: BLE001
            pass
    return ns


def discover(kernel_root: pathlib.Path) -> list[Call]:
    """One Call per load_jit call site of the op modules next to `kernel_root` (…/kernels/ops)."""
    ops = kernel_root.parent / "ops"
    calls: list[Call] = []
    for path in sorted(ops.rglob("*.py")):
        text = path.read_text(errors="replace")
        if "load_jit" not in text:
            continue
        rel = str(path.relative_to(ops))
        try:
            tree = ast.parse(text)
        except SyntaxError as e:
            calls.append(Call(rel, "", problem=f"does not parse: {e}"))
            continue
        sites = []  # (function node, call node)
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if _is_load_jit(node):
                        sites.append((fn, node))
        if not sites:
            continue
        ns = _module_namespace(tree, kernel_root, str(path), "jitkern_check_" + rel.replace("/", "_")[:-3])
        done: set[str] = set()
        for fn_node, call_node in sites:
            if fn_node.name in done:
                continue
            done.add(fn_node.name)
            call = Call(rel, fn_node.name, files=_literal_files(call_node))
            fn = ns.get(fn_node.name)
            if not isinstance(fn, types.FunctionType):
                call.problem = "the function is not at the module's top level"
            else:
                found: list[tuple] = []  # (args, kwargs) of every variant that reproduced the call, distinct
                for variant in VARIANTS:  # the first problem is the one reported
                    try:
                        fn(**_arguments(fn, fn_node, variant))
                        problem = "the function returned without calling load_jit for these arguments"
                    except _Recorded as r:
                        args = tuple(str(a) for a in r.args_)
                        unknown = "_Anything object" in repr((args, r.kwargs))
                        problem = "an argument comes from a name the check cannot evaluate without the reference's imports" if unknown else ""
                        if not found or unknown:
                            call.args, call.kwargs = args, r.kwargs
                            call.files = tuple(list(r.kwargs.get("cuda_files") or []) + list(r.kwargs.get("cpp_files") or []))
                        if not unknown and all(args != a or r.kwargs != k for a, k in found):
                            found.append((args, r.kwargs))
                    except Exception as e:  # noqa: BLE001
                        problem = f"running it with representative arguments raised {type(e).__name__}: {e}"[:200]
                    if not found:
                        call.problem = call.problem or problem
                if found:
                    call.problem = ""
                    (call.args, call.kwargs), call.others = found[0], found[1:]
                    call.files = tuple(list(call.kwargs.get("cuda_files") or []) + list(call.kwargs.get("cpp_files") or []))
            calls.append(call)
    return calls


def read_recorded(path: str) -> list[Call]:
    """Calls recorded as JSON lines {"op":..., "args": [...], "kwargs": {...}}."""
    out = []
    with open(path) as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                kw = d["kwargs"]
                out.append(Call(d.get("op", "recorded"), d.get("function", ""), tuple(d["args"]), kw,
                                tuple(list(kw.get("cuda_files") or []) + list(kw.get("cpp_files") or []))))
    return out


# ---------------------------------------------------------------------------------------------------
# Compiling them


@dataclasses.dataclass
class Row:
    file: str
    op: str
    outcome: str  # lean | tvm-ffi | fails | skipped | not instantiated | not run
    detail: str = ""
    seconds: float = 0.0


def _first_error(message: str) -> str:
    for line in message.splitlines():
        if re.search(r"error", line, re.I) and not line.startswith("jitkern: compiling"):
            return re.sub(r"^.*?/(csrc|include)/", r"\1/", line.strip())[:240]
    return message.strip().splitlines()[0][:240] if message.strip() else ""


def _skip_reason(call: Call, kernel_root: pathlib.Path) -> str:
    target = compat.get_jit_cuda_arch()
    for text in (call.op, *call.files, str(call.args)):
        if HIP_PATH.search(text):
            return "HIP/ROCm kernel"
        for m in ARCH_MARKER.finditer(text):
            sm = int(m.group(1)) if m.group(1) else 100 if m.group(2) else 90
            if sm // 10 != target.major:
                return f"written for sm_{sm} (the target is {target.sm})"
    try:
        compat._dependency_include_paths(list(call.kwargs.get("extra_dependencies") or []))
    except RuntimeError as e:
        return f"needs {', '.join(call.kwargs.get('extra_dependencies'))} (not installed): {str(e)[:80]}"
    for f in call.files:
        path = pathlib.Path(f) if os.path.isabs(f) else kernel_root / "csrc" / f
        if not path.is_file():
            return f"kernel file {f} is not in the package"
        text = path.read_text(errors="replace")
        if re.search(r"#\s*include\s*<(cutlass|cute)/", text) and not call.kwargs.get("extra_dependencies"):
            return "needs CUTLASS headers (not a registered dependency here)"
        if re.search(r"#\s*include\s*<flashinfer/", text) and "flashinfer" not in (call.kwargs.get("extra_dependencies") or []):
            return "needs flashinfer headers"
    return ""


# Further instantiations tried when the first fails in both modes (a size or type the kernel does not take).
RETRIES = 2


def compile_call(call: Call, kernel_root: pathlib.Path) -> Row:
    file = ", ".join(call.files) or "?"
    if call.problem:
        return Row(file, call.op, "not instantiated", call.problem)
    skip = _skip_reason(call, kernel_root)
    if skip:
        return Row(file, call.op, "skipped", skip)
    start = time.monotonic()
    first_failure = ""
    for args, kwargs in [(call.args, call.kwargs), *call.others[:RETRIES]]:
        outcome, detail = _compile_one(args, kwargs, kernel_root)
        if outcome != "fails":
            if first_failure:
                detail = f"as <{', '.join(args[1:])}>; <{', '.join(call.args[1:])}> failed in both modes: {first_failure}"
            return Row(file, call.op, outcome, detail, time.monotonic() - start)
        first_failure = first_failure or detail
    return Row(file, call.op, "fails", first_failure, time.monotonic() - start)


class _HostSides(logging.Handler):
    """The engine's word on each module it compiled whose host side went through cudafe++ (the rewrite
    of host_without_cudafe refused, or its compile failed), by module name, while `run` runs."""

    MARKER = ": nvcc's host chain (cudafe++) compiles its host side: "

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.why: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        module, marker, why = record.getMessage().partition(self.MARKER)
        if marker:
            self.why[module] = why


_HOST_SIDES = _HostSides()


def load_jit_kwargs(call_kwargs: dict) -> dict:
    """A recorded or discovered call's keyword arguments that load_jit takes."""
    return {k: v for k, v in call_kwargs.items() if k in ("cpp_files", "cuda_files", "cpp_wrappers", "cuda_wrappers", "extra_cflags",
                                                        "extra_cuda_cflags", "extra_ldflags", "extra_include_paths",
                                                        "extra_dependencies", "header_only")}


def _compile_one(args: tuple, call_kwargs: dict, kernel_root: pathlib.Path) -> tuple[str, str]:
    """(mode it compiles in, why that mode) or ("fails", the first error of both modes)."""
    kwargs = load_jit_kwargs(call_kwargs)
    try:
        spec, mode, reason = compat.jit_spec(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        return "fails", f"{type(e).__name__}: {e}"[:240]
    try:
        spec.build()
        detail = "" if mode == "lean" else _short_reason(reason, kernel_root)
        cudafe = _HOST_SIDES.why.get("_".join(spec.args))
        return mode, "; ".join(d for d in (detail, cudafe and f"host side through cudafe++: {_short_reason(cudafe, kernel_root)}") if d)
    except Exception as e:  # noqa: BLE001
        first = _first_error(str(e))
        if mode != "lean":
            return "fails", first
    try:
        compat.jit_spec(*args, **kwargs, mode="tvm-ffi")[0].build()
        return "tvm-ffi", f"lean failed: {first}"
    except Exception as e:  # noqa: BLE001
        return "fails", _first_error(str(e))


def _short_reason(reason: str, kernel_root: pathlib.Path) -> str:
    return reason.replace(str(kernel_root) + "/", "").replace(str(kernel_root.parent.parent.parent) + "/", "")


def representative(calls: Sequence[Call]) -> list[Call]:
    """One call per kernel file set: the first that could be reproduced."""
    chosen: dict[tuple, Call] = {}
    for c in calls:
        key = c.files or (c.op, c.function)
        if key not in chosen or (chosen[key].problem and not c.problem):
            chosen[key] = c
    return list(chosen.values())


# Seconds after the time budget that the builds already started are waited for.
LATE = 60.0
STILL_COMPILING = f"still compiling {LATE:.0f} s after the time budget"


def run(calls: Sequence[Call], kernel_root: pathlib.Path, workers: int, time_budget: float | None) -> list[Row]:
    """The calls compiled `workers` at a time. With a time budget, builds not started within it are not
    run, and those still compiling LATE seconds after it are listed as not run (STILL_COMPILING) and left
    running: the caller then ends the process without waiting for them (main does)."""
    deadline = time.monotonic() + time_budget if time_budget else None

    def one(call: Call) -> Row:
        if deadline is not None and time.monotonic() > deadline:
            return Row(", ".join(call.files) or "?", call.op, "not run", "time budget spent")
        return compile_call(call, kernel_root)

    engine_log = logging.getLogger("jitkern")
    engine_log.addHandler(_HOST_SIDES)
    try:
        pool = ThreadPoolExecutor(max_workers=max(1, workers))
        futures = [pool.submit(one, c) for c in calls]
        done, pending = wait(futures, timeout=None if deadline is None else time_budget + LATE)
        pool.shutdown(wait=not pending, cancel_futures=True)
    finally:
        engine_log.removeHandler(_HOST_SIDES)
    return [f.result() if f in done else Row(", ".join(c.files) or "?", c.op, "not run", STILL_COMPILING) for f, c in zip(futures, calls)]


OUTCOMES = ("lean", "tvm-ffi", "fails", "skipped", "not instantiated", "not run")


def table(rows: Sequence[Row]) -> str:
    counts = {o: sum(r.outcome == o for r in rows) for o in OUTCOMES}
    compiled = counts["lean"] + counts["tvm-ffi"]
    tried = compiled + counts["fails"]
    lines = [f"{len(rows)} kernel files: {compiled} compile ({counts['lean']} lean, {counts['tvm-ffi']} tvm-ffi), {counts['fails']} fail, "
             f"{counts['skipped']} skipped, {counts['not instantiated']} not instantiated, {counts['not run']} not run"
             + (f"; {100 * compiled / tried:.0f}% of those compiled" if tried else ""), "",
             "| kernel file | op module | outcome | s | detail |", "|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (OUTCOMES.index(r.outcome), r.file)):
        lines.append(f"| {r.file} | {r.op} | {r.outcome} | {r.seconds:.1f} | {r.detail.replace('|', '/')} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, prog: str = "python -m jitkern.compat.check") -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--kernels", help="the reference's sglang/kernels/jit directory (default: the installed sglang's)")
    p.add_argument("--arch", default=effective("JITKERN_CUDA_ARCH") or "sm_90a", help="CUDA target (default sm_90a)")
    p.add_argument("--only", nargs="*", default=[], help="regular expressions: check only kernel files matching one")
    p.add_argument("--calls", help="recorded load_jit calls (JSON lines) instead of reading the op modules")
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="builds at once (default: usable CPUs)")
    p.add_argument("--time-budget", type=float, help="seconds; builds not started by then, or still compiling a minute later, are listed as "
                   "not run")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--list", action="store_true", help="list the calls found, compile nothing")
    a = p.parse_args(argv)
    if a.kernels:
        compat.set_kernel_root(a.kernels)
    root = compat.kernel_root()
    arch = compat.ArchInfo.parse(a.arch, "--arch")
    with compat.override_jit_cuda_arch(arch.major, arch.minor, arch.suffix):  # op functions ask for it too, as the builds do
        calls = representative(read_recorded(a.calls) if a.calls else discover(root))
        if a.only:
            calls = [c for c in calls if any(re.search(pat, " ".join(c.files) + " " + c.op) for pat in a.only)]
        if a.list:
            for c in calls:
                print(c.op, c.function, c.files, c.args, c.problem or c.kwargs.get("cuda_wrappers", c.kwargs.get("cpp_wrappers")))
            return 0
        rows = run(calls, root, a.workers, a.time_budget)
    print(table(rows), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump([dataclasses.asdict(r) for r in rows], f, indent=1)
    status = 1 if any(r.outcome == "fails" for r in rows) else 0
    if any(r.detail == STILL_COMPILING for r in rows):
        os._exit(status)  # the builds left running would hold the interpreter's exit
    return status


if __name__ == "__main__":
    sys.exit(main())
