"""Rotary position embedding and the fused KV-cache write (csrc/rope.cuh).

- `apply_rope_with_cos_sin_cache_inplace` and `rotary_embedding`: q and k rotated in place, NeoX style
  (`is_neox=True`: column i pairs with i + R/2) or GPT-J style (interleaved: 2i with 2i + 1), over the
  first R columns of each head, R being the cos/sin cache's width (partial rotary when R < head_size).
  q/k are [T, H * D] or [T, H, D] (leading dimensions beyond T are flattened), rows and heads may be
  strided (column slices of one fused qkv buffer); fp16/bf16/fp32; positions int32/int64 [T];
  cos_sin_cache fp32 (or the inputs' dtype) [max_position, R], R/2 cosines then R/2 sines per position.
- With `fused_set_kv_buffer_arg` (value, k_buffer, v_buffer, cache_loc, k_scale, v_scale), the same
  kernel writes the rotated k and the value rows to k_buffer[cache_loc[i]] and v_buffer[cache_loc[i]]:
  caches flat [slots, H, D] (or [slots, H * D]) or paged [pages, page_size, H, D] (location = page *
  page_size + offset), in the inputs' dtype or float8_e4m3fn with per-tensor scales (q = saturate(
  round_to_nearest_even(x / scale)), the division in fp32, as the quantization ops round).
The plain write of k and v rows to the same cache layouts (`store_cache`) and the MLA concatenations are
the KV row copies (jitkern.ops.kv_rows).

Locations outside the cache are skipped (that token's cache write only). A token whose position is
outside [0, max_position) is skipped entirely: its q and k stay as they were (out of place: its output
rows are not written) and nothing of it reaches the cache. No check costs a synchronisation.

The C++ entry points check every argument before they launch and name the bad one (TypeError for a
dtype, ValueError for a shape, stride, device or value). Each op is a torch custom op
(torch.ops.jitkern.*); the reference framework's (SGLang's) names and keywords work unchanged."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._torch import compiling, torch
from ._declare import Family, TorchOp
from ._dtype_family import DtypeFamily
from ._shapes import as_rows

_FAMILY = DtypeFamily("rope", "jitkern_rope::RopeOps", {
    "apply": "positions, q, k, q_out, k_out, cos_sin_cache, head_size, is_neox, head_groups, head_splits",
    **{op: "positions, q, k, q_out, k_out, cos_sin_cache, head_size, is_neox, value, k_buffer, v_buffer, cache_loc, k_scale, v_scale, "
           "head_groups, head_splits" for op in ("apply_store", "apply_store_fp8")},
}, compile_seconds={"apply": 2.8, "apply_store": 2.9, "apply_store_fp8": 4.1})  # bf16 on an H100 host, 16 builds at once: the order builds start in
FAMILY = Family(_FAMILY, helpers=("FusedSetKVBufferArg",))
_FUNCTIONS = _FAMILY.functions
_rope_module = _FAMILY.exports  # the per-dtype exports, for tests and benchmarks


@dataclass
class FusedSetKVBufferArg:
    """The KV-cache write fused into apply_rope_with_cos_sin_cache_inplace (the reference's dataclass of
    the same name works too): value [T, Hk * D] or [T, Hk, D]; k_buffer and v_buffer the caches;
    cache_loc [T] int32/int64; k_scale and v_scale for a float8_e4m3fn cache (None: 1)."""

    value: "torch.Tensor"
    k_buffer: "torch.Tensor"
    v_buffer: "torch.Tensor"
    k_scale: float | None
    v_scale: float | None
    cache_loc: "torch.Tensor"


def _tokens(x, tokens: int, batched: bool, public: str, name: str):
    """q, k or v as [T, H * D] or [T, H, D]: a view that flattens leading dimensions (e.g. [B, S, H * D]).
    `batched`: the positions are [B, S], so x is [B, S, H * D] or [B, S, H, D] (also where B or S is 1)."""
    if not isinstance(x, torch.Tensor) or x.dim() == 2 or (not batched and x.dim() == 3 and x.shape[0] == tokens):
        return x
    if batched:
        trailing = x.dim() - 2
    else:
        trailing = 2 if x.dim() >= 3 and math.prod(x.shape[:-2]) == tokens else 1
    return as_rows(x, public, name, writes=True, trailing=trailing)


def _positions(positions):
    return positions.reshape(-1) if isinstance(positions, torch.Tensor) and positions.dim() != 1 else positions


def _token_views(positions, public: str, **tensors) -> list:
    """positions flattened, then each of `tensors` (q, k, v) as [T, H * D] or [T, H, D] (_tokens)."""
    batched = isinstance(positions, torch.Tensor) and positions.dim() == 2
    positions = _positions(positions)
    tokens = positions.numel() if isinstance(positions, torch.Tensor) else -1
    return [positions, *(_tokens(x, tokens, batched, public, name) if isinstance(x, torch.Tensor) and x.dim() > 2 else x
                         for name, x in tensors.items())]


def _cache(cache):
    """An fp8 cache as its bytes (DLPack has no fp8 type in every torch/tvm-ffi pair)."""
    return cache.view(torch.uint8) if isinstance(cache, torch.Tensor) and cache.dtype == torch.float8_e4m3fn else cache


def _store_export(k_cache) -> str:
    """The cache write's export for k_cache's type (C++ checks the caches against it): fp8 caches (or their
    bytes) have their own, so that a first call compiles only its own kernels."""
    return "apply_store_fp8" if getattr(k_cache, "dtype", None) in (torch.float8_e4m3fn, torch.uint8) else "apply_store"


def _scale(value, name: str, public: str) -> float:
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{public}(): {name} must be a float or None, got {type(value).__name__}")
    return float(value)


def _function(export: str, query, public: str):
    return _FUNCTIONS.get((export, getattr(query, "dtype", None))) or _FAMILY.function(export, query, public, "query")


def _head_size_of_heads(public: str, **tensors) -> int:
    """The head size of the reference's pos_ids forms, q's last dimension: each of `tensors` given must be
    [T, H, D] (a 2-D q would be taken as one head of all its columns, rotating only the first)."""
    for name, x in tensors.items():
        if isinstance(x, torch.Tensor) and x.dim() != 3:
            raise ValueError(f"{public}(): {name} must be [T, H, D], got shape {tuple(x.shape)}")
    return tensors["q"].shape[-1] if isinstance(tensors["q"], torch.Tensor) else 0


def _rope(positions, query, key, head_size, cos_sin_cache, is_neox, public):
    fn = _function("apply", query, public)
    positions, query, key = _token_views(positions, public, query=query, key=key)
    fn(positions, query, key, query, key, cos_sin_cache, head_size, bool(is_neox), 0, 0)


def _rope_store(positions, query, key, head_size, cos_sin_cache, is_neox, value, k_cache, v_cache, cache_loc, k_scale, v_scale, public):
    fn = _function(_store_export(k_cache), query, public)
    positions, query, key, value = _token_views(positions, public, query=query, key=key, value=value)
    fn(positions, query, key, query, key, cos_sin_cache, head_size, bool(is_neox), value, _cache(k_cache), _cache(v_cache), cache_loc,
       _scale(k_scale, "k_scale", public), _scale(v_scale, "v_scale", public), 0, 0)


# The torch custom ops: what torch.compile traces (their implementations are the eager paths).
@FAMILY.op("apply", torch=(
    TorchOp("rope", "(Tensor positions, Tensor(a!) query, Tensor(b!) key, int head_size, Tensor cos_sin_cache, bool is_neox) -> ()",
            lambda positions, query, key, head_size, cos_sin_cache, is_neox: _rope(positions, query, key, head_size, cos_sin_cache, is_neox,
                                                                                   "rotary_embedding")),
    TorchOp("rope_query", "(Tensor positions, Tensor(a!) query, int head_size, Tensor cos_sin_cache, bool is_neox) -> ()",
            lambda positions, query, head_size, cos_sin_cache, is_neox: _rope(positions, query, None, head_size, cos_sin_cache, is_neox,
                                                                              "rotary_embedding"))))
def rotary_embedding(positions, query, key, head_size: int, cos_sin_cache, is_neox: bool = True):
    """Rotates query and key (None: query only) in place; returns (query, key)."""
    if compiling():
        if key is None:
            torch.ops.jitkern.rope_query(positions, query, head_size, cos_sin_cache, is_neox)
        else:
            torch.ops.jitkern.rope(positions, query, key, head_size, cos_sin_cache, is_neox)
        return query, key
    _rope(positions, query, key, head_size, cos_sin_cache, is_neox, "rotary_embedding")
    return query, key


@FAMILY.op("apply", "apply_store", "apply_store_fp8", torch=(TorchOp(
    "rope_store_kv", "(Tensor positions, Tensor(a!) query, Tensor(b!) key, int head_size, Tensor cos_sin_cache, bool is_neox, Tensor value, "
                     "Tensor(c!) k_cache, Tensor(d!) v_cache, Tensor cache_loc, float k_scale, float v_scale) -> ()",
    lambda *args: _rope_store(*args, "apply_rope_with_cos_sin_cache_inplace")),))
def apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size: int, cos_sin_cache, is_neox: bool = True,
                                          fused_set_kv_buffer_arg=None, enable_pdl: bool | None = None) -> None:
    """Rotates query and key in place; with `fused_set_kv_buffer_arg` (FusedSetKVBufferArg or the
    reference's), also writes the rotated key and the value to the cache rows at its cache_loc.
    `enable_pdl` is accepted for compatibility: the kernel uses PDL wherever the GPU has it."""
    a = fused_set_kv_buffer_arg
    if compiling():
        if a is None:
            torch.ops.jitkern.rope(positions, query, key, head_size, cos_sin_cache, is_neox)
        else:
            torch.ops.jitkern.rope_store_kv(positions, query, key, head_size, cos_sin_cache, is_neox, a.value, a.k_buffer, a.v_buffer,
                                            a.cache_loc, _scale(a.k_scale, "k_scale", "apply_rope_with_cos_sin_cache_inplace"),
                                            _scale(a.v_scale, "v_scale", "apply_rope_with_cos_sin_cache_inplace"))
        return
    if a is None:
        _rope(positions, query, key, head_size, cos_sin_cache, is_neox, "apply_rope_with_cos_sin_cache_inplace")
    else:
        _rope_store(positions, query, key, head_size, cos_sin_cache, is_neox, a.value, a.k_buffer, a.v_buffer, a.cache_loc, a.k_scale,
                    a.v_scale, "apply_rope_with_cos_sin_cache_inplace")


@FAMILY.op("apply", torch=(TorchOp(
    "rope_out", "(Tensor pos_ids, Tensor q, Tensor k, Tensor(a!) q_rope, Tensor(b!) k_rope, Tensor cos_sin_cache, bool interleave) -> ()",
    lambda pos_ids, q, k, q_rope, k_rope, cos_sin_cache, interleave: apply_rope_pos_ids_cos_sin_cache_without_kv_cache(
        q, k, q_rope, k_rope, cos_sin_cache, pos_ids, interleave)),))
def apply_rope_pos_ids_cos_sin_cache_without_kv_cache(q, k, q_rope, k_rope, cos_sin_cache, pos_ids, interleave: bool = False,
                                                      enable_pdl: bool = False) -> None:
    """The reference's form: q [T, Hq, D], k [T, Hk, D] rotated into q_rope, k_rope (which may be q, k);
    `interleave`: GPT-J style."""
    if compiling():
        return torch.ops.jitkern.rope_out(pos_ids, q, k, q_rope, k_rope, cos_sin_cache, interleave)
    public = "apply_rope_pos_ids_cos_sin_cache_without_kv_cache"
    fn = _function("apply", q, public)
    head_size = _head_size_of_heads(public, q=q, k=k, q_rope=q_rope, k_rope=k_rope)
    fn(pos_ids, q, k, q_rope, k_rope, cos_sin_cache, head_size, not interleave, 0, 0)


@FAMILY.op("apply_store", "apply_store_fp8", torch=(TorchOp(
    "rope_out_store_kv", "(Tensor pos_ids, Tensor q, Tensor k, Tensor(a!) q_rope, Tensor(b!) k_rope, Tensor cos_sin_cache, bool interleave, "
                         "Tensor v, Tensor(c!) k_buffer, Tensor(d!) v_buffer, Tensor kv_cache_loc) -> ()",
    lambda pos_ids, q, k, q_rope, k_rope, cos_sin_cache, interleave, v, k_buffer, v_buffer, kv_cache_loc:
        apply_rope_pos_ids_cos_sin_cache_with_kv_cache(q, k, q_rope, k_rope, cos_sin_cache, pos_ids, v, k_buffer, v_buffer, kv_cache_loc,
                                                       interleave)),))
def apply_rope_pos_ids_cos_sin_cache_with_kv_cache(q, k, q_rope, k_rope, cos_sin_cache, pos_ids, v, k_buffer, v_buffer, kv_cache_loc,
                                                   interleave: bool = False, enable_pdl: bool = False) -> None:
    """The reference's form with the KV-cache write: k_rope and v also go to k_buffer[kv_cache_loc],
    v_buffer[kv_cache_loc]."""
    if compiling():
        return torch.ops.jitkern.rope_out_store_kv(pos_ids, q, k, q_rope, k_rope, cos_sin_cache, interleave, v, k_buffer, v_buffer, kv_cache_loc)
    public = "apply_rope_pos_ids_cos_sin_cache_with_kv_cache"
    fn = _function(_store_export(k_buffer), q, public)
    head_size = _head_size_of_heads(public, q=q, k=k, q_rope=q_rope, k_rope=k_rope)
    fn(pos_ids, q, k, q_rope, k_rope, cos_sin_cache, head_size, not interleave, v, _cache(k_buffer), _cache(v_buffer), kv_cache_loc, 1.0, 1.0,
       0, 0)
