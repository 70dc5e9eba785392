"""The MLA cache write of DeepSeek-style attention (csrc/mla_cache.cuh), with the reference framework's
(SGLang's) names and arguments:

- `set_mla_kv_buffer(kv_buffer, loc, cache_k_nope, cache_k_rope, num_warps=0, *, reserved_skip_index=0,
  k_scale=None)`: kv_buffer[loc[i]] = [cache_k_nope[i] | cache_k_rope[i]];
- `set_mla_kv_concat_q(kv_buffer, loc, cache_k_nope, cache_k_rope, q_nope, q_rope, num_warps=0, *,
  reserved_skip_index=-1, k_scale=None, q_scale=None)`: the same and, in the same launch, returns the
  absorbed query [q_nope | q_rope] as a new [T, H, Dn + Dr] tensor.

cache_k_nope [T, Dn] and cache_k_rope [T, Dr] (or [T, 1, D]; rows strided, last dimension contiguous),
q_nope [T, H, Dn] and q_rope [T, H, Dr], fp16/bf16/fp32; loc [T] int32/int64; kv_buffer [slots, Dn + Dr],
[slots, 1, Dn + Dr] or paged [pages, page_size, 1, Dn + Dr] in the inputs' dtype, or float8_e4m3fn: then
the values are divided by k_scale (None: 1) and rounded to nearest even, saturating (as the quantization
ops round), and the query is float8_e4m3fn too, divided by q_scale. Locations outside the cache and
`reserved_skip_index` (slot 0 by default for set_mla_kv_buffer, as the reference skips its CUDA-graph
padding slot; -1: none) are skipped. `num_warps` is accepted for compatibility (the launch shape is chosen
here). The C++ entry points check every argument and name the bad one. Each op is a torch custom op."""

from __future__ import annotations

from .._torch import compiling, torch
from ._declare import Family, TorchOp
from ._dtype_family import DtypeFamily
from .rope import _cache, _scale

_ARGS = "kv_buffer, loc, cache_k_nope, cache_k_rope, q_nope, q_rope, q_out, reserved_skip_index, k_scale, q_scale"
_FAMILY = DtypeFamily("mla_cache", "jitkern_mla_cache::MlaCacheOps", {"store": _ARGS, "store_fp8": _ARGS},
                      compile_seconds={"store": 2.5, "store_fp8": 3.0})  # estimates: the order parallel builds start in
FAMILY = Family(_FAMILY)
spec = _FAMILY.spec
_FUNCTIONS = _FAMILY.functions
_mla_cache_module = _FAMILY.exports  # the per-dtype exports, for tests and benchmarks

_FP8 = ("float8_e4m3fn", "uint8")


def _is_fp8(kv_buffer) -> bool:
    return str(getattr(kv_buffer, "dtype", "")).removeprefix("torch.") in _FP8


def _rows(x):
    """[T, 1, D] (a singleton head dimension) as [T, D]."""
    return x.squeeze(-2) if isinstance(x, torch.Tensor) and x.dim() == 3 and x.shape[-2] == 1 else x


def _store(kv_buffer, loc, k_nope, k_rope, q_nope, q_rope, q_out, reserved_skip_index, k_scale, q_scale, public):
    export = "store_fp8" if _is_fp8(kv_buffer) else "store"
    fn = _FUNCTIONS.get((export, getattr(k_nope, "dtype", None))) or _FAMILY.function(export, k_nope, public, "cache_k_nope")
    fn(_cache(kv_buffer), loc, _rows(k_nope), _rows(k_rope), q_nope, q_rope, _cache(q_out), int(reserved_skip_index),
       _scale(k_scale, "k_scale", public), _scale(q_scale, "q_scale", public))


@FAMILY.op("store", "store_fp8", torch=(TorchOp(
    "set_mla_kv_buffer",
    "(Tensor(a!) kv_buffer, Tensor loc, Tensor cache_k_nope, Tensor cache_k_rope, int reserved_skip_index, float k_scale) -> ()",
    lambda kv_buffer, loc, k_nope, k_rope, skip, k_scale: _store(kv_buffer, loc, k_nope, k_rope, None, None, None, skip, k_scale, None,
                                                                 "set_mla_kv_buffer")),))
def set_mla_kv_buffer(kv_buffer, loc, cache_k_nope, cache_k_rope, num_warps: int = 0, *, reserved_skip_index: int = 0,
                      k_scale: float | None = None) -> None:
    """kv_buffer[loc[i]] = [cache_k_nope[i] | cache_k_rope[i]] (fp8 caches: divided by k_scale)."""
    if compiling():
        return torch.ops.jitkern.set_mla_kv_buffer(kv_buffer, loc, cache_k_nope, cache_k_rope, reserved_skip_index,
                                                   _scale(k_scale, "k_scale", "set_mla_kv_buffer"))
    _store(kv_buffer, loc, cache_k_nope, cache_k_rope, None, None, None, reserved_skip_index, k_scale, None, "set_mla_kv_buffer")


def _query_out(kv_buffer, q_nope, q_rope):
    dtype = torch.float8_e4m3fn if _is_fp8(kv_buffer) else q_nope.dtype
    return torch.empty((*q_nope.shape[:-1], q_nope.shape[-1] + q_rope.shape[-1]), dtype=dtype, device=q_nope.device)


def _concat_q(kv_buffer, loc, k_nope, k_rope, q_nope, q_rope, skip, k_scale, q_scale):
    q_out = _query_out(kv_buffer, q_nope, q_rope)
    _store(kv_buffer, loc, k_nope, k_rope, q_nope, q_rope, q_out, skip, k_scale, q_scale, "set_mla_kv_concat_q")
    return q_out


@FAMILY.op("store", "store_fp8", torch=(TorchOp(
    "set_mla_kv_concat_q",
    "(Tensor(a!) kv_buffer, Tensor loc, Tensor cache_k_nope, Tensor cache_k_rope, Tensor q_nope, Tensor q_rope, int reserved_skip_index, "
    "float k_scale, float q_scale) -> Tensor",
    _concat_q, lambda kv_buffer, loc, k_nope, k_rope, q_nope, q_rope, *rest: _query_out(kv_buffer, q_nope, q_rope)),))
def set_mla_kv_concat_q(kv_buffer, loc, cache_k_nope, cache_k_rope, q_nope, q_rope, num_warps: int = 0, *, reserved_skip_index: int = -1,
                        k_scale: float | None = None, q_scale: float | None = None):
    """set_mla_kv_buffer, and returns [q_nope | q_rope] (float8_e4m3fn, divided by q_scale, with an fp8 cache)."""
    public = "set_mla_kv_concat_q"
    for name, x in (("q_nope", q_nope), ("q_rope", q_rope)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{public}(): {name} must be a tensor, got {type(x).__name__}")
    if compiling():
        return torch.ops.jitkern.set_mla_kv_concat_q(kv_buffer, loc, cache_k_nope, cache_k_rope, q_nope, q_rope, reserved_skip_index,
                                                     _scale(k_scale, "k_scale", public), _scale(q_scale, "q_scale", public))
    q_out = _query_out(kv_buffer, q_nope, q_rope)
    _store(kv_buffer, loc, cache_k_nope, cache_k_rope, q_nope, q_rope, q_out, reserved_skip_index, k_scale, q_scale, public)
    return q_out
