"""KV-cache transfer (csrc/kv_transfer.cuh), the HiCache kernels of the reference framework (SGLang): for each i, row indices_src[i] of
each source buffer goes to row indices_dst[i] of the destination buffer, for one layer or all layers.

- Buffers on the GPU or in pinned host memory, either direction, or GPU to GPU. Pageable host memory is
  refused (ValueError: pin it). Any dtype; a row is any multiple of 4 bytes and contiguous; rows strided.
- Layouts: "layer_first" (a layer is [rows, *row]; for all layers, a uint64/int64 table of each layer's base
  address) and "page_first" ([pages, page_size, *row] for one layer, [pages, layers, page_size, *row] for
  all: one contiguous chunk per page across the layers).
- K and V (`v_*` given) or one MLA buffer (`v_*` None, or the `_mla` forms).
- Mechanism: indices on the GPU run an SM kernel on the current stream (a transfer touching host memory uses
  `block_quota` CTAs, default 2, or 4 when one layer's host rows lie in more than 512 MiB (rows scattered
  that widely need more CTAs to keep PCIe busy); GPU to GPU runs on the whole GPU unless `block_quota` says). Indices on the
  host: runs of rows adjacent on both sides merge into one copy, and a host transfer whose copies average
  64 KiB or more goes to the copy engines (cudaMemcpyBatchAsync, no SM); anything else to the SM kernel.
- Out-of-range indices are skipped; `validate=True` raises IndexError naming the first one before anything
  moves (it synchronises).

Each op is a torch custom op (torch.ops.jitkern.*); the reference's names and keywords
(`transfer_hicache_one_layer`, `transfer_hicache_all_layer`) work too."""

from __future__ import annotations

from .._torch import ModuleExports, compiling, torch
from ..jit import JitSpec
from ._declare import Family, TorchOp, wrapper
from ._dtype_family import package_spec

LAYOUTS = {"layer_first": 0, "page_first": 1}  # csrc/kv_transfer.cuh's KvTransfer::Layout
_EXPORTS = {
    "one_layer": "Tensor(a!) k_dst, Tensor(b!)? v_dst, Tensor indices_dst, Tensor k_src, Tensor? v_src, Tensor indices_src, "
                 "int dst_layout, int src_layout, int block_quota, bool validate",
    "all_layers": "Tensor(a!) k_dst, Tensor(b!)? v_dst, Tensor indices_dst, Tensor k_src, Tensor? v_src, Tensor indices_src, "
                  "int dst_row_stride_bytes, int src_row_stride_bytes, int row_bytes, int dst_rows, int src_rows, int block_quota, "
                  "bool validate",
}


def spec() -> JitSpec:
    """The module of the transfer ops (one for every dtype, row size and layout)."""
    return package_spec("kv_transfer", cuda_file="kv_transfer.cuh",
                        wrappers=[wrapper(op, f"jitkern_kv_transfer::KvTransfer::{op}", params) for op, params in _EXPORTS.items()],
                        compile_seconds=2.8)  # H100 host, 16 builds at once


_function = ModuleExports(spec, _EXPORTS, "kv_transfer")
FAMILY = Family(_function)


def _layout(value: str, name: str) -> int:
    code = LAYOUTS.get(value) if isinstance(value, str) else None
    if code is None:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, LAYOUTS))}, got {value!r}")
    return code


def _count(value, name: str, default: int = -1) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return value


# The torch custom ops take the exports' arguments (layouts as their codes) and call them as they are.
@FAMILY.op("one_layer", torch=(TorchOp("transfer_kv_one_layer", implementation=lambda *args: _function("one_layer")(*args),
                                        export="one_layer"),))
def transfer_kv_one_layer(k_dst, v_dst, indices_dst, k_src, v_src, indices_src, *, block_quota: int | None = None,
                          dst_layout: str = "layer_first", src_layout: str = "layer_first", validate: bool = False) -> None:
    """Copies row indices_src[i] of k_src/v_src to row indices_dst[i] of k_dst/v_dst, for every i (one layer;
    v_dst and v_src None for MLA)."""
    args = (k_dst, v_dst, indices_dst, k_src, v_src, indices_src, _layout(dst_layout, "dst_layout"), _layout(src_layout, "src_layout"),
            _count(block_quota, "block_quota", 0), bool(validate))
    if compiling():
        return torch.ops.jitkern.transfer_kv_one_layer(*args)
    _function("one_layer")(*args)


