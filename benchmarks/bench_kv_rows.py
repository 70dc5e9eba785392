"""The KV row copies: store_cache (k and v rows, 8 heads of 128, bf16, to a paged cache of 16-token
pages at random locations) and the MLA concatenations (DeepSeek shapes) against torch, GB/s of the bytes
each moves. Prints markdown tables."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import BATCH, BATCHES, environment, get_benchmark_range, per_call_us, run_benchmark  # noqa: E402

from jitkern.ops import concat_mla_absorb_q, concat_mla_k, store_cache, warmup  # noqa: E402

HK, D, PAGE = 8, 128, 16
DTYPE = torch.bfloat16


def store_table() -> None:
    """store_cache against torch's index_copy_ of the same rows."""
    print("\n#### store_cache (us, GB/s)\n")
    print("| T | jitkern us | GB/s | torch index_copy_ us |")
    print("|---|---|---|---|")
    for t in get_benchmark_range([1, 8, 64, 4096, 32768], [1, 4096]):
        slots = PAGE * (2 * t // PAGE + 4)
        kc, vc = (torch.zeros(slots // PAGE, PAGE, HK, D, dtype=DTYPE, device="cuda") for _ in range(2))
        k, v = (torch.randn(t, HK * D, dtype=DTYPE, device="cuda") for _ in range(2))
        loc = torch.randperm(slots, device="cuda")[:t]
        j = run_benchmark(lambda: store_cache(k, v, kc, vc, loc))["median"]
        flat_k, flat_v = kc.view(slots, HK * D), vc.view(slots, HK * D)
        tt = run_benchmark(lambda: (flat_k.index_copy_(0, loc, k), flat_v.index_copy_(0, loc, v)))["median"]
        num = 4 * k.numel() * 2 + loc.numel() * 8
        print(f"| {t} | {j:.2f} | {num / (j * 1e-6) / 1e9:.0f} | {tt:.2f} |")


def mla_table() -> None:
    """The MLA concatenations (DeepSeek shapes) against torch.cat, GB/s of the bytes they move."""
    print("\n#### MLA concatenations (us, GB/s)\n")
    print("| op | T | jitkern us | GB/s | torch us |")
    print("|---|---|---|---|---|")
    for t in get_benchmark_range([1, 64, 4096], [64]):
        k_nope = torch.randn(t, 128, 128, dtype=DTYPE, device="cuda")
        k_rope = torch.randn(t, 1, 64, dtype=DTYPE, device="cuda")
        k = torch.empty(t, 128, 192, dtype=DTYPE, device="cuda")
        j = run_benchmark(lambda: concat_mla_k(k, k_nope, k_rope))["median"]
        tt = run_benchmark(lambda: k.copy_(torch.cat([k_nope, k_rope.expand(t, 128, 64)], dim=-1)))["median"]
        num = (k.numel() + k_nope.numel() + k_rope.numel()) * 2
        print(f"| concat_mla_k | {t} | {j:.2f} | {num / (j * 1e-6) / 1e9:.0f} | {tt:.2f} |")
        a = torch.randn(t, 128, 512, dtype=DTYPE, device="cuda")
        b = torch.randn(t, 128, 64, dtype=DTYPE, device="cuda")
        j = run_benchmark(lambda: concat_mla_absorb_q(a, b))["median"]
        tt = run_benchmark(lambda: torch.cat([a, b], dim=-1))["median"]
        num = 2 * (a.numel() + b.numel()) * 2
        print(f"| concat_mla_absorb_q | {t} | {j:.2f} | {num / (j * 1e-6) / 1e9:.0f} | {tt:.2f} |")


def per_call_table() -> None:
    """Host time per eager call at T = 1 (what a step outside a CUDA graph pays per layer)."""
    kc, vc = (torch.zeros(64, PAGE, HK, D, dtype=DTYPE, device="cuda") for _ in range(2))
    k, v = (torch.randn(1, HK * D, dtype=DTYPE, device="cuda") for _ in range(2))
    loc = torch.zeros(1, dtype=torch.int64, device="cuda")
    print(f"\n#### Host time per call, T = 1 (us; median over {BATCHES} batches of {BATCH} calls)\n")
    print("| path | us per call |")
    print("|---|---|")
    print(f"| store_cache | {per_call_us(lambda: store_cache(k, v, kc, vc, loc)):.2f} |")


def main() -> None:
    warmup(ops=["store_cache", "concat_mla_k", "concat_mla_absorb_q"])
    print(f"\n### KV row copies ({environment()})")
    store_table()
    mla_table()
    per_call_table()


if __name__ == "__main__":
    main()
