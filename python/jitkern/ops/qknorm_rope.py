"""Per-head RMSNorm of q and k fused with RoPE and, optionally, the KV-cache write (csrc/qknorm_rope.cuh):
the attention prologue of Qwen3- and GLM-style models in one kernel instead of qknorm, then RoPE, then the
cache write.

`fused_qknorm_rope(positions, q, k, q_weight, k_weight, cos_sin_cache, eps, is_neox, fused_set_kv_buffer_arg)`:
- each q head is normalised with q_weight and each k head with k_weight over the head's D columns (D is
  the weights' size; fp32 math, the result rounded to the inputs' dtype as `rmsnorm` rounds it; with
  `weight_offset=1.0`, by 1 + weight as Gemma's norms), then
  rotated in place over its first R columns, R being the cos/sin cache's width (partial rotary when R < D),
  NeoX style (`is_neox=True`: column i pairs with i + R/2) or GPT-J style (interleaved: 2i with 2i + 1);
- q/k are [T, H * D] or [T, H, D] (leading dimensions beyond T are flattened), rows and heads may be
  strided (column slices of one fused qkv buffer); fp16/bf16/fp32; positions int32/int64 with T elements;
  cos_sin_cache fp32 (or the inputs' dtype) [max_position, R], R/2 cosines then R/2 sines per position;
- mRoPE (vision-language models): positions [3, T] (t, h, w) with `mrope_section=(t, h, w)` (frequency counts
  summing to R/2; `mrope_interleaved=True`: frequency f % 3 == 1 below 3 h takes h, f % 3 == 2 below 3 w
  takes w, the rest t); each frequency takes the cos/sin row of its section's position;
- with `fused_set_kv_buffer_arg` (jitkern.ops.FusedSetKVBufferArg or the reference framework's: value,
  k_buffer, v_buffer, cache_loc, k_scale, v_scale), the same kernel writes the normalised, rotated k and
  the value rows to k_buffer[cache_loc[i]] and v_buffer[cache_loc[i]]: caches flat [slots, H, D] (or
  [slots, H * D]) or paged [pages, page_size, H, D], in the inputs' dtype or float8_e4m3fn with
  per-tensor scales (q = saturate(round_to_nearest_even(x / scale))).

A token whose position is outside [0, max_position) is skipped entirely (its q and k stay as they were);
a location outside the cache skips that token's cache write only. No check costs a synchronisation.
The C++ entry points check every argument before they launch and name the bad one (TypeError for a dtype,
ValueError for a shape, stride, device or value). The op is a torch custom op (torch.ops.jitkern.*)."""

from __future__ import annotations

import math

from .._torch import compiling, torch
from ._declare import Family, TorchOp
from ._dtype_family import DtypeFamily
from ._shapes import as_rows
from .rope import _cache, _scale, _store_export

_ARGS = "positions, q, k, q_weight, k_weight, cos_sin_cache, eps, weight_offset, is_neox, mrope_t, mrope_h, mrope_w, mrope_interleaved"
_STORE_ARGS = f"{_ARGS}, value, k_buffer, v_buffer, cache_loc, k_scale, v_scale"
_FAMILY = DtypeFamily("qknorm_rope", "jitkern_qknorm_rope::QkNormRopeOps", {
    "apply": _ARGS,
    "apply_store": _STORE_ARGS,
    "apply_store_fp8": _STORE_ARGS,}, compile_seconds={"apply": 3.0, "apply_store": 3.2, "apply_store_fp8": 4.0},  # estimates: the order parallel builds start in
    device_parts=dict.fromkeys(("apply", "apply_store", "apply_store_fp8"), 3))  # csrc/qknorm_rope.cuh's three kernel kinds
FAMILY = Family(_FAMILY)
spec = _FAMILY.spec
_FUNCTIONS = _FAMILY.functions
_qknorm_rope_module = _FAMILY.exports  # the per-dtype exports, for tests and benchmarks


