"""An op of jitkern.ops is declared once, in its family's module: `FAMILY = Family(sources...)` lists where
the family's C++ exports come from (each export once, with its typed parameters), and `@FAMILY.op(exports,
torch=...)` on the public function declares the op (its name and arguments are the function's), the
exports it may call and the torch custom ops torch.compile traces it as. jitkern.ops (its OPS, `__all__`,
specs, warmup), `jitkern prebuild --ops` and the op table test read these declarations."""

from __future__ import annotations

import inspect

from .._torch import define_op, torch


def param_names(params: str) -> tuple[str, ...]:
    """The names in a parameter list, typed as in a torch schema ("Tensor(a!) input, float eps") or not
    ("input, eps")."""
    return tuple(p.split()[-1] for p in params.split(",") if p.strip())


def wrapper(export: str, expression: str, params: str) -> tuple:
    """The cuda_wrappers entry exporting the C++ `expression` as `export`; the parameters' names name the
    arguments in errors."""
    names = ", ".join(param_names(params))
    return (export, expression, names) if names else (export, expression)


class TorchOp:
    """A torch custom op, torch.ops.jitkern.<name>, that the declared op is traced as. `export`: the op takes
    that export's arguments (its typed parameters are the schema, `-> ()`) and its implementation calls the
    declared function with them by name; otherwise `schema` ("(Tensor x, float eps) -> Tensor") and
    `implementation` are given. `fake` describes the outputs for tracing (default: none)."""

    __slots__ = ("name", "export", "schema", "implementation", "fake")

    def __init__(self, name: str, schema: str | None = None, implementation=None, fake=None, *, export: str | None = None):
        if (schema is None) == (export is None):
            raise TypeError(f"TorchOp {name!r}: give schema or export, one of them")
        self.name, self.schema, self.implementation, self.fake, self.export = name, schema, implementation, fake, export


def _calling(function, names: tuple[str, ...]):
    """An implementation that calls `function` with arguments named `names` (positionally where its
    signature has them in that order, by keyword after) and returns nothing: written out as a function of
    those parameters, so that it costs what a hand-written lambda costs."""
    signature = inspect.signature(function)
    missing = [n for n in names if n not in signature.parameters]
    if missing:
        raise TypeError(f"{function.__name__}() has no parameter {', '.join(missing)} of its torch op")
    order = [n for n, p in signature.parameters.items() if p.kind == p.POSITIONAL_OR_KEYWORD]
    leading = next((i for i, n in enumerate(names) if i >= len(order) or order[i] != n), len(names))
    if leading == len(names) and signature.return_annotation in (None, "None"):
        return function  # no call level more on the path compiled code takes
    call = ", ".join([*names[:leading], *(f"{n}={n}" for n in names[leading:])])
    namespace = {"_declared": function}
    exec(f"def implementation({', '.join(names)}):\n    _declared({call})\n", namespace)  # names: parameters of function
    return namespace["implementation"]


class Op:
    """One public op: the function (its name is the op's), the exports it may call (what specs, warmup and
    prebuild build for it) and its torch custom ops."""

    __slots__ = ("name", "function", "exports", "torch_ops")

    def __init__(self, function, exports: tuple[str, ...], torch_ops: tuple[TorchOp, ...]):
        self.name, self.function, self.exports, self.torch_ops = function.__name__, function, exports, torch_ops


class Family:
    """A kernel family's declarations. `sources`: where its exports' modules come from, each offering
    `params` (export -> typed parameters), `specs(exports, dtypes, constants)` and `warmup(exports, dtypes,
    constants)` (exports None: all of its own), and `DTYPES` where `dtypes=` picks its modules, `PER_CONSTANT`
    where `constants=` does; e.g. a DtypeFamily (a module per export and dtype) or a
    ModuleExports (one module). `helpers`: other public names of the family's module (jitkern.ops exports
    them too)."""

    def __init__(self, *sources, helpers: tuple[str, ...] = ()):
        self.sources, self.helpers = sources, helpers
        self.ops: dict[str, Op] = {}
        self._source = {e: s for s in sources for e in s.params}  # export -> its source
        # the dtypes `dtypes=` picks among: those of its source built per dtype (None: its modules take any)
        self.dtypes = next((s.DTYPES for s in sources if hasattr(s, "DTYPES")), None)
        self.constants = any(getattr(s, "PER_CONSTANT", False) for s in sources)  # its modules are built per constant

    def op(self, *exports: str, torch: tuple[TorchOp, ...] = ()):
        """Declares the decorated function (or class) as a public op calling `exports` of the sources,
        traced as the `torch` custom ops."""
        unknown = [e for e in exports if e not in self._source]
        if unknown:
            raise TypeError(f"no source of the family exports {', '.join(unknown)}")

        def declare(function):
            op = self.ops[function.__name__] = Op(function, exports, tuple(torch))
            for t in op.torch_ops:
                self._define(t, function)
            return function
        return declare

    def _define(self, t: TorchOp, function) -> None:
        if t.export is None:
            schema, implementation = t.schema, t.implementation or function
        else:
            params = self._source[t.export].params[t.export]
            if any(len(p.split()) < 2 for p in params.split(",")):
                raise TypeError(f"torch op {t.name}: the parameters of export {t.export} need their types ({params!r})")
            schema, implementation = f"({params}) -> ()", t.implementation or _calling(function, param_names(params))
        if torch is not None:  # the specs import without torch; nothing traces then
            define_op(f"jitkern::{t.name}", schema, implementation, t.fake)

    def _wanted(self, ops) -> list[tuple]:
        """(source, its exports these ops (None: all) need, or None for all of them), for each source needed."""
        if ops is None:
            return [(s, None) for s in self.sources]
        exports = list(dict.fromkeys(e for op in ops for e in self.ops[op].exports))
        return [(s, wanted) for s in self.sources if (wanted := [e for e in exports if self._source[e] is s])]

    def specs(self, ops=None, dtypes=None, constants=()) -> list:
        """The JitSpecs these ops (None: all) need for `dtypes` (None: all the family's) and `constants`."""
        return [spec for source, exports in self._wanted(ops) for spec in source.specs(exports, dtypes, constants)]

    def warmup(self, ops=None, dtypes=(), constants=()) -> None:
        """Loads (building where needed) the modules of these ops (None: all)."""
        for source, exports in self._wanted(ops):
            source.warmup(exports, dtypes, constants)
