"""What the op modules share for PyTorch: whether Dynamo is tracing (then an op goes through its torch
custom op, so the graph keeps it) and the guard against loading a module inside a CUDA graph capture."""

from __future__ import annotations

from .jit import positional

try:
    import torch
except ImportError:  # the specs import without torch; the ops need it
    torch = None


# What every entry point that needs torch raises without it (the ops, jitkern.ops.warmup, torch_op, Event).
TORCH_MISSING = ("jitkern.ops, jitkern.ops.warmup, jitkern.torch_op and jitkern.Event need PyTorch, which is not installed "
                 "(pip install torch); load_jit and JitSpec work without it")


def require_torch() -> None:
    """Raises ImportError (TORCH_MISSING) when torch is not installed."""
    if torch is None:
        raise ImportError(TORCH_MISSING, name="torch")


# True while torch.compile traces (Dynamo folds the call to a constant). Bound here rather than wrapped,
# to keep a Python call level off the eager path.
compiling = torch.compiler.is_compiling if torch is not None else require_torch


def returns_nothing(*args) -> None:
    """The fake implementation of an op that only writes its arguments."""
    return None


def check_not_capturing(what: str, warmup: str) -> None:
    """Raises if a CUDA graph is being captured: loading a module (or compiling it) inside a capture
    would break it. Called only where an op's function is not loaded yet."""
    require_torch()
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"jitkern: {what} is not loaded yet and a CUDA graph is being captured on the current stream; "
            f"loading (and possibly compiling) it now would break the capture. Call the op once before the "
            f"capture, or warm it up: {warmup}")


def check_cuda_tensor(public: str, name: str, x) -> None:
    """Raises TypeError unless x is a tensor and ValueError unless it is on a CUDA device: checked before an op
    loads its module, so that a tensor the kernels cannot take costs no compile."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{public}(): {name} must be a torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cuda":
        raise ValueError(f"{public}(): {name} must be a CUDA tensor, got {x.device.type}")


_LIBRARIES: dict = {}  # namespace -> torch.library.Library


def define_op(qualname: str, schema: str, implementation, fake=None):
    """Registers `implementation` as the torch operator `qualname` ("namespace::name") with `schema` (its
    arguments and results, e.g. "(Tensor x, Tensor(a!) out) -> ()": `(a!)` marks a tensor the op writes)
    and `fake` as what tracing runs (default: returns None, right for ops that return nothing). An op that
    writes no argument and returns nothing (a stream wait) is kept for its side effect: compiled graphs would
    drop it as dead code. Registered through torch.library.Library, whose dispatcher calls `implementation`
    directly: torch.library.custom_op adds about 18 us per call, which compiled code without CUDA graphs pays
    (docs/benchmarks/design.md)."""
    require_torch()
    namespace, _, name = qualname.partition("::")
    if not namespace or not name:
        raise ValueError(f"qualname must be 'namespace::name', got {qualname!r}")
    library = _LIBRARIES.get(namespace)
    if library is None:
        library = _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")
    library.define(name + schema)
    library.impl(name, implementation, "CompositeExplicitAutograd")
    torch.library.register_fake(qualname, fake if fake is not None else returns_nothing, lib=library)
    op = getattr(getattr(torch.ops, namespace), name)
    if not op.default._schema.is_mutable and not op.default._schema.returns:
        torch.fx.node.has_side_effect(op.default)
    return op


def torch_op(qualname: str, schema: str, spec, export: str, *, fake=None):
    """Makes `export` of `spec`'s module the torch operator `qualname` with `schema` (see define_op). The
    module is loaded at the op's first call, never while torch.compile traces; `fake` describes the
    outputs for tracing. Returns the operator, e.g. torch.ops.namespace.name."""
    loaded = []

    def implementation(*args):
        if not loaded:
            check_not_capturing(f"the module of {qualname} ({spec!r})", "jitkern.warmup(spec)")
            loaded.append(positional(spec.load(), export))
        return loaded[0](*args)

    return define_op(qualname, schema, implementation, fake)


class ModuleExports:
    """The exports of one module that takes no template arguments, each looked up once: loaded at the
    first call (never inside a CUDA graph capture) or by warmup(). `params`: export -> its parameters
    (as the module's wrappers name them)."""

    def __init__(self, spec, params: dict, what: str) -> None:
        self._spec, self.params, self._what, self._functions = spec, params, what, {}

    def get(self, op: str):
        """The export once loaded, else None: the hot path, `get(op) or load_checked(op, ...)`."""
        return self._functions.get(op)

    def load_checked(self, op: str, public: str, tensors) -> object:
        """The export, loaded after each (name, tensor) of `tensors` not None is checked to be a CUDA tensor, so that
        one the kernels cannot take costs no compile (later calls leave that to the C++ device check)."""
        for name, x in tensors:
            if x is not None:
                check_cuda_tensor(public, name, x)
        return self(op)

    def __call__(self, op: str):
        fn = self._functions.get(op)
        if fn is None:
            check_not_capturing(f"the {self._what} module", "jitkern.ops.warmup()")
            self.warmup()
            fn = self._functions[op]
        return fn

    def specs(self, exports=None, dtypes=None, constants=()) -> list:
        """The one module (any dtype)."""
        return [self._spec()]

    def warmup(self, exports=None, dtypes=(), constants=()) -> None:
        """Loads the module and looks up every export: once one export has been called, the others may be
        called inside a CUDA graph capture too."""
        module = self._spec().load()
        for op in self.params:
            self._functions.setdefault(op, positional(module, op))
