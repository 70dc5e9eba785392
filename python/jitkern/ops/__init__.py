"""Kernels shipped with jitkern (need torch). Each op is also a torch custom op in the `jitkern`
namespace (torch.ops.jitkern.*), which is what torch.compile traces."""

from importlib import import_module

from .._torch import require_torch

# The kernel families, each four files: csrc/<family>.cuh, python/jitkern/ops/<family>.py,
# tests/python/ops/test_<family>.py and benchmarks/bench_<family>.py. A family module declares its ops in
# FAMILY (ops/_declare.py), from which everything here follows; a new family is one entry in FAMILIES.
FAMILIES = ("norm", "quant", "act", "moe", "moe_combine", "moe_act", "kv_transfer", "rope", "qknorm_rope", "kv_rows", "mla_cache", "norm_variants", "wait_value", "add_constant", "all_reduce")
_FAMILY_MODULES = {family: import_module(f".{family}", __name__) for family in FAMILIES}
_DECLARED = {family: module.FAMILY for family, module in _FAMILY_MODULES.items()}
OPS = {op: family for family, declared in _DECLARED.items() for op in declared.ops}  # each op's family
DTYPE_FAMILIES = tuple(f for f, declared in _DECLARED.items() if declared.dtypes)  # built per dtype
CONSTANT_FAMILIES = tuple(f for f, declared in _DECLARED.items() if declared.constants)  # built per constant
_PUBLIC = {**{op: declared.ops[op].function for declared in _DECLARED.values() for op in declared.ops},
           **{name: getattr(_FAMILY_MODULES[f], name) for f, declared in _DECLARED.items() for name in declared.helpers}}
globals().update(_PUBLIC)


def _selection(families, ops) -> dict:
    """family -> the ops of it that are wanted (None: all of them)."""
    if families is not None and ops is not None:
        raise TypeError("specs()/warmup(): give families or ops, not both")
    if ops is not None:
        ops = [ops] if isinstance(ops, str) else list(ops)
        unknown = [op for op in ops if op not in OPS]
        if unknown:
            raise ValueError(f"unknown op{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; jitkern.ops has {', '.join(OPS)}")
        wanted: dict = {}
        for op in ops:
            wanted.setdefault(OPS[op], []).append(op)
        return wanted
    families = FAMILIES if families is None else ([families] if isinstance(families, str) else tuple(families))
    unknown = set(families) - set(FAMILIES)
    if unknown:
        raise ValueError(f"unknown kernel famil{'y' if len(unknown) == 1 else 'ies'} {', '.join(sorted(unknown))}; "
                         f"jitkern ships {', '.join(FAMILIES)}")
    return {family: None for family in families}


def specs(families=None, *, ops=None, dtypes=None, constants=()) -> list:
    """The JitSpecs these ops need, as their families declare them: by `ops` (Python op names, e.g.
    ["rmsnorm", "per_token_quant_fp8"]) or by kernel `families` (default: every op). The families of
    DTYPE_FAMILIES build a module per export for each of `dtypes` (names or torch dtypes; default: every
    dtype they support), those of CONSTANT_FAMILIES one per value in `constants`, the others their modules
    for any dtype. What `jitkern prebuild` and `warmup` build."""
    return [spec for family, wanted in _selection(families, ops).items()
            for spec in _DECLARED[family].specs(wanted, dtypes, constants)]


def warmup(*, dtypes=(), constants=(), ops=None) -> None:
    """Builds (in one parallel build) and loads the modules these ops (default: all) need before a CUDA graph
    capture or serving: those `specs` lists for these `dtypes` (torch dtypes; none: the families of
    DTYPE_FAMILIES load nothing) and `constants`."""
    from ..jit import warmup as build_all

    require_torch()
    dtypes, constants = tuple(dtypes), tuple(constants)
    build_all(*specs(ops=ops, dtypes=dtypes, constants=constants))  # one parallel build: no family waits on another's
    for family, wanted in _selection(None, ops).items():
        _DECLARED[family].warmup(wanted, dtypes, constants)  # loads the modules just built and keeps their functions


__all__ = sorted([*_PUBLIC, "CONSTANT_FAMILIES", "DTYPE_FAMILIES", "FAMILIES", "OPS", "specs", "warmup"])
