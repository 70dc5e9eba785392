"""A kernel family built once per input element type: one JIT module per dtype (fp16/bf16/fp32) exporting
the same C++ entry points, and the exported functions memoised per (op, dtype) for the hot path."""

from __future__ import annotations

from .._torch import check_not_capturing, torch
from ..jit import JitSpec, cpp_type


class DtypeFamily:
    DTYPES = ("float16", "bfloat16", "float32")

    def __init__(self, name: str, cpp_class: str, ops: dict[str, str]):
        """name: the module name and its csrc/<name>.cuh; cpp_class: the class template whose static
        members are exported (cpp_class<T>::op); ops: export -> its C++ parameters, in order (they
        name the arguments in errors)."""
        self.name, self.cpp_class, self.ops = name, cpp_class, ops
        self.functions: dict = {}  # (op, dtype) -> exported function; the hot path is this lookup and the call
        self.specs = tuple(self.spec(d) for d in self.DTYPES)

    def spec(self, dtype) -> JitSpec:
        """The module for one element type (a torch dtype or its name; TypeError for one the family has no kernels for)."""
        t = cpp_type(dtype)
        if str(dtype).removeprefix("torch.") not in self.DTYPES:
            raise TypeError(f"the {self.name} family is built for {', '.join(self.DTYPES)}, not {dtype}")
        return JitSpec(self.name, t, cuda_files=[f"{self.name}.cuh"],
                       cuda_wrappers=[(op, f"{self.cpp_class}<{t}>::{op}", args) for op, args in self.ops.items()])

    def function(self, op: str, x, public: str, name: str = "input"):
        """The exported `op` for x's dtype; the first call per op and dtype checks x and loads the module
        (`public`: the Python op named in errors, `name`: the argument x is)."""
        fn = self.functions.get((op, getattr(x, "dtype", None)))
        if fn is not None:
            return fn
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{public}(): {name} must be a torch.Tensor, got {type(x).__name__}")
        if str(x.dtype).removeprefix("torch.") not in self.DTYPES:
            raise TypeError(f"{public}(): {name} must be float16, bfloat16 or float32, got {x.dtype}")
        check_not_capturing(f"the {self.name} module for {x.dtype}", f"jitkern.ops.warmup(dtypes=[{x.dtype}])")
        return self.functions.setdefault((op, x.dtype), getattr(self.spec(x.dtype).load(), op))

    def warmup(self, dtypes) -> None:
        """Loads (building in parallel where needed) the family's module for these dtypes."""
        from ..jit import warmup as build_all

        dtypes = [getattr(torch, d) if isinstance(d, str) else d for d in dtypes]
        for dtype, module in zip(dtypes, build_all(*(self.spec(d) for d in dtypes))):
            for op in self.ops:
                self.functions.setdefault((op, dtype), getattr(module, op))
