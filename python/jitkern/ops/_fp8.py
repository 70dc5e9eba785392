"""The 8-bit outputs' conventions shared by the families that write them (quant, act): fp8 tensors passed
to C++ as their bytes, the one-element scale, and the per-group scale layouts FP8 GEMMs read."""

from __future__ import annotations

from .._torch import torch
from ._shapes import as_rows


def _bytes(q, name: str, public: str, allow_int8: bool = False, flatten: bool = True):
    """The output tensor q as [rows, H] for C++ (flatten=False: in its own shape): fp8 as its bytes (uint8),
    int8 as it is. A view, so that what C++ writes lands in q."""
    allowed = (torch.float8_e4m3fn, torch.int8) if allow_int8 else (torch.float8_e4m3fn,)
    if not isinstance(q, torch.Tensor) or q.dtype not in allowed:
        got = q.dtype if isinstance(q, torch.Tensor) else type(q).__name__
        raise TypeError(f"{public}(): {name} must be a float8_e4m3fn{' or int8' if allow_int8 else ''} tensor, got {got}")
    q2 = as_rows(q, public, name, writes=True) if flatten else q
    return q2.view(torch.uint8) if q.dtype == torch.float8_e4m3fn else q2


def _check_scale(scale, public: str, name: str = "scale"):
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"{public}(): {name} must be a float32 tensor of one element, got {type(scale).__name__}")
    if scale.numel() != 1:
        raise ValueError(f"{public}(): {name} must be a float32 tensor of one element, got shape {tuple(scale.shape)}")
    return scale.reshape(1) if scale.dim() != 1 else scale


def group_scales_like(x, group_size: int, *, column_major_scales: bool = False, scale_tma_aligned: bool = False,
                      scale_ue8m0: bool = False):
    """An uninitialised scale tensor for per_token_group_quant_8bit of x [..., H]:
    fp32 [rows, H / group_size] (row-major: [..., H / group_size]), or with scale_ue8m0 int32
    [rows, ceil(H / group_size / 4)], four UE8M0 exponents per int32 (group 4k + b in byte b).
    column_major_scales: stored column by column (a [groups, rows] buffer, transposed); scale_tma_aligned:
    each column padded to a multiple of 16 bytes (what TMA loads need)."""
    return group_scales_for(x, group_size, column_major_scales, scale_tma_aligned, scale_ue8m0, "group_scales_like")


def group_scales_for(x, group_size: int, column_major_scales: bool, scale_tma_aligned: bool, scale_ue8m0: bool, public: str):
    """group_scales_like's tensor for the op `public` (named in its errors)."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    padded = scale_column_rows(rows, column_major_scales, scale_tma_aligned, public)
    groups = x.shape[-1] // group_size if group_size > 0 else 0  # a bad group_size is the op's to refuse, by name
    dtype = torch.int32 if scale_ue8m0 else torch.float32
    cols = -(-groups // 4) if scale_ue8m0 else groups
    if not column_major_scales:
        shape = (*x.shape[:-1], cols) if not scale_ue8m0 else (rows, cols)
        return torch.empty(shape, dtype=dtype, device=x.device)
    return torch.empty((cols, padded), dtype=dtype, device=x.device)[:, :rows].t()


def check_scales_format(output_s, scale_ue8m0: bool, public: str) -> None:
    """A given output_s holds the format scale_ue8m0 names: int32 words of four UE8M0 exponents with it,
    float32 without (its layout is its strides')."""
    if isinstance(output_s, torch.Tensor) and (output_s.dtype == torch.int32) != bool(scale_ue8m0):
        want = "int32 (four UE8M0 exponents a word)" if scale_ue8m0 else "float32"
        raise ValueError(f"{public}(): output_s must be {want} with scale_ue8m0={bool(scale_ue8m0)}, got {output_s.dtype}")


def check_group_size(group_size, public: str) -> None:
    """A group size is a Python int (its value is the C++ entry point's to check, by name)."""
    if type(group_size) is not int:
        raise TypeError(f"{public}(): group_size must be an int, got {type(group_size).__name__}")


def scale_column_rows(rows: int, column_major_scales: bool, scale_tma_aligned: bool, public: str) -> int:
    """The length of a column-major scale tensor's columns for `rows` rows: padded to 16 bytes (4 four-byte
    scales) with scale_tma_aligned, which applies to column-major scales only."""
    if scale_tma_aligned and not column_major_scales:
        raise ValueError(f"{public}(): scale_tma_aligned applies to column_major_scales=True only")
    return -(-rows // 4) * 4 if scale_tma_aligned else rows
