"""Kernels shipped with jitkern (need torch). Each op is also a torch custom op in the `jitkern`
namespace (torch.ops.jitkern.*), which is what torch.compile traces."""

from importlib import import_module

from .._torch import require_torch

# The kernel families, each four files: csrc/<family>.cuh, python/jitkern/ops/<family>.py,
# tests/python/test_<family>.py and benchmarks/bench_<family>.py. A family module offers OPS (its public
# ops), HELPERS (other public names, optional), specs(ops, dtypes, constants) (the JitSpecs those ops
# need) and warmup(ops, dtypes, constants), and declares its torch custom ops; a new family is one entry here.
FAMILIES = ("norm", "quant", "act", "moe", "kv_transfer", "rope", "qknorm_rope", "kv_rows", "mla_cache", "norm_variants", "wait_value", "add_constant", "all_reduce")
_FAMILY_MODULES = {family: import_module(f".{family}", __name__) for family in FAMILIES}
OPS = {op: family for family, module in _FAMILY_MODULES.items() for op in module.OPS}  # each op's family
DTYPE_FAMILIES = tuple(f for f, module in _FAMILY_MODULES.items() if hasattr(module, "DTYPES"))  # built per dtype
_PUBLIC = {name: getattr(module, name) for module in _FAMILY_MODULES.values() for name in (*module.OPS, *getattr(module, "HELPERS", ()))}
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
    """The JitSpecs these ops need: by `ops` (Python op names, e.g. ["rmsnorm", "per_token_quant_fp8"]) or
    by kernel `families` (default: every op). The norm and quant ops need one module per op and each of
    `dtypes` (names or torch dtypes; default: every dtype they support); the kv_transfer and wait_value
    ops one module each (every dtype); add_constant one per value in `constants`; each family's own
    `specs` says what it needs. What `jitkern prebuild` and `warmup` build."""
    return [spec for family, wanted in _selection(families, ops).items()
            for spec in _FAMILY_MODULES[family].specs(wanted, dtypes, constants)]


def warmup(*, dtypes=(), constants=(), ops=None) -> None:
    """Builds (in one parallel build) and loads the modules these ops (default: all) need before a CUDA graph
    capture or serving: the per-dtype ops (norm, quant, act, MoE top-k, RoPE) for each of `dtypes` (torch
    dtypes), the dtype-independent modules, add_constant for each of `constants` (the list `specs` gives)."""
    from ..jit import warmup as build_all

    require_torch()
    dtypes, constants = tuple(dtypes), tuple(constants)
    build_all(*specs(ops=ops, dtypes=dtypes, constants=constants))  # one parallel build: no family waits on another's
    for family, wanted in _selection(None, ops).items():
        _FAMILY_MODULES[family].warmup(wanted, dtypes, constants)  # loads the modules just built and keeps their functions


__all__ = sorted([*_PUBLIC, "DTYPE_FAMILIES", "FAMILIES", "OPS", "specs", "warmup"])