@FAMILY.op("all_layers", torch=(TorchOp("transfer_kv_all_layers", implementation=lambda *args: _function("all_layers")(*args),
                                          export="all_layers"),))
def transfer_kv_all_layers(k_ptrs_dst, v_ptrs_dst, indices_dst, k_ptrs_src, v_ptrs_src, indices_src, *,
                           src_row_stride_bytes: int | None = None, dst_row_stride_bytes: int | None = None,
                           row_bytes: int | None = None, src_rows: int | None = None, dst_rows: int | None = None,
                           block_quota: int | None = None, validate: bool = False) -> None:
    """transfer_kv_one_layer for every layer in one launch. Each side is a table of the layers' base
    addresses (uint64/int64 [layers], layer-first, rows `*_row_stride_bytes` apart; `*_rows` bounds its
    indices, unbounded when None) or a page-first tensor [pages, layers, page_size, *row]. `row_bytes` matters
    only when both sides are tables: by default a row is then as long as the (equal) strides."""
    args = (k_ptrs_dst, v_ptrs_dst, indices_dst, k_ptrs_src, v_ptrs_src, indices_src, _count(dst_row_stride_bytes, "dst_row_stride_bytes"),
            _count(src_row_stride_bytes, "src_row_stride_bytes"), _count(row_bytes, "row_bytes"), _count(dst_rows, "dst_rows"),
            _count(src_rows, "src_rows"), _count(block_quota, "block_quota", 0), bool(validate))
    if compiling():
        return torch.ops.jitkern.transfer_kv_all_layers(*args)
    _function("all_layers")(*args)


@FAMILY.op("one_layer")
def transfer_kv_one_layer_mla(dst, indices_dst, src, indices_src, **options) -> None:
    """transfer_kv_one_layer for one buffer per layer (MLA's latent cache)."""
    transfer_kv_one_layer(dst, None, indices_dst, src, None, indices_src, **options)


@FAMILY.op("all_layers")
def transfer_kv_all_layers_mla(ptrs_dst, indices_dst, ptrs_src, indices_src, **options) -> None:
    """transfer_kv_all_layers for one buffer per layer (MLA's latent cache)."""
    transfer_kv_all_layers(ptrs_dst, None, indices_dst, ptrs_src, None, indices_src, **options)


# The reference framework's (SGLang's) names and keywords. `unroll` is accepted and ignored: the kernel picks its own shape.
@FAMILY.op("one_layer")
def transfer_hicache_one_layer(k_cache_dst, v_cache_dst, indices_dst, k_cache_src, v_cache_src, indices_src, *,
                               element_dim: int | None = None, unroll: int | None = None, block_quota: int | None = None) -> None:
    """The reference's one-layer transfer: the caches are viewed as [-1, element_dim] (default: their last dimension)."""
    element_dim = element_dim or k_cache_dst.size(-1)
    k_cache_dst, v_cache_dst, k_cache_src, v_cache_src = (t.view(-1, element_dim) for t in (k_cache_dst, v_cache_dst, k_cache_src, v_cache_src))
    transfer_kv_one_layer(k_cache_dst, v_cache_dst, indices_dst, k_cache_src, v_cache_src, indices_src, block_quota=block_quota)


@FAMILY.op("all_layers")
def transfer_hicache_all_layer(k_ptr_dst, v_ptr_dst, indices_dst, k_ptr_src, v_ptr_src, indices_src, *, kv_cache_src_stride_bytes: int,
                               kv_cache_dst_stride_bytes: int, element_size: int | None = None, unroll: int | None = None,
                               block_quota: int | None = None) -> None:
    """The reference's all-layer transfer over pointer tables; the row is `element_size` bytes (default: the stride,
    when both sides have the same)."""
    transfer_kv_all_layers(k_ptr_dst, v_ptr_dst, indices_dst, k_ptr_src, v_ptr_src, indices_src,
                           src_row_stride_bytes=kv_cache_src_stride_bytes, dst_row_stride_bytes=kv_cache_dst_stride_bytes,
                           row_bytes=element_size, block_quota=block_quota)
