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

from .._torch import ModuleExports, compiling, torch
from ..jit import JitSpec
from ._declare import Family, TorchOp, wrapper
from ._dtype_family import package_spec

# One module each (dtype-independent), so that a first call compiles only its own.
_MODULES = {"store_cache": {"store_cache": "Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor indices"},
            "concat_mla": {"concat_mla_k": "Tensor(a!) k, Tensor k_nope, Tensor k_rope", "concat_mla_absorb_q": "a, b, out"}}
_COMPILE_SECONDS = {"store_cache": 2.0, "concat_mla": 1.8}  # H100 host, 16 builds at once: the order builds start in


def spec(module: str) -> JitSpec:
    """The module "store_cache" or "concat_mla"."""
    return package_spec(f"kv_rows_{module}", cuda_file="kv_rows.cuh",
                        wrappers=[wrapper(op, f"jitkern_kv_rows::KvRows::{op}", params) for op, params in _MODULES[module].items()],
                        compile_seconds=_COMPILE_SECONDS[module])


_FUNCTIONS = {module: ModuleExports(lambda m=module: spec(m), exports, f"kv_rows_{module}") for module, exports in _MODULES.items()}
FAMILY = Family(*_FUNCTIONS.values())


# The torch custom ops are what torch.compile traces (their implementations are the eager paths).
@FAMILY.op("store_cache", torch=(TorchOp("store_cache", export="store_cache"),))
def store_cache(k, v, k_cache, v_cache, indices, *, row_bytes: int = 0, num_split: int = 0) -> None:
    """k_cache[indices[i]] = k[i], v_cache[indices[i]] = v[i]: k, v [T, *row]; caches [slots, *row] or
    [pages, page_size, *row]; any dtype (the caches' must match), rows of a multiple of 4 bytes;
    out-of-range indices are skipped. `row_bytes` and `num_split` (the reference's tuning knobs) are
    accepted and ignored."""
    if compiling():
        return torch.ops.jitkern.store_cache(k, v, k_cache, v_cache, indices)
    exports = _FUNCTIONS["store_cache"]
    fn = exports.get("store_cache") or exports.load_checked(
        "store_cache", "store_cache", (("k", k), ("v", v), ("k_cache", k_cache), ("v_cache", v_cache), ("indices", indices)))
    fn(k, v, k_cache, v_cache, indices)


@FAMILY.op("concat_mla_k", torch=(TorchOp("concat_mla_k", export="concat_mla_k"),))
def concat_mla_k(k, k_nope, k_rope) -> None:
    """k [T, H, Dn + Dr] = [k_nope [T, H, Dn] | k_rope [T, 1, Dr] broadcast over the heads]."""
    if compiling():
        return torch.ops.jitkern.concat_mla_k(k, k_nope, k_rope)
    exports = _FUNCTIONS["concat_mla"]
    fn = exports.get("concat_mla_k") or exports.load_checked("concat_mla_k", "concat_mla_k", (("k", k), ("k_nope", k_nope), ("k_rope", k_rope)))
    fn(k, k_nope, k_rope)


def _absorb_q_out(a, b):
    return torch.empty((*a.shape[:-1], a.shape[-1] + b.shape[-1]), dtype=a.dtype, device=a.device)


@FAMILY.op("concat_mla_absorb_q", torch=(TorchOp("concat_mla_absorb_q", "(Tensor a, Tensor b) -> Tensor", None, _absorb_q_out),))
def concat_mla_absorb_q(a, b):
    """[a | b] over the last dimension: a [A, B, Da], b [A, B, Db] -> a new [A, B, Da + Db]."""
    if compiling():
        return torch.ops.jitkern.concat_mla_absorb_q(a, b)
    exports = _FUNCTIONS["concat_mla"]
    fn = exports.get("concat_mla_absorb_q") or exports.load_checked("concat_mla_absorb_q", "concat_mla_absorb_q", (("a", a), ("b", b)))
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise TypeError(f"concat_mla_absorb_q(): a and b must be torch.Tensors, got {type(a).__name__} and {type(b).__name__}")
    out = _absorb_q_out(a, b)
    fn(a, b, out)
    return out
