"""Kernels shipped with jitkern (need torch). Each op is also a torch custom op in the `jitkern`
namespace (torch.ops.jitkern.*), which is what torch.compile traces."""

from .._torch import require_torch
from . import add_constant as _add_constant_family
from . import kv_transfer as _kv_transfer_family
from . import norm as _norm_family
from . import quant as _quant_family
from . import wait_value as _wait_value_family
from .add_constant import add_constant
from .kv_transfer import (transfer_hicache_all_layer, transfer_hicache_one_layer, transfer_kv_all_layers, transfer_kv_all_layers_mla,
                          transfer_kv_one_layer, transfer_kv_one_layer_mla)
from .norm import fused_add_rmsnorm, fused_inplace_qknorm, fused_inplace_qknorm_across_heads, rmsnorm
from .quant import (fused_add_rmsnorm_quant_fp8, group_scales_like, per_tensor_quant_fp8, per_token_group_quant_8bit, per_token_quant_fp8,
                    rmsnorm_quant_fp8)
from .wait_value import Event, stream_wait_value


FAMILIES = ("norm", "quant", "kv_transfer", "wait_value", "add_constant")
# Each op's family; the norm and quant families build one module per op and dtype, the others one module.
OPS = {**{op: "norm" for op in _norm_family._FAMILY.public}, **{op: "quant" for op in _quant_family._FAMILY.public},
       **{op: "kv_transfer" for op in ("transfer_hicache_all_layer", "transfer_hicache_one_layer", "transfer_kv_all_layers",
                                       "transfer_kv_all_layers_mla", "transfer_kv_one_layer", "transfer_kv_one_layer_mla")},
       "stream_wait_value": "wait_value", "Event": "wait_value", "add_constant": "add_constant"}


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
    ops one module each (every dtype); add_constant one per value in `constants`. What
    `jitkern prebuild` and `warmup` build."""
    out = []
    for family, wanted in _selection(families, ops).items():
        if family in ("norm", "quant"):
            out += (_norm_family if family == "norm" else _quant_family)._FAMILY.specs_for(wanted, dtypes)
        elif family == "add_constant":
            out += [_add_constant_family.spec(c) for c in constants]
        else:
            out.append((_kv_transfer_family if family == "kv_transfer" else _wait_value_family).spec())
    return out


def warmup(*, dtypes=(), constants=(), ops=None) -> None:
    """Builds (in parallel) and loads the modules these ops (default: all) need before a CUDA graph capture
    or serving: the norm and quant ops for each of `dtypes` (torch dtypes), the kv_transfer and wait_value
    modules, add_constant for each of `constants`."""
    from concurrent.futures import ThreadPoolExecutor

    require_torch()
    dtypes, constants = tuple(dtypes), tuple(constants)
    warm = {"norm": lambda wanted: _norm_family.warmup(dtypes, wanted), "quant": lambda wanted: _quant_family.warmup(dtypes, wanted),
            "kv_transfer": lambda wanted: _kv_transfer_family.warmup(), "wait_value": lambda wanted: _wait_value_family.warmup(),
            "add_constant": lambda wanted: _add_constant_family.warmup(constants)}
    selection = _selection(None, ops)
    with ThreadPoolExecutor(max_workers=len(selection)) as pool:  # the families build side by side, not one after another
        for future in [pool.submit(warm[family], wanted) for family, wanted in selection.items()]:
            future.result()


__all__ = ["Event", "FAMILIES", "OPS", "specs", "add_constant", "fused_add_rmsnorm", "fused_add_rmsnorm_quant_fp8", "fused_inplace_qknorm",
           "fused_inplace_qknorm_across_heads", "group_scales_like", "per_tensor_quant_fp8", "per_token_group_quant_8bit",
           "per_token_quant_fp8", "rmsnorm", "rmsnorm_quant_fp8", "stream_wait_value", "transfer_hicache_all_layer",
           "transfer_hicache_one_layer", "transfer_kv_all_layers", "transfer_kv_all_layers_mla", "transfer_kv_one_layer",
           "transfer_kv_one_layer_mla", "warmup"]
