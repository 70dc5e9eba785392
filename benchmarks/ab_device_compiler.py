"""The kernels whose NVRTC machine code differs from nvcc's (NVRTC addresses shared memory with 64-bit
pointers), built both ways and timed in alternating fresh processes, each with its own empty cache:

    python3 benchmarks/ab_device_compiler.py [--rounds 2]

Each process builds its modules with one JITKERN_DEVICE_COMPILER (nvrtc or nvcc) and times
every case as CUDA-graph replays of 100 calls (median of 7). Prints a Markdown table: mean over rounds."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMPILERS = ("nvcc", "nvrtc")


def cases():
    """(name, function) for the norm, quantization, RoPE and MoE ops at 1, 16 and 16384 tokens (hidden 4096,
    bf16; q 32 / kv 8 heads of 128; 64 and 256 experts, top 8)."""
    import torch
    import jitkern.ops as ops

    dev, bf, H = "cuda", torch.bfloat16, 4096
    torch.manual_seed(0)
    out = []
    for T in (1, 16, 16384):
        x, w = torch.randn(T, H, device=dev, dtype=bf), torch.randn(H, device=dev, dtype=bf)
        r, o = torch.randn_like(x), torch.empty_like(x)
        q8 = torch.empty(T, H, device=dev, dtype=torch.float8_e4m3fn)
        s1, st = torch.ones(1, device=dev), torch.empty(T, 1, device=dev)
        out += [(f"rmsnorm T={T}", lambda x=x, w=w, o=o: ops.rmsnorm(x, w, o)),
                (f"fused_add_rmsnorm T={T}", lambda x=x, r=r, w=w: ops.fused_add_rmsnorm(x, r, w)),
                (f"per_tensor_quant_fp8 dynamic T={T}", lambda x=x, q8=q8, s1=s1: ops.per_tensor_quant_fp8(x, q8, s1)),
                (f"per_token_quant_fp8 T={T}", lambda x=x, q8=q8, st=st: ops.per_token_quant_fp8(x, q8, st)),
                (f"per_token_group_quant_8bit ue8m0 T={T}", lambda x=x: ops.per_token_group_quant_8bit(
                    x, 128, torch.float8_e4m3fn, column_major_scales=True, scale_tma_aligned=True, scale_ue8m0=True)),
                (f"per_token_group_quant_8bit int8 T={T}", lambda x=x: ops.per_token_group_quant_8bit(x, 128, torch.int8)),
                (f"rmsnorm_quant_fp8 static T={T}", lambda x=x, w=w, s1=s1, q8=q8: ops.rmsnorm_quant_fp8(x, w, scale=s1, output_q=q8)),
                (f"rmsnorm_quant_fp8 dynamic T={T}", lambda x=x, w=w, q8=q8, st=st: ops.rmsnorm_quant_fp8(x, w, output_q=q8, output_s=st)),
                (f"fused_add_rmsnorm_quant_fp8 static T={T}",
                 lambda x=x, r=r, w=w, s1=s1, q8=q8: ops.fused_add_rmsnorm_quant_fp8(x, r, w, scale=s1, output_q=q8)),
                (f"fused_add_rmsnorm_quant_fp8 dynamic T={T}",
                 lambda x=x, r=r, w=w, q8=q8, st=st: ops.fused_add_rmsnorm_quant_fp8(x, r, w, output_q=q8, output_s=st))]
        q, k = torch.randn(T, 32 * 128, device=dev, dtype=bf), torch.randn(T, 8 * 128, device=dev, dtype=bf)
        hw = torch.randn(128, device=dev, dtype=bf)
        qa, ka = torch.randn_like(q), torch.randn_like(k)
        qaw, kaw = torch.randn(32 * 128, device=dev, dtype=bf), torch.randn(8 * 128, device=dev, dtype=bf)
        pos = torch.randint(0, 4096, (T,), device=dev)
        cache = torch.randn(8192, 128, device=dev)
        out += [(f"fused_inplace_qknorm T={T}", lambda q=q, k=k, hw=hw: ops.fused_inplace_qknorm(q, k, hw, hw, head_dim=128)),
                (f"fused_inplace_qknorm_across_heads T={T}", lambda q=qa, k=ka: ops.fused_inplace_qknorm_across_heads(q, k, qaw, kaw)),
                (f"apply_rope_with_cos_sin_cache_inplace T={T}",
                 lambda pos=pos, q=q, k=k: ops.apply_rope_with_cos_sin_cache_inplace(pos, q, k, 128, cache, True))]
        for E in (64, 256):
            g = torch.randn(T, E, device=dev, dtype=bf)
            tw, ti = torch.empty(T, 8, device=dev), torch.empty(T, 8, device=dev, dtype=torch.int32)
            bias, ids = torch.randn(E, device=dev), torch.randint(0, E, (T, 8), device=dev, dtype=torch.int32)
            out += [(f"topk_sigmoid E={E} T={T}", lambda g=g, tw=tw, ti=ti, bias=bias: ops.topk_sigmoid(tw, ti, g, True, bias)),
                    (f"moe_align_block_size E={E} T={T}", lambda ids=ids, E=E: ops.moe_align_block_size(ids, E, 64))]
    return out


def graph_us(fn, reps: int = 7, iters: int = 100) -> float:
    """Median microseconds per call over CUDA-graph replays of `iters` calls."""
    import torch

    fn()
    torch.cuda.synchronize()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            for _ in range(iters):
                fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / iters)
    return statistics.median(times)


def child() -> None:
    for name, fn in cases():
        print(f"{name}\t{graph_us(fn):.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child()
    sys.path.insert(0, str(HERE))
    from utils import environment

    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as caches:
        for _ in range(args.rounds):
            for compiler in COMPILERS:
                env = dict(os.environ, JITKERN_DEVICE_COMPILER=compiler, JITKERN_CACHE_DIR=f"{caches}/{compiler}", JITKERN_QUIET="1")
                text = subprocess.run([sys.executable, __file__, "--child"], env=env, check=True, capture_output=True, text=True).stdout
                for line in text.splitlines():
                    name, us = line.split("\t")
                    results.setdefault(name, {}).setdefault(compiler, []).append(float(us))
    print(environment())
    print(f"\n| case | nvcc (us) | NVRTC (us) | NVRTC / nvcc |\n|---|---|---|---|")
    for name, by in results.items():
        a, b = statistics.mean(by["nvcc"]), statistics.mean(by["nvrtc"])
        print(f"| {name} | {a:.2f} | {b:.2f} | {b / a:.3f} |")


if __name__ == "__main__":
    main()
