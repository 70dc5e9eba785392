"""The KV row copies: store_cache (k and v rows, 8 heads of 128, bf16, at scattered locations of a 65536-slot
flat pool and of a paged cache of 16-token pages) and the MLA concatenations (DeepSeek shapes) against
torch and, side by side in one process, the reference framework's (SGLang's) newest kernels where it has
the op (REFERENCE_WHEEL); GB/s of the bytes each moves. Prints markdown tables (CUDA-graph medians of 3
interleaved runs)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import (BATCH, call_each, BATCHES, environment, get_benchmark_range, interleaved, per_call_us, reference_ops_or_none,  # noqa: E402
                   reference_version, run_benchmark, yardstick_module)

from jitkern.ops import concat_mla_absorb_q, concat_mla_k, store_cache, warmup  # noqa: E402

HK, D, PAGE = 8, 128, 16
POOL = 65536  # slots of the flat cache
DTYPE = torch.bfloat16


def ratio(ref, j):
    return "n/a" if ref is None else f"{ref / j:.2f}x"


def us(t):
    return "n/a" if t is None else f"{t:.2f}"


def store_table() -> None:
    """store_cache against the reference's (flat pool only: its layout) and torch's index_copy_ of the same rows."""
    ref = reference_ops_or_none("kvcache.kvcache")
    print("\n#### store_cache (us, GB/s)\n")
    print("| cache | T | jitkern us | GB/s | reference us | reference / jitkern | torch index_copy_ us |")
    print("|---|---|---|---|---|---|---|")
    for layout in ("flat", "paged"):
        for t in get_benchmark_range([1, 16, 64, 256, 4096, 32768], [16, 256, 4096]):
            slots = POOL if layout == "flat" else PAGE * (2 * t // PAGE + 4)
            shape = (slots, HK * D) if layout == "flat" else (slots // PAGE, PAGE, HK, D)
            kc, vc = (torch.zeros(shape, dtype=DTYPE, device="cuda") for _ in range(2))
            k, v = (torch.randn(t, HK * D, dtype=DTYPE, device="cuda") for _ in range(2))
            loc = torch.randperm(slots - 1, device="cuda")[:t] + 1  # slot 0 is the reference's skipped padding slot
            flat_k, flat_v = kc.view(slots, HK * D), vc.view(slots, HK * D)
            fns = {"jitkern": lambda: store_cache(k, v, kc, vc, loc),
                   "torch": lambda: (flat_k.index_copy_(0, loc, k), flat_v.index_copy_(0, loc, v))}
            if ref is not None and layout == "flat":
                fns["reference"] = lambda: ref.store_cache(k, v, kc, vc, loc)
            times = interleaved(call_each(fns))
            j, r = times["jitkern"], times.get("reference")
            num = 4 * k.numel() * 2 + loc.numel() * 8
            print(f"| {layout} | {t} | {j:.2f} | {num / (j * 1e-6) / 1e9:.0f} | {us(r)} | {ratio(r, j)} | {times['torch']:.2f} |", flush=True)


def mla_table() -> None:
    """The MLA concatenations (DeepSeek shapes) against the reference's and torch.cat, GB/s of the bytes they
    move; the copy kernel's time for the same bytes is the access pattern's ceiling."""
    ref = reference_ops_or_none("attention.concat_mla")
    copy = yardstick_module().copy
    print("\n#### MLA concatenations (us, GB/s)\n")
    print("| op | T | jitkern us | GB/s | reference us | reference / jitkern | torch us | copy kernel us (same bytes) |")
    print("|---|---|---|---|---|---|---|---|")
    for t in get_benchmark_range([1, 64, 512, 4096], [1, 4096]):
        k_nope = torch.randn(t, 128, 128, dtype=DTYPE, device="cuda")
        k_rope = torch.randn(t, 1, 64, dtype=DTYPE, device="cuda")
        k = torch.empty(t, 128, 192, dtype=DTYPE, device="cuda")
        a = torch.randn(t, 128, 512, dtype=DTYPE, device="cuda")
        b = torch.randn(t, 128, 64, dtype=DTYPE, device="cuda")
        src = torch.zeros(t * 128 * 576 * 2 // 4 // 4096 * 4096, dtype=torch.int32, device="cuda")  # q's bytes, whole 16 KiB tiles
        dst = torch.empty_like(src)
        cases = {
            "concat_mla_k": ({"jitkern": lambda: concat_mla_k(k, k_nope, k_rope),
                              "torch": lambda: k.copy_(torch.cat([k_nope, k_rope.expand(t, 128, 64)], dim=-1))},
                             (k.numel() + k_nope.numel() + k_rope.numel()) * 2, lambda: ref.concat_mla_k(k, k_nope, k_rope)),
            "concat_mla_absorb_q": ({"jitkern": lambda: concat_mla_absorb_q(a, b), "torch": lambda: torch.cat([a, b], dim=-1),
                                     "copy": lambda: copy(dst, src)},
                                    2 * (a.numel() + b.numel()) * 2, lambda: ref.concat_mla_absorb_q(a, b)),
        }
        for name, (fns, num, ref_fn) in cases.items():
            if ref is not None:
                fns["reference"] = ref_fn
            times = interleaved(call_each(fns))
            j, r = times["jitkern"], times.get("reference")
            c = us(times["copy"]) if "copy" in times else "-"
            print(f"| {name} | {t} | {j:.2f} | {num / (j * 1e-6) / 1e9:.0f} | {us(r)} | {ratio(r, j)} | {times['torch']:.2f} | {c} |", flush=True)


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
    print(f"\n### KV row copies ({environment()}; reference {reference_version()})")
    store_table()
    mla_table()
    per_call_table()


if __name__ == "__main__":
    main()
