"""The KV row copies (csrc/kv_rows.cuh): rows of any dtype, moved as bytes.

- `store_cache(k, v, k_cache, v_cache, indices)`: the plain write of k and v rows (rows of a multiple of
  4 bytes) to k_cache[indices[i]], v_cache[indices[i]]: caches flat [slots, *row] or paged [pages,
  page_size, *row] (location = page * page_size + offset), the layouts RoPE's fused cache write takes
  (jitkern.ops.rope). Out-of-range indices are skipped; no check costs a synchronisation.
- `concat_mla_k`, `concat_mla_absorb_q`: the MLA (DeepSeek) concatenations.

The C++ entry points check every argument before they launch and name the bad one (TypeError for a
dtype, ValueError for a shape, stride, device or value). Each op is a torch custom op
(torch.ops.jitkern.*); the reference framework's (SGLang's) names and keywords work unchanged."""

from __future__ import annotations

from .._torch import ModuleExports, compiling, define_op, torch
from ..jit import JitSpec
from ._dtype_family import package_spec

# One module each (dtype-independent), so that a first call compiles only its own.
_MODULES = {"store_cache": {"store_cache": "k, v, k_cache, v_cache, indices"},
            "concat_mla": {"concat_mla_k": "k, k_nope, k_rope", "concat_mla_absorb_q": "a, b, out"}}
_COMPILE_SECONDS = {"store_cache": 2.0, "concat_mla": 1.8}  # H100 host, 16 builds at once: the order builds start in
_MODULE_OF = {op: module for module, exports in _MODULES.items() for op in exports}  # Python op -> its module
OPS = tuple(_MODULE_OF)


def spec(module: str) -> JitSpec:
    """The module "store_cache" or "concat_mla"."""
    return package_spec(f"kv_rows_{module}", cuda_file="kv_rows.cuh",
                        wrappers=[(op, f"jitkern_kv_rows::KvRows::{op}", args) for op, args in _MODULES[module].items()],
                        compile_seconds=_COMPILE_SECONDS[module])


_FUNCTIONS = {module: ModuleExports(lambda m=module: spec(m), exports, f"kv_rows_{module}") for module, exports in _MODULES.items()}


def _modules(ops) -> list[str]:
    return list(dict.fromkeys(_MODULE_OF[op] for op in (OPS if ops is None else ops)))


def specs(ops=None, dtypes=None, constants=()) -> list[JitSpec]:
    """The modules these ops (None: all) need (any dtype)."""
    return [spec(m) for m in _modules(ops)]


def warmup(ops=None, dtypes=(), constants=()) -> None:
    """Loads (building where needed) the modules of these ops (None: all)."""
    for m in _modules(ops):
        _FUNCTIONS[m].warmup()


def store_cache(k, v, k_cache, v_cache, indices, *, row_bytes: int = 0, num_split: int = 0) -> None:
    """k_cache[indices[i]] = k[i], v_cache[indices[i]] = v[i]: k, v [T, *row]; caches [slots, *row] or
    [pages, page_size, *row]; any dtype (the caches' must match), rows of a multiple of 4 bytes;
    out-of-range indices are skipped. `row_bytes` and `num_split` (the reference's tuning knobs) are
    accepted and ignored."""
    if compiling():
        return torch.ops.jitkern.store_cache(k, v, k_cache, v_cache, indices)
    _FUNCTIONS["store_cache"]("store_cache")(k, v, k_cache, v_cache, indices)


def concat_mla_k(k, k_nope, k_rope) -> None:
    """k [T, H, Dn + Dr] = [k_nope [T, H, Dn] | k_rope [T, 1, Dr] broadcast over the heads]."""
    if compiling():
        return torch.ops.jitkern.concat_mla_k(k, k_nope, k_rope)
    _FUNCTIONS["concat_mla"]("concat_mla_k")(k, k_nope, k_rope)


def _absorb_q_out(a, b):
    return torch.empty((*a.shape[:-1], a.shape[-1] + b.shape[-1]), dtype=a.dtype, device=a.device)


def concat_mla_absorb_q(a, b):
    """[a | b] over the last dimension: a [A, B, Da], b [A, B, Db] -> a new [A, B, Da + Db]."""
    if compiling():
        return torch.ops.jitkern.concat_mla_absorb_q(a, b)
    fn = _FUNCTIONS["concat_mla"]("concat_mla_absorb_q")
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise TypeError(f"concat_mla_absorb_q(): a and b must be torch.Tensors, got {type(a).__name__} and {type(b).__name__}")
    out = _absorb_q_out(a, b)
    fn(a, b, out)
    return out


# The torch custom ops: what torch.compile traces (their implementations are the eager paths above).
if torch is not None:
    define_op("jitkern::store_cache", "(Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor indices) -> ()", store_cache)
    define_op("jitkern::concat_mla_k", "(Tensor(a!) k, Tensor k_nope, Tensor k_rope) -> ()", concat_mla_k)
    define_op("jitkern::concat_mla_absorb_q", "(Tensor a, Tensor b) -> Tensor", concat_mla_absorb_q, _absorb_q_out)
