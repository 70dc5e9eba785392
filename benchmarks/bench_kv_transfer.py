"""KV-cache transfer (jitkern.ops.transfer_kv_*): bandwidth host <-> GPU and GPU <-> GPU by mechanism (SM kernel
at a CTA quota, copy engines through cudaMemcpyBatchAsync) against a contiguous copy of the same bytes, all
61 layers in one launch, row sizes, scattered rows over host pools up to 16x the transfer (beside the reference
framework's kernel where its wheel is installed or REFERENCE_WHEEL names it), and how much a bf16 GEMM beside a
transfer slows down. Prints markdown; `bench_kv_transfer.py pool`: only the host-pool table.

GB/s counts the bytes transferred (K and V rows, one way). Indices: random sources and a random permutation
of destinations (no two adjacent), so no copy can be merged unless a row says so."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import copy_ceiling_text, copy_ceilings, environment, get_benchmark_range, reference_module, run_benchmark  # noqa: E402

from jitkern.ops import transfer_kv_all_layers, transfer_kv_one_layer, warmup  # noqa: E402

TOKENS = get_benchmark_range(32768, 8192)
ROW = 2048
LAYERS = 61
ALL_LAYER_TOKENS = get_benchmark_range(4096, 1024)


def _cache(rows, row_bytes, where):
    t = torch.empty(rows, row_bytes // 2, dtype=torch.bfloat16, device="cuda" if where == "gpu" else "cpu",
                    pin_memory=where == "host")
    t.view(torch.int16).random_(-1000, 1000) if where == "gpu" else t.view(torch.int16).copy_(torch.randint(-1000, 1000, t.shape))
    return t


def _indices(n, rows, *, device="cuda"):
    src = torch.randint(0, rows, (n,), device=device)
    dst = torch.randperm(rows, device=device)[:n]
    return src, dst


def _gbps(num_bytes, us):
    return num_bytes / (us * 1e-6) / 1e9


def _time(fn):
    return run_benchmark(fn, use_cudagraph=False)["median"]


def one_layer():
    n = TOKENS
    moved = 2 * n * ROW
    print(f"\n### One layer: {n} tokens x {ROW} B rows x (K, V) = {moved / 2**20:.0f} MiB\n")
    print("| direction | mechanism | us | GB/s | % of contiguous copy |")
    print("|---|---|---|---|---|")
    for direction in ("host->gpu", "gpu->host", "gpu->gpu"):
        src_where, dst_where = direction.split("->")
        k_src, v_src = _cache(n, ROW, src_where), _cache(n, ROW, src_where)
        k_dst, v_dst = _cache(n, ROW, dst_where), _cache(n, ROW, dst_where)
        flat_src, flat_dst = _cache(2 * n, ROW, src_where), _cache(2 * n, ROW, dst_where)
        contiguous = _time(lambda: flat_dst.copy_(flat_src, non_blocking=True))
        idx_src, idx_dst = _indices(n, n)
        cpu_src, cpu_dst = idx_src.cpu(), idx_dst.cpu()
        rows = []
        quotas = (1, 2, 4, 8) if direction != "gpu->gpu" else (4, 0)
        for q in quotas:
            us = _time(lambda: transfer_kv_one_layer(k_dst, v_dst, idx_dst, k_src, v_src, idx_src, block_quota=q or None))
            rows.append((f"SM kernel, {q} CTAs" if q else "SM kernel, default (whole GPU)", us))
        rows.append(("copy engines (host indices), every row a copy", _time(
            lambda: transfer_kv_one_layer(k_dst, v_dst, cpu_dst, k_src, v_src, cpu_src))))
        pages = torch.arange(n).view(-1, 64)
        run_src, run_dst = pages[torch.randperm(pages.shape[0])].flatten(), pages[torch.randperm(pages.shape[0])].flatten()
        rows.append(("copy engines (host indices), runs of 64 rows", _time(
            lambda: transfer_kv_one_layer(k_dst, v_dst, run_dst, k_src, v_src, run_src))))
        rows.append(("contiguous copy_ of the same bytes", contiguous))
        for name, us in rows:
            print(f"| {direction} | {name} | {us:.1f} | {_gbps(moved, us):.1f} | {100 * contiguous / us:.1f}% |")
        if direction == "gpu->gpu":
            gpu_default_us = dict(rows)["SM kernel, default (whole GPU)"]
        del k_src, v_src, k_dst, v_dst, flat_src, flat_dst
    ceilings = copy_ceilings()
    print(f"\nGPU copy ceiling (read + write, 1 GiB): {copy_ceiling_text(ceilings)}; gpu->gpu moves each byte read + "
          f"written, so its GB/s above is half the ceiling's count.")
    same = copy_ceilings(2 * moved)
    best = max(same.values())
    print(f"Copy ceiling of the same {moved / 2**20:.0f} MiB (read + write): {copy_ceiling_text(same)}; the default "
          f"gpu->gpu transfer moves {2 * _gbps(moved, gpu_default_us):.0f} GB/s = {100 * 2 * _gbps(moved, gpu_default_us) / best:.1f}% of it.")


def all_layers():
    n = ALL_LAYER_TOKENS
    moved = 2 * n * ROW * LAYERS
    print(f"\n### All {LAYERS} layers in one launch: {n} tokens x {ROW} B x (K, V) x {LAYERS} = {moved / 2**20:.0f} MiB\n")
    print("| direction | host layout | mechanism | us | GB/s |")
    print("|---|---|---|---|---|")
    gpu = [[_cache(n, ROW, "gpu") for _ in range(LAYERS)] for _ in range(2)]
    tables = [torch.tensor([t.data_ptr() for t in layer], dtype=torch.int64, device="cuda") for layer in gpu]
    host_lf = [[_cache(n, ROW, "host") for _ in range(LAYERS)] for _ in range(2)]
    host_tables = [torch.tensor([t.data_ptr() for t in layer], dtype=torch.int64, device="cuda") for layer in host_lf]
    page = 64
    host_pf = [torch.empty(n // page, LAYERS, page, ROW // 2, dtype=torch.bfloat16, pin_memory=True) for _ in range(2)]
    idx_gpu, idx_host = _indices(n, n)
    for q in (2, 4):
        for direction in ("host->gpu", "gpu->host"):
            if direction == "gpu->host":
                us_lf = _time(lambda: transfer_kv_all_layers(host_tables[0], host_tables[1], idx_host, tables[0], tables[1], idx_gpu,
                                                             src_row_stride_bytes=ROW, dst_row_stride_bytes=ROW, block_quota=q))
                us_pf = _time(lambda: transfer_kv_all_layers(host_pf[0], host_pf[1], idx_host, tables[0], tables[1], idx_gpu,
                                                             src_row_stride_bytes=ROW, block_quota=q))
            else:
                us_lf = _time(lambda: transfer_kv_all_layers(tables[0], tables[1], idx_gpu, host_tables[0], host_tables[1], idx_host,
                                                             src_row_stride_bytes=ROW, dst_row_stride_bytes=ROW, block_quota=q))
                us_pf = _time(lambda: transfer_kv_all_layers(tables[0], tables[1], idx_gpu, host_pf[0], host_pf[1], idx_host,
                                                             dst_row_stride_bytes=ROW, block_quota=q))
            print(f"| {direction} | layer-first | SM kernel, {q} CTAs | {us_lf:.1f} | {_gbps(moved, us_lf):.1f} |")
            print(f"| {direction} | page-first (pages of {page}) | SM kernel, {q} CTAs | {us_pf:.1f} | {_gbps(moved, us_pf):.1f} |")


def row_sizes():
    print("\n### Row sizes (one layer, K and V, about 256 MiB per direction, SM kernel at 4 CTAs)\n")
    print("| row bytes | tokens | host->gpu GB/s | gpu->host GB/s | gpu->gpu GB/s (whole GPU) |")
    print("|---|---|---|---|---|")
    for row in get_benchmark_range([576, 1024, 2048, 4096, 8192], [576, 8192]):
        n = (128 << 20) // row
        gk, gv, hk, hv = _cache(n, row, "gpu"), _cache(n, row, "gpu"), _cache(n, row, "host"), _cache(n, row, "host")
        gk2, gv2 = _cache(n, row, "gpu"), _cache(n, row, "gpu")
        idx_src, idx_dst = _indices(n, n)
        moved = 2 * n * row
        h2d = _time(lambda: transfer_kv_one_layer(gk, gv, idx_dst, hk, hv, idx_src, block_quota=4))
        d2h = _time(lambda: transfer_kv_one_layer(hk, hv, idx_dst, gk, gv, idx_src, block_quota=4))
        d2d = _time(lambda: transfer_kv_one_layer(gk2, gv2, idx_dst, gk, gv, idx_src))
        print(f"| {row} | {n} | {_gbps(moved, h2d):.1f} | {_gbps(moved, d2h):.1f} | {_gbps(moved, d2d):.1f} |")


def interference():
    """A bf16 GEMM on one stream, a gpu->host transfer looping on another: the GEMM's time against alone."""
    n = TOKENS
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    c = torch.empty_like(a)
    k_src, v_src = _cache(n, ROW, "gpu"), _cache(n, ROW, "gpu")
    k_dst, v_dst = _cache(n, ROW, "host"), _cache(n, ROW, "host")
    idx_src, idx_dst = _indices(n, n)
    cpu_src, cpu_dst = idx_src.cpu(), idx_dst.cpu()
    gemm_stream, copy_stream = torch.cuda.Stream(), torch.cuda.Stream()

    def gemm_ms(transfer, reps=30):
        torch.cuda.synchronize()
        times = []
        with torch.cuda.stream(copy_stream):
            for _ in range(reps * 3 if transfer else 0):
                transfer()
        with torch.cuda.stream(gemm_stream):
            for _ in range(reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                torch.matmul(a, b, out=c)
                end.record()
                times.append((start, end))
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in times[reps // 3:])

    alone = gemm_ms(None)
    print(f"\n### A bf16 GEMM [8192 x 8192 x 8192] beside a gpu->host transfer ({n} x {ROW} B x (K, V)) looping on another stream\n")
    print("| transfer mechanism | GEMM ms | GEMM slowdown |")
    print("|---|---|---|")
    print(f"| none | {alone:.3f} | - |")
    for name, fn in (("SM kernel, 2 CTAs", lambda: transfer_kv_one_layer(k_dst, v_dst, idx_dst, k_src, v_src, idx_src, block_quota=2)),
                     ("SM kernel, 4 CTAs", lambda: transfer_kv_one_layer(k_dst, v_dst, idx_dst, k_src, v_src, idx_src, block_quota=4)),
                     ("copy engines", lambda: transfer_kv_one_layer(k_dst, v_dst, cpu_dst, k_src, v_src, cpu_src))):
        ms = gemm_ms(fn)
        print(f"| {name} | {ms:.3f} | {100 * (ms / alone - 1):+.1f}% |")


def host_pools():
    """One layer's K and V rows to and from random rows of a host pool 1-16x the transfer (a hierarchical
    cache's host pool is several times the GPU's), default settings, beside the reference's kernel."""
    ref = reference_module("hicache")
    n = TOKENS
    moved = 2 * n * ROW
    print(f"\n### Scattered rows over a large host pool: {n} tokens x {ROW} B rows x (K, V), random rows of the pool, default settings\n")
    print("| direction | host pool (K + V) | jitkern us | GB/s | reference us | GB/s |")
    print("|---|---|---|---|---|---|")
    gpu = [_cache(2 * n, ROW, "gpu") for _ in range(2)]
    g_idx = torch.randperm(2 * n, device="cuda")[:n]
    for times in (1, 4, 8, 16):
        pool = [torch.empty(n * times, ROW // 2, dtype=torch.bfloat16, pin_memory=True) for _ in range(2)]
        h_idx = torch.randperm(n * times, device="cuda")[:n]
        for direction in ("gpu->host", "host->gpu"):
            dst, dst_idx, src, src_idx = (pool, h_idx, gpu, g_idx) if direction == "gpu->host" else (gpu, g_idx, pool, h_idx)
            us = _time(lambda: transfer_kv_one_layer(dst[0], dst[1], dst_idx, src[0], src[1], src_idx))
            theirs = "not run: no reference wheel" if ref is None else None
            if ref is not None:
                ref_us = _time(lambda: ref.transfer_hicache_one_layer(dst[0], dst[1], dst_idx, src[0], src[1], src_idx))
                theirs = f"{ref_us:.1f} | {_gbps(moved, ref_us):.1f}"
            print(f"| {direction} | {2 * pool[0].nbytes / 2**30:.2f} GiB ({times}x) | {us:.1f} | {_gbps(moved, us):.1f} | {theirs} |",
                  flush=True)
        del pool


def main():
    print(f"# bench_kv_transfer: {environment()}")
    if sys.argv[1:] == ["pool"]:
        return host_pools()
    warmup()
    one_layer()
    all_layers()
    host_pools()
    row_sizes()
    interference()


if __name__ == "__main__":
    main()
