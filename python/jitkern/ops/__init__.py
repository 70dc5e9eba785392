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


def specs(families=None, *, dtypes=None, constants=()) -> list:
    """The JitSpecs of these kernel families (default: all): the norm and quant families for each of
    `dtypes` (names or torch dtypes; default: every dtype they support), the kv_transfer and wait_value modules
    (one each, for every dtype), add_constant for each of `constants`. What
    `jitkern prebuild --ops` builds."""
    families = FAMILIES if families is None else tuple(families)
    unknown = set(families) - set(FAMILIES)
    if unknown:
        raise ValueError(f"unknown kernel famil{'y' if len(unknown) == 1 else 'ies'} {', '.join(sorted(unknown))}; "
                         f"jitkern ships {', '.join(FAMILIES)}")
    out = []
    if "norm" in families:
        out += [_norm_family.spec(d) for d in (_norm_family.DTYPES if dtypes is None else dtypes)]
    if "quant" in families:
        out += [_quant_family.spec(d) for d in (_quant_family.DTYPES if dtypes is None else dtypes)]
    out += [family.spec() for name, family in (("kv_transfer", _kv_transfer_family), ("wait_value", _wait_value_family))
            if name in families]
    if "add_constant" in families:
        out += [_add_constant_family.spec(c) for c in constants]
    return out


def warmup(*, dtypes=(), constants=()) -> None:
    """Builds (in parallel) and loads the modules these ops need before a CUDA graph capture or serving:
    the norm and quant families for each of `dtypes` (torch dtypes), the kv_transfer and wait_value modules,
    add_constant for each of `constants`."""
    from concurrent.futures import ThreadPoolExecutor

    require_torch()
    dtypes, constants = tuple(dtypes), tuple(constants)
    families = (lambda: _norm_family.warmup(dtypes), lambda: _quant_family.warmup(dtypes), _kv_transfer_family.warmup,
                _wait_value_family.warmup, lambda: _add_constant_family.warmup(constants))
    with ThreadPoolExecutor(max_workers=len(families)) as pool:  # the families build side by side, not one after another
        for future in [pool.submit(warm) for warm in families]:
            future.result()


__all__ = ["Event", "FAMILIES", "specs", "add_constant", "fused_add_rmsnorm", "fused_add_rmsnorm_quant_fp8", "fused_inplace_qknorm",
           "fused_inplace_qknorm_across_heads", "group_scales_like", "per_tensor_quant_fp8", "per_token_group_quant_8bit",
           "per_token_quant_fp8", "rmsnorm", "rmsnorm_quant_fp8", "stream_wait_value", "transfer_hicache_all_layer",
           "transfer_hicache_one_layer", "transfer_kv_all_layers", "transfer_kv_all_layers_mla", "transfer_kv_one_layer",
           "transfer_kv_one_layer_mla", "warmup"]