def _heads(x, tokens: int, head_size: int, public: str, name: str):
    """q, k or v as the [T, H, D] view the kernels take: [T, H * D] and [..., H * D] split their last
    dimension, [..., H, D] flatten their leading ones. Non-tensors pass (C++ names them)."""
    if not isinstance(x, torch.Tensor) or not isinstance(head_size, int) or head_size <= 0:
        return x
    if x.dim() == 3 and x.shape[0] == tokens and x.shape[2] == head_size:
        return x
    if x.dim() >= 3 and x.shape[-1] == head_size and math.prod(x.shape[:-2]) == tokens:
        return as_rows(x, public, name, writes=True, trailing=2)
    rows = as_rows(x, public, name, writes=True)
    if rows.dim() != 2 or rows.shape[1] % head_size != 0:
        raise ValueError(f"{public}(): {name} of shape {tuple(x.shape)} is not [T, H * D] or [T, H, D] with D = {head_size} "
                         f"(q_weight's size)")
    return rows.view(rows.shape[0], rows.shape[1] // head_size, head_size)


def _section_list(mrope_section, public: str = "fused_qknorm_rope") -> list:
    """mrope_section checked: None or empty (no mRoPE), or three ints (t, h, w)."""
    if mrope_section is None:
        return []
    if not isinstance(mrope_section, (list, tuple)) or not all(isinstance(n, int) and not isinstance(n, bool) for n in mrope_section):
        raise TypeError(f"{public}(): mrope_section must be a list or tuple of three ints (t, h, w), got {mrope_section!r}")
    if len(mrope_section) not in (0, 3):
        raise ValueError(f"{public}(): mrope_section must be three ints (t, h, w), got {mrope_section!r}")
    return list(mrope_section)


def _sections(mrope_section) -> tuple:
    """mrope_section as the three counts the kernels take ((0, 0, 0): none)."""
    return tuple(_section_list(mrope_section)) or (0, 0, 0)


def _qknorm_rope(positions, q, k, q_weight, k_weight, cos_sin_cache, eps, is_neox, mrope_section, mrope_interleaved, weight_offset, store,
                 public="fused_qknorm_rope"):
    """The eager path; store: None or (value, k_cache, v_cache, cache_loc, k_scale, v_scale)."""
    export = "apply" if store is None else _store_export(store[1])
    fn = _FUNCTIONS.get((export, getattr(q, "dtype", None))) or _FAMILY.function(export, q, public, "q")
    mrope = _sections(mrope_section)
    if isinstance(positions, torch.Tensor):  # [T] (batched: flattened) or, for mRoPE, [3, T]
        if (mrope == (0, 0, 0) and positions.dim() == 2 and positions.shape[0] == 3 and isinstance(q, torch.Tensor) and q.dim() >= 2
                and q.shape[0] == positions.shape[1] and not (q.dim() >= 3 and q.shape[0] == 3 and q.shape[1] == positions.shape[1])):
            # q has T tokens, not the 3T of a batch of 3 (q [3, T, ...]): mRoPE's positions
            raise ValueError(f"{public}(): positions of shape {tuple(positions.shape)} are mRoPE's [3, T] for q's {q.shape[0]} tokens: "
                             f"pass mrope_section (three frequency counts summing to half the rotary dim)")
        if mrope != (0, 0, 0) and positions.dim() >= 2 and positions.shape[0] == 3:
            positions = positions.reshape(3, -1)
        elif positions.dim() != 1:
            positions = positions.reshape(-1)
    tokens = positions.shape[-1] if isinstance(positions, torch.Tensor) and positions.dim() > 0 else -1
    d = q_weight.shape[-1] if isinstance(q_weight, torch.Tensor) and q_weight.dim() == 1 else None
    q, k = _heads(q, tokens, d, public, "q"), _heads(k, tokens, d, public, "k")
    if store is None:
        fn(positions, q, k, q_weight, k_weight, cos_sin_cache, eps, float(weight_offset), bool(is_neox), *mrope, bool(mrope_interleaved))
        return
    value, k_cache, v_cache, cache_loc, k_scale, v_scale = store
    fn(positions, q, k, q_weight, k_weight, cos_sin_cache, eps, float(weight_offset), bool(is_neox), *mrope, bool(mrope_interleaved),
       _heads(value, tokens, d, public, "value"), _cache(k_cache),
       _cache(v_cache), cache_loc, _scale(k_scale, "k_scale", public), _scale(v_scale, "v_scale", public))


# The torch custom ops torch.compile traces the op as (their implementations are the eager path).
_SCHEMA = ("Tensor positions, Tensor(a!) q, Tensor(b!) k, Tensor q_weight, Tensor k_weight, Tensor cos_sin_cache, float eps, "
           "bool is_neox, int[] mrope_section, bool mrope_interleaved, float weight_offset")


@FAMILY.op("apply", "apply_store", "apply_store_fp8", torch=(
    TorchOp("qknorm_rope", f"({_SCHEMA}) -> ()", lambda *args: _qknorm_rope(*args, None)),
    TorchOp("qknorm_rope_store_kv",
            f"({_SCHEMA}, Tensor value, Tensor(c!) k_cache, Tensor(d!) v_cache, Tensor cache_loc, float k_scale, float v_scale) -> ()",
            lambda *args: _qknorm_rope(*args[:11], args[11:]))))
def fused_qknorm_rope(positions, q, k, q_weight, k_weight, cos_sin_cache, eps: float = 1e-6, is_neox: bool = True,
                      fused_set_kv_buffer_arg=None, *, mrope_section=None, mrope_interleaved: bool = False,
                      weight_offset: float = 0.0) -> None:
    """Per-head RMSNorm of q (q_weight) and k (k_weight), then RoPE, in place; with `fused_set_kv_buffer_arg`,
    also writes the resulting k and the value rows to the cache rows at its cache_loc. mRoPE: positions
    [3, T] (t, h, w) and mrope_section (t, h, w frequency counts summing to R/2), contiguous sections or
    `mrope_interleaved`; positions [T] with mrope_section rotate as plain RoPE (text tokens). The norm
    multiplies by weight + weight_offset (1.0 for Gemma's (1 + w) norms)."""
    a = fused_set_kv_buffer_arg
    mrope = _section_list(mrope_section)
    if compiling():
        if a is None:
            torch.ops.jitkern.qknorm_rope(positions, q, k, q_weight, k_weight, cos_sin_cache, eps, is_neox, mrope, mrope_interleaved,
                                          weight_offset)
        else:
            torch.ops.jitkern.qknorm_rope_store_kv(positions, q, k, q_weight, k_weight, cos_sin_cache, eps, is_neox, mrope, mrope_interleaved,
                                                   weight_offset, a.value, a.k_buffer, a.v_buffer, a.cache_loc,
                                                   _scale(a.k_scale, "k_scale", "fused_qknorm_rope"), _scale(a.v_scale, "v_scale", "fused_qknorm_rope"))
        return
    store = None if a is None else (a.value, a.k_buffer, a.v_buffer, a.cache_loc, a.k_scale, a.v_scale)
    _qknorm_rope(positions, q, k, q_weight, k_weight, cos_sin_cache, eps, is_neox, mrope, mrope_interleaved, weight_offset, store)
