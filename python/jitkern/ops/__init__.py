"""Kernels shipped with jitkern (need torch). Each op is also a torch custom op in the `jitkern`
namespace (torch.ops.jitkern.*), which is what torch.compile traces."""

from .._torch import require_torch
from . import act as _act_family
from . import add_constant as _add_constant_family
from . import all_reduce as _all_reduce_family
from . import kv_transfer as _kv_transfer_family
from . import moe as _moe_family
from . import norm as _norm_family
from . import quant as _quant_family
from . import rope as _rope_family
from . import wait_value as _wait_value_family
from .act import (gelu_and_mul, gelu_tanh_and_mul, silu_and_mul, silu_and_mul_per_token_group_quant_fp8,
                  silu_and_mul_quant_fp8)
from .add_constant import add_constant
from .all_reduce import AllReduce
from .kv_transfer import (transfer_hicache_all_layer, transfer_hicache_one_layer, transfer_kv_all_layers, transfer_kv_all_layers_mla,
                          transfer_kv_one_layer, transfer_kv_one_layer_mla)
from .moe import moe_align_block_size, topk_sigmoid, topk_softmax
from .norm import fused_add_rmsnorm, fused_inplace_qknorm, fused_inplace_qknorm_across_heads, rmsnorm
from .quant import (fused_add_rmsnorm_quant_fp8, group_scales_like, per_tensor_quant_fp8, per_token_group_quant_8bit, per_token_quant_fp8,
                    rmsnorm_quant_fp8)
from .rope import (FusedSetKVBufferArg, apply_rope_pos_ids_cos_sin_cache_with_kv_cache, apply_rope_pos_ids_cos_sin_cache_without_kv_cache,
                   apply_rope_with_cos_sin_cache_inplace, concat_mla_absorb_q, concat_mla_k, rotary_embedding, store_cache)
from .wait_value import Event, stream_wait_value


# Every family module offers OPS (its public op names), specs(ops, dtypes, constants) (the JitSpecs those ops
# need) and warmup(ops, dtypes, constants); a new family is one import and one entry here.
_FAMILY_MODULES = {"norm": _norm_family, "quant": _quant_family, "act": _act_family, "moe": _moe_family,
                   "kv_transfer": _kv_transfer_family, "rope": _rope_family,
                   "wait_value": _wait_value_family, "add_constant": _add_constant_family, "all_reduce": _all_reduce_family}
FAMILIES = tuple(_FAMILY_MODULES)
OPS = {op: family for family, module in _FAMILY_MODULES.items() for op in module.OPS}  # each op's family
DTYPE_FAMILIES = tuple(f for f, module in _FAMILY_MODULES.items() if hasattr(module, "DTYPES"))  # built per dtype


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


__all__ = ["AllReduce", "DTYPE_FAMILIES", "Event", "FAMILIES", "FusedSetKVBufferArg", "OPS", "specs", "add_constant", "apply_rope_pos_ids_cos_sin_cache_with_kv_cache",
           "apply_rope_pos_ids_cos_sin_cache_without_kv_cache", "apply_rope_with_cos_sin_cache_inplace", "concat_mla_absorb_q", "concat_mla_k",
           "fused_add_rmsnorm", "gelu_and_mul", "gelu_tanh_and_mul",
           "silu_and_mul", "silu_and_mul_per_token_group_quant_fp8", "silu_and_mul_quant_fp8", "fused_add_rmsnorm_quant_fp8", "fused_inplace_qknorm",
           "fused_inplace_qknorm_across_heads", "moe_align_block_size", "topk_sigmoid", "topk_softmax", "group_scales_like", "per_tensor_quant_fp8", "per_token_group_quant_8bit",
           "per_token_quant_fp8", "rmsnorm", "rmsnorm_quant_fp8", "rotary_embedding", "store_cache", "stream_wait_value", "transfer_hicache_all_layer",
           "transfer_hicache_one_layer", "transfer_kv_all_layers", "transfer_kv_all_layers_mla", "transfer_kv_one_layer",
           "transfer_kv_one_layer_mla", "warmup"]
