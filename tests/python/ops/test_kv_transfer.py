"""KV-cache transfer on the GPU: every direction (GPU <-> pinned host, GPU <-> GPU), layer-first and
page-first, one layer and 61, K/V and MLA, row sizes from 4 bytes to 4 KiB, int32/int64 indices with
duplicate sources and permuted destinations, strided caches, 0 indices, out-of-range indices (skipped, or
IndexError with validate=True), pageable host memory refused, host indices (copy engines), CUDA graph
capture, the `transfer_hicache_*` names (SGLang's keywords). Every result is compared byte for byte with a torch reference."""

import pytest

pytestmark = pytest.mark.gpu

ROW_BYTES = [4, 12, 16, 48, 576, 1152, 2048, 4096]
DIRECTIONS = ["gpu->gpu", "gpu->host", "host->gpu"]


def _torch():
    import torch

    return torch


def _ops():
    import jitkern.ops

    return jitkern.ops


def _cache(shape_rows, row_bytes, where, *, extra_bytes=0, dtype=None, seed=0):
    """Random bytes as a cache [*shape_rows, row] of `dtype` (default bf16, float32 when row_bytes % 4 == 0
    is all that holds) whose rows are `extra_bytes` further apart than their size (a strided cache)."""
    torch = _torch()
    dtype = dtype or torch.bfloat16
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (*shape_rows, row_bytes + extra_bytes), dtype=torch.uint8, generator=g)
    if where == "gpu":
        raw = raw.cuda()
    elif where == "host":
        raw = raw.pin_memory()
    return raw.view(dtype)[..., : row_bytes // dtype.itemsize]


def _bytes(t):
    return t.view(_torch().uint8).cpu()


def _indices(n, rows_src, rows_dst, dtype, *, seed=0, where="gpu"):
    """Sources with duplicates, destinations a permutation (no row written twice)."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, rows_src, (n,), generator=g)
    dst = torch.randperm(rows_dst, generator=g)[:n]
    src, dst = src.to(dtype), dst.to(dtype)
    if where == "gpu":
        return src.cuda(), dst.cuda()
    return src, dst


def _expect(dst_before, src, idx_dst, idx_src, flat=lambda t: t):
    """The reference: row idx_src[i] of src to row idx_dst[i] of dst where both are in range."""
    exp, s = flat(_bytes(dst_before)).clone(), flat(_bytes(src))
    d_i, s_i = idx_dst.cpu().long(), idx_src.cpu().long()
    ok = (d_i >= 0) & (d_i < exp.shape[0]) & (s_i >= 0) & (s_i < s.shape[0])
    exp[d_i[ok]] = s[s_i[ok]]
    return exp


def _sides(direction):
    """(where the destination is, where the source is)."""
    src, dst = direction.split("->")
    return dst, src


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("row_bytes", ROW_BYTES)
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_one_layer_every_direction_and_row_size(direction, row_bytes, index_dtype):
    torch = _torch()
    dst_where, src_where = _sides(direction)
    rows_src, rows_dst, n = 300, 257, 200
    k_src, v_src = _cache((rows_src,), row_bytes, src_where, seed=1), _cache((rows_src,), row_bytes, src_where, seed=2)
    k_dst, v_dst = _cache((rows_dst,), row_bytes, dst_where, seed=3), _cache((rows_dst,), row_bytes, dst_where, seed=4)
    idx_src, idx_dst = _indices(n, rows_src, rows_dst, getattr(torch, index_dtype))
    ek, ev = _expect(k_dst, k_src, idx_dst, idx_src), _expect(v_dst, v_src, idx_dst, idx_src)
    _ops().transfer_kv_one_layer(k_dst, v_dst, idx_dst, k_src, v_src, idx_src)
    torch.cuda.synchronize()
    assert torch.equal(_bytes(k_dst), ek) and torch.equal(_bytes(v_dst), ev)


@pytest.mark.parametrize("to_host", [True, False])
def test_scattered_rows_over_a_large_host_pool(to_host):
    # K and V pools of 320 MiB each: past the span where the default quota changes (csrc/kv_transfer.cuh).
    torch = _torch()
    pool_rows, gpu_rows, n, row = 163840, 8192, 8192, 2048
    host = [torch.zeros(pool_rows, row, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
    gpu = [torch.randint(1, 256, (gpu_rows, row), dtype=torch.uint8, device="cuda") for _ in range(2)]
    if not to_host:
        for h, g in zip(host, gpu):
            h.copy_(torch.randint(1, 256, (pool_rows, row), dtype=torch.uint8, device="cuda"))
            g.zero_()
    g_idx = torch.randperm(gpu_rows, device="cuda")[:n]
    h_idx = torch.randperm(pool_rows, device="cuda")[:n]
    if to_host:
        expected = [g[g_idx].cpu() for g in gpu]
        _ops().transfer_kv_one_layer(host[0], host[1], h_idx, gpu[0], gpu[1], g_idx)
        torch.cuda.synchronize()
        for h, e in zip(host, expected):
            assert torch.equal(h[h_idx.cpu()], e)
            assert int((h != 0).any(dim=1).sum()) == n, "rows outside the indices were written"
    else:
        expected = [h[h_idx.cpu()].cuda() for h in host]
        _ops().transfer_kv_one_layer(gpu[0], gpu[1], g_idx, host[0], host[1], h_idx)
        torch.cuda.synchronize()
        for g, e in zip(gpu, expected):
            assert torch.equal(g[g_idx], e)
            assert int((g != 0).any(dim=1).sum()) == n, "rows outside the indices were written"


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("row_bytes,extra", [(12, 4), (48, 16), (2048, 512), (576, 8)])
def test_strided_caches(direction, row_bytes, extra):
    torch = _torch()
    dst_where, src_where = _sides(direction)
    k_src, v_src = (_cache((128,), row_bytes, src_where, extra_bytes=extra, seed=s) for s in (1, 2))
    k_dst, v_dst = (_cache((96,), row_bytes, dst_where, extra_bytes=2 * extra, seed=s) for s in (3, 4))
    idx_src, idx_dst = _indices(64, 128, 96, torch.int64, seed=5)
    ek, ev = _expect(k_dst, k_src, idx_dst, idx_src), _expect(v_dst, v_src, idx_dst, idx_src)
    _ops().transfer_kv_one_layer(k_dst, v_dst, idx_dst, k_src, v_src, idx_src)
    torch.cuda.synchronize()
    assert torch.equal(_bytes(k_dst), ek) and torch.equal(_bytes(v_dst), ev)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_mla_one_buffer(direction):
    torch = _torch()
    dst_where, src_where = _sides(direction)
    src, dst = _cache((500,), 1152, src_where, seed=1), _cache((400,), 1152, dst_where, seed=2)
    idx_src, idx_dst = _indices(333, 500, 400, torch.int32, seed=3)
    expected = _expect(dst, src, idx_dst, idx_src)
    _ops().transfer_kv_one_layer_mla(dst, idx_dst, src, idx_src)
    torch.cuda.synchronize()
    assert torch.equal(_bytes(dst), expected)


def test_zero_indices_touch_nothing():
    torch = _torch()
    k, v = _cache((16,), 64, "gpu", seed=1), _cache((16,), 64, "gpu", seed=2)
    k2, v2 = _cache((16,), 64, "host", seed=3), _cache((16,), 64, "host", seed=4)
    before = _bytes(k2).clone(), _bytes(v2).clone()
    empty = torch.empty(0, dtype=torch.int64, device="cuda")
    _ops().transfer_kv_one_layer(k2, v2, empty, k, v, empty, validate=True)
    torch.cuda.synchronize()
    assert torch.equal(_bytes(k2), before[0]) and torch.equal(_bytes(v2), before[1])


@pytest.mark.parametrize("where", ["gpu", "host-indices"])
def test_out_of_range_indices_are_skipped(where):
    torch = _torch()
    k_src, v_src = _cache((64,), 256, "gpu", seed=1), _cache((64,), 256, "gpu", seed=2)
    k_dst, v_dst = _cache((32,), 256, "host", seed=3), _cache((32,), 256, "host", seed=4)
    idx_src = torch.tensor([0, 64, 5, -1, 63, 7, 2**31 - 1], dtype=torch.int32)
    idx_dst = torch.tensor([1, 2, 32, 3, 4, -7, 5], dtype=torch.int32)
    if where == "gpu":
        idx_src, idx_dst = idx_src.cuda(), idx_dst.cuda()
    ek, ev = _expect(k_dst, k_src, idx_dst, idx_src), _expect(v_dst, v_src, idx_dst, idx_src)
    _ops().transfer_kv_one_layer(k_dst, v_dst, idx_dst, k_src, v_src, idx_src)
    torch.cuda.synchronize()
    assert torch.equal(_bytes(k_dst), ek) and torch.equal(_bytes(v_dst), ev)
    assert not torch.equal(ek, _bytes(_cache((32,), 256, "host", seed=3)))  # the valid rows did move


@pytest.mark.parametrize("where", ["gpu", "host-indices"])
def test_validate_names_the_first_bad_index_and_moves_nothing(where):
    torch = _torch()
    k_src, v_src = _cache((64,), 256, "gpu", seed=1), _cache((64,), 256, "gpu", seed=2)
    k_dst, v_dst = _cache((32,), 256, "gpu", seed=3), _cache((32,), 256, "gpu", seed=4)
    before = _bytes(k_dst).clone()
    idx_src = torch.tensor([0, 1, 2, 3, 99, 5, 100])
    idx_dst = torch.tensor([0, 1, 2, 3, 4, 5, 6])
    if where == "gpu":
        idx_src, idx_dst = idx_src.cuda(), idx_dst.cuda()
    with pytest.raises(IndexError, match=r"indices_src\[4\] = 99 is out of range for k_src, which has 64 rows"):
        _ops().transfer_kv_one_layer(k_dst, v_dst, idx_dst, k_src, v_src, idx_src, validate=True)
    torch.cuda.synchronize()
    assert torch.equal(_bytes(k_dst), before)
    idx_dst[6] = 32
    with pytest.raises(IndexError, match=r"indices_dst\[6\] = 32 is out of range for k_dst, which has 32 rows"):
        _ops().transfer_kv_one_layer(k_dst, v_dst, idx_dst, k_src, v_src, idx_dst, validate=True)


def test_pageable_host_memory_is_refused():
    torch = _torch()
    k_src, v_src = _cache((8,), 64, "gpu"), _cache((8,), 64, "gpu")
    k_dst, v_dst = _cache((8,), 64, "cpu"), _cache((8,), 64, "cpu")
    idx = torch.arange(4, device="cuda")
    with pytest.raises(ValueError, match="k_dst is pageable host memory.*pin_memory"):
        _ops().transfer_kv_one_layer(k_dst, v_dst, idx, k_src, v_src, idx)


def test_argument_errors_name_the_argument():
    torch = _torch()
    k, v = _cache((8,), 64, "gpu"), _cache((8,), 64, "gpu")
    idx = torch.arange(4, device="cuda")
    with pytest.raises(ValueError, match="rows differ"):
        _ops().transfer_kv_one_layer(_cache((8,), 32, "gpu"), _cache((8,), 32, "gpu"), idx, k, v, idx)
    with pytest.raises(ValueError, match="v_dst is None but v_src is not"):
        _ops().transfer_kv_one_layer(k, None, idx, k, v, idx)
    with pytest.raises(TypeError, match="indices_src"):
        _ops().transfer_kv_one_layer(k, v, idx, k, v, idx.float())
    with pytest.raises(ValueError, match=r"block_quota must be in \[1, 2\^22\]"):
        _ops().transfer_kv_one_layer(k, v, idx, k, v, idx, block_quota=1 << 23)
    with pytest.raises(ValueError, match="src_layout"):
        _ops().transfer_kv_one_layer(k, v, idx, k, v, idx, src_layout="pages")
    with pytest.raises(ValueError, match="multiple of 4 bytes"):
        _ops().transfer_kv_one_layer(_cache((8,), 6, "gpu"), _cache((8,), 6, "gpu"), idx, _cache((8,), 6, "gpu"),
                                     _cache((8,), 6, "gpu"), idx)
    with pytest.raises(ValueError, match="k_dst overlaps itself"):  # every row of the destination one row (stride 0)
        _ops().transfer_kv_one_layer(_cache((1,), 64, "gpu").expand(8, 32), _cache((1,), 64, "gpu").expand(8, 32), idx, k, v, idx)
    with pytest.raises(ValueError, match="k_dst and v_dst must not overlap"):
        _ops().transfer_kv_one_layer(k, k, idx, k, v, idx)
    odd = [_cache((8,), 64, "gpu", extra_bytes=2) for _ in range(2)]  # rows 66 bytes apart: not 4-byte words
    with pytest.raises(ValueError, match="k_dst: the SM copy moves 4-byte words"):
        _ops().transfer_kv_one_layer(odd[0], odd[1], idx, k, v, idx)
    tables = [_table([_cache((8,), 64, "gpu", seed=b)]) for b in range(2)]
    with pytest.raises(ValueError, match="k_dst: rows of 128 bytes do not fit its row stride of 64 bytes"):
        _ops().transfer_kv_all_layers(tables[0], tables[1], idx, tables[0], tables[1], idx, src_row_stride_bytes=64, dst_row_stride_bytes=64,
                                      row_bytes=128, src_rows=8, dst_rows=8)


def _table(layers):
    torch = _torch()
    return torch.tensor([t.data_ptr() for t in layers], dtype=torch.int64, device="cuda")


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("num_layers", [1, 61])
@pytest.mark.parametrize("mla", [False, True])
def test_all_layers_layer_first_tables(direction, num_layers, mla):
    torch = _torch()
    dst_where, src_where = _sides(direction)
    row = 576 if mla else 1024
    buffers = 1 if mla else 2
    src = [[_cache((200,), row, src_where, seed=100 * b + l) for l in range(num_layers)] for b in range(buffers)]
    dst = [[_cache((150,), row, dst_where, seed=10000 + 100 * b + l) for l in range(num_layers)] for b in range(buffers)]
    idx_src, idx_dst = _indices(120, 200, 150, torch.int64, seed=7)
    expected = [[_expect(dst[b][l], src[b][l], idx_dst, idx_src) for l in range(num_layers)] for b in range(buffers)]
    tables_src, tables_dst = [_table(s) for s in src], [_table(d) for d in dst]
    if mla:
        _ops().transfer_kv_all_layers_mla(tables_dst[0], idx_dst, tables_src[0], idx_src, src_row_stride_bytes=row,
                                          dst_row_stride_bytes=row, src_rows=200, dst_rows=150)
    else:
        _ops().transfer_kv_all_layers(tables_dst[0], tables_dst[1], idx_dst, tables_src[0], tables_src[1], idx_src,
                                      src_row_stride_bytes=row, dst_row_stride_bytes=row, src_rows=200, dst_rows=150)
    torch.cuda.synchronize()
    for b in range(buffers):
        for l in range(num_layers):
            assert torch.equal(_bytes(dst[b][l]), expected[b][l]), f"buffer {b} layer {l}"


def _page_flat(t):
    """[pages, page_size, row] bytes -> [pages * page_size, row]."""
    return t.reshape(-1, t.shape[-1])


@pytest.mark.parametrize("to_host", [True, False])
@pytest.mark.parametrize("num_layers", [1, 61])
def test_all_layers_page_first_host(to_host, num_layers):
    """GPU layer-first (pointer tables) <-> host page-first [pages, layers, page_size, row] in one launch."""
    torch = _torch()
    row, page_size, pages, gpu_rows = 512, 16, 24, 400
    gpu = [[_cache((gpu_rows,), row, "gpu", seed=100 * b + l) for l in range(num_layers)] for b in range(2)]
    hostbuf = [_cache((pages, num_layers, page_size), row, "host", seed=5000 + b) for b in range(2)]
    host_rows = pages * page_size
    if to_host:
        idx_gpu, idx_host = _indices(200, gpu_rows, host_rows, torch.int32, seed=11)
        expected = [[_expect(hostbuf[b][:, l], gpu[b][l], idx_host, idx_gpu, _page_flat) for l in range(num_layers)] for b in range(2)]
        _ops().transfer_kv_all_layers(hostbuf[0], hostbuf[1], idx_host, _table(gpu[0]), _table(gpu[1]), idx_gpu,
                                      src_row_stride_bytes=row, src_rows=gpu_rows)
    else:
        idx_host, idx_gpu = _indices(200, host_rows, gpu_rows, torch.int32, seed=12)
        expected = [[_expect(gpu[b][l], _page_flat(hostbuf[b][:, l]), idx_gpu, idx_host) for l in range(num_layers)] for b in range(2)]
        _ops().transfer_kv_all_layers(_table(gpu[0]), _table(gpu[1]), idx_gpu, hostbuf[0], hostbuf[1], idx_host,
                                      dst_row_stride_bytes=row, dst_rows=gpu_rows)
    torch.cuda.synchronize()
    for b in range(2):
        for l in range(num_layers):
            got = _page_flat(_bytes(hostbuf[b][:, l])) if to_host else _bytes(gpu[b][l])
            assert torch.equal(got, expected[b][l]), f"buffer {b} layer {l}"


@pytest.mark.parametrize("to_host", [True, False])
def test_one_layer_page_first_host(to_host):
    torch = _torch()
    row, page_size, pages, layers, layer = 256, 8, 40, 3, 1
    gpu_k, gpu_v = _cache((300,), row, "gpu", seed=1), _cache((300,), row, "gpu", seed=2)
    host_k, host_v = (_cache((pages, layers, page_size), row, "host", seed=s) for s in (3, 4))
    hk, hv = host_k[:, layer], host_v[:, layer]
    if to_host:
        idx_gpu = torch.randint(0, 300, (150,), device="cuda")
        idx_host = torch.randperm(pages * page_size, device="cuda")[:150]
        ek, ev = _expect(hk, gpu_k, idx_host, idx_gpu, _page_flat), _expect(hv, gpu_v, idx_host, idx_gpu, _page_flat)
        _ops().transfer_kv_one_layer(hk, hv, idx_host, gpu_k, gpu_v, idx_gpu, dst_layout="page_first")
        torch.cuda.synchronize()
        assert torch.equal(_page_flat(_bytes(hk)), ek) and torch.equal(_page_flat(_bytes(hv)), ev)
        assert torch.equal(_bytes(host_k[:, 0]), _bytes(_cache((pages, layers, page_size), row, "cpu", seed=3)[:, 0]))
    else:
        idx_host = torch.randint(0, pages * page_size, (150,), device="cuda")
        idx_gpu = torch.randperm(300, device="cuda")[:150]
        ek = _expect(gpu_k, _page_flat(hk.cpu()), idx_gpu, idx_host)
        ev = _expect(gpu_v, _page_flat(hv.cpu()), idx_gpu, idx_host)
        _ops().transfer_kv_one_layer(gpu_k, gpu_v, idx_gpu, hk, hv, idx_host, src_layout="page_first")
        torch.cuda.synchronize()
        assert torch.equal(_bytes(gpu_k), ek) and torch.equal(_bytes(gpu_v), ev)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("contiguous_runs", [False, True])
def test_host_indices(direction, contiguous_runs):
    """Runs of adjacent rows go to the copy engines (host transfers), single rows to the kernel."""
    torch = _torch()
    dst_where, src_where = _sides(direction)
    k_src, v_src = _cache((512,), 2048, src_where, seed=1), _cache((512,), 2048, src_where, seed=2)
    k_dst, v_dst = _cache((512,), 2048, dst_where, seed=3), _cache((512,), 2048, dst_where, seed=4)
    if contiguous_runs:  # pages of 16 adjacent rows: merged into one copy each
        idx_src = (torch.randperm(32)[:20].repeat_interleave(16) * 16 + torch.arange(16).repeat(20))
        idx_dst = (torch.randperm(32)[:20].repeat_interleave(16) * 16 + torch.arange(16).repeat(20))
    else:
        idx_src, idx_dst = _indices(300, 512, 512, torch.int64, seed=9, where="cpu")
    ek, ev = _expect(k_dst, k_src, idx_dst, idx_src), _expect(v_dst, v_src, idx_dst, idx_src)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        _ops().transfer_kv_one_layer(k_dst, v_dst, idx_dst, k_src, v_src, idx_src)
    stream.synchronize()
    assert torch.equal(_bytes(k_dst), ek) and torch.equal(_bytes(v_dst), ev)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_capture_in_a_cuda_graph(direction):
    torch = _torch()
    dst_where, src_where = _sides(direction)
    k_src, v_src = _cache((256,), 1024, src_where, seed=1), _cache((256,), 1024, src_where, seed=2)
    k_dst, v_dst = _cache((256,), 1024, dst_where, seed=3), _cache((256,), 1024, dst_where, seed=4)
    idx_src, idx_dst = _indices(100, 256, 256, torch.int64, seed=1)
    _ops().transfer_kv_one_layer(k_dst, v_dst, idx_dst, k_src, v_src, idx_src)  # loads the module before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _ops().transfer_kv_one_layer(k_dst, v_dst, idx_dst, k_src, v_src, idx_src)
    new_src, new_dst = _indices(100, 256, 256, torch.int64, seed=2)
    idx_src.copy_(new_src), idx_dst.copy_(new_dst)
    ek, ev = _expect(k_dst, k_src, idx_dst, idx_src), _expect(v_dst, v_src, idx_dst, idx_src)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(_bytes(k_dst), ek) and torch.equal(_bytes(v_dst), ev)


def test_the_reference_frameworks_names_and_keywords():
    """transfer_hicache_one_layer and transfer_hicache_all_layer, with SGLang's keywords, move what the transfer ops move."""
    torch = _torch()
    heads, dim = 8, 128
    k_src, v_src = (torch.randn(300, heads, dim, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    k_dst, v_dst = (torch.zeros(200, heads, dim, dtype=torch.bfloat16).pin_memory() for _ in range(2))
    idx_src, idx_dst = _indices(100, 300, 200, torch.int64, seed=4)
    ek = _expect(k_dst, k_src, idx_dst, idx_src)
    _ops().transfer_hicache_one_layer(k_dst, v_dst, idx_dst, k_src, v_src, idx_src, element_dim=heads * dim, unroll=4, block_quota=2)
    torch.cuda.synchronize()
    assert torch.equal(_bytes(k_dst), ek)
    layers = 4
    src = [[torch.randn(300, heads * dim, dtype=torch.bfloat16, device="cuda") for _ in range(layers)] for _ in range(2)]
    dst = [[torch.zeros(200, heads * dim, dtype=torch.bfloat16, device="cuda") for _ in range(layers)] for _ in range(2)]
    expected = [[_expect(dst[b][l], src[b][l], idx_dst, idx_src) for l in range(layers)] for b in range(2)]
    stride = heads * dim * 2
    _ops().transfer_hicache_all_layer(_table(dst[0]), _table(dst[1]), idx_dst, _table(src[0]), _table(src[1]), idx_src,
                                      kv_cache_src_stride_bytes=stride, kv_cache_dst_stride_bytes=stride)
    torch.cuda.synchronize()
    for b in range(2):
        for l in range(layers):
            assert torch.equal(_bytes(dst[b][l]), expected[b][l])


def test_traced_by_torch_compile():
    torch = _torch()
    k_src, v_src = (torch.randn(64, 256, device="cuda") for _ in range(2))
    idx_src, idx_dst = _indices(32, 64, 64, torch.int64, seed=3)

    def step(k_dst, v_dst):
        _ops().transfer_kv_one_layer(k_dst, v_dst, idx_dst, k_src, v_src, idx_src)
        return k_dst.sum() + v_dst.sum()

    k_dst, v_dst = torch.zeros(64, 256, device="cuda"), torch.zeros(64, 256, device="cuda")
    ek = _expect(k_dst, k_src, idx_dst, idx_src)
    total = torch.compile(step, fullgraph=True)(k_dst, v_dst)
    torch.cuda.synchronize()
    assert torch.equal(_bytes(k_dst), ek)
    assert torch.allclose(total, k_dst.sum() + v_dst.sum())
