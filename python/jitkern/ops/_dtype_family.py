"""A kernel family instantiated per input element type and per op: one JIT module per (op, dtype)
(fp16/bf16/fp32), each exporting one C++ entry point, so that an op's first call compiles only its own
kernels; the exported functions are memoised per (op, dtype) for the hot path."""

from __future__ import annotations

from .._torch import check_cuda_tensor, check_not_capturing, torch
from ..jit import JitSpec, cpp_type, positional
from ._declare import wrapper


FLOAT_DTYPES = ("float16", "bfloat16", "float32")  # the element types the float kernel families are built for
# The device passes of a module whose rows go through host::norm::launch_token_norm (<jitkern/impl/norm_launch.cuh>:
# the kernels built for a width, 16-bit types only; the narrow rows; the wide rows): per dtype name.
TOKEN_NORM_DEVICE_PARTS = {"float16": 3, "bfloat16": 3, "float32": 2}


def package_spec(name: str, *args, cuda_file: str, wrappers: list, compile_seconds: float, device_parts: int = 1) -> JitSpec:
    """A module of the package's own kernels (csrc/<cuda_file>): its headers keep the kernel bodies under
    #ifdef __CUDACC__, so the host pass runs without nvcc, started by the precompiled prelude.
    compile_seconds: the scheduling estimate parallel builds start in the order of; device_parts: nvcc's
    device passes run at once (the kernel file's launches say which kernels each builds)."""
    return JitSpec(name, *args, cuda_files=[cuda_file], cuda_wrappers=wrappers, host_without_nvcc=True, host_prelude=True,
                   device_parts=device_parts, compile_seconds=compile_seconds)


class DtypeFamily:
    DTYPES = FLOAT_DTYPES

    def __init__(self, name: str, cpp_class: str, params: dict[str, str], compile_seconds: dict[str, float] | None = None,
                 members: dict[str, str] | None = None, device_parts: dict[str, int | dict[str, int]] | None = None):
        """name: the modules' name prefix and its csrc/<name>.cuh; cpp_class: the class template whose static
        members are exported (cpp_class<T>::export); params: export -> its C++ parameters, in order, typed as
        in a torch schema where a torch op takes them as they are (they name the arguments in errors);
        compile_seconds: export -> its module's compile time (JitSpec's scheduling estimate); members: export ->
        the member it exports where that is not the export's name (an instantiation: "op<128>"); device_parts:
        export -> nvcc's device passes for its module (default 1), or a dict of them by dtype name. The modules are package_spec modules of
        csrc/<name>.cuh, one per export and dtype."""
        self.name, self.cpp_class, self.params, self.compile_seconds = name, cpp_class, params, compile_seconds or {}
        self.members, self.device_parts = members or {}, device_parts or {}
        self.functions: dict = {}  # (export, dtype) -> exported function; the hot path is this lookup and the call

    def spec(self, dtype, op: str) -> JitSpec:
        """The module of one export for one element type (a torch dtype or its name; TypeError for one the
        family has no kernels for)."""
        t, name = cpp_type(dtype), str(dtype).removeprefix("torch.")
        if name not in self.DTYPES:
            raise TypeError(f"the {self.name} family is built for {', '.join(self.DTYPES)}, not {dtype}")
        parts = self.device_parts.get(op, 1)
        return package_spec(f"{self.name}_{op}", t, cuda_file=f"{self.name}.cuh",
                            wrappers=[wrapper(op, f"{self.cpp_class}<{t}>::{self.members.get(op, op)}", self.params[op])],
                            compile_seconds=self.compile_seconds.get(op, 0.0), device_parts=parts[name] if isinstance(parts, dict) else parts)

    def specs(self, exports=None, dtypes=None, constants=()) -> list[JitSpec]:
        """The modules of these exports (None: all) for these dtypes (None: all the family supports)."""
        return [self.spec(d, op) for d in (self.DTYPES if dtypes is None else dtypes) for op in (self.params if exports is None else exports)]

    def exports(self, dtype) -> "_Exports":
        """The family's exported functions for one dtype, as attributes, each module loaded on first use
        (for tests and benchmarks that call the C++ entry points directly)."""
        return _Exports(self, dtype)

    def function(self, op: str, x, public: str, name: str = "input"):
        """The exported `op` for x's dtype; the first call per op and dtype checks x (a CUDA tensor of a
        family dtype, before anything is built) and loads the module
        (`public`: the Python op named in errors, `name`: the argument x is)."""
        fn = self.functions.get((op, getattr(x, "dtype", None)))
        if fn is not None:
            return fn
        check_cuda_tensor(public, name, x)
        if str(x.dtype).removeprefix("torch.") not in self.DTYPES:
            raise TypeError(f"{public}(): {name} must be float16, bfloat16 or float32, got {x.dtype}")
        check_not_capturing(f"the {self.name}_{op} module for {x.dtype}", f"jitkern.ops.warmup(dtypes=[{x.dtype}])")
        return self.functions.setdefault((op, x.dtype), positional(self.spec(x.dtype, op).load(), op))

    def warmup(self, exports=None, dtypes=(), constants=()) -> None:
        """Loads (building in parallel where needed) the modules of these exports (None: all) for these dtypes."""
        from ..jit import warmup as build_all

        dtypes = [getattr(torch, d) if isinstance(d, str) else d for d in dtypes]
        pairs = [(dtype, op) for dtype in dtypes for op in (self.params if exports is None else exports)]
        for (dtype, op), module in zip(pairs, build_all(*(self.spec(d, op) for d, op in pairs))):
            self.functions.setdefault((op, dtype), positional(module, op))


class _Exports:
    def __init__(self, family: DtypeFamily, dtype):
        self._family, self._dtype = family, dtype

    def __getattr__(self, op: str):
        if op not in self._family.params:
            raise AttributeError(f"the {self._family.name} family exports no {op!r}; it has {', '.join(self._family.params)}")
        return positional(self._family.spec(self._dtype, op).load(), op)
