"""The MoE combine family (bf16, hidden 7168, k = 8: DeepSeek-V3's shape): moe_sum and moe_weighted_sum (router
weights, scaling, the shared expert's row) against torch eager and torch.compile of the same math, the
reference framework's Triton mul-sum where it is installed, the measured copy ceiling over the bytes moved,
and a one-CTA launch floor. Prints markdown tables."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import (copy_ceiling_text, copy_ceilings, environment, get_benchmark_range, reference_path, run_benchmark,  # noqa: E402
                   run_benchmark_or_none, yardstick_module)

from jitkern.ops import moe_sum, moe_weighted_sum  # noqa: E402

DTYPE = torch.bfloat16
H, K = 7168, 8
TOKENS = get_benchmark_range([1, 4, 16, 64, 256, 1024, 4096, 16384], [1, 64, 4096])


def eager_sum(x, out):
    torch.sum(x, dim=1, out=out)


def eager_weighted(x, w, shared, scale):
    return ((x.float() * (w * scale).unsqueeze(-1)).sum(1) + shared.float()).to(x.dtype)


compiled_sum = torch.compile(eager_sum)
compiled_weighted = torch.compile(eager_weighted)


def reference_mul_sum():
    """The reference framework's fused mul-sum (Triton), or None where it cannot be imported."""
    path = reference_path()
    if path is None:
        return None
    if path and path not in sys.path:
        sys.path.insert(0, path)
    try:
        return importlib.import_module("sglang.kernels.ops.moe.moe_fused_mul_sum").moe_fused_mul_sum
    except Exception as e:  # noqa: BLE001 - a baseline that cannot run is reported, not fatal
        print(f"<!-- the reference's moe_fused_mul_sum is not importable: {type(e).__name__}: {e} -->")
        return None


def fmt(r):
    return "n/a" if r is None else f"{r['median']:.2f}"


def main() -> None:
    ceilings = copy_ceilings(use_cudagraph=True)
    ceiling = max(ceilings.values())
    module = yardstick_module()
    src = torch.zeros(4096, dtype=torch.int32, device="cuda")
    floor = run_benchmark(lambda: module.copy(torch.empty_like(src), src))["median"]
    reference = reference_mul_sum()
    print(f"\n### MoE combine, bf16, k = {K}, hidden {H} ({environment()})\n")
    print(f"Measured copy ceiling: {copy_ceiling_text(ceilings)}. Launch floor (one CTA copying 16 KiB): {floor:.2f} us. "
          "CUDA-graph medians in us; bytes: the k rows read once (and the shared row), the output written once.\n")
    print("| T | moe_sum | GB/s | % copy ceiling | torch.sum | torch.compile | moe_weighted_sum (+ shared) | GB/s | % copy ceiling | "
          "torch eager (mul, sum, add) | torch.compile | reference mul-sum (Triton, no shared) | vs eager | vs compile |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for t in TOKENS:
        x = torch.randn(t, K, H, dtype=DTYPE, device="cuda")
        w = torch.rand(t, K, device="cuda")
        shared = torch.randn(t, H, dtype=DTYPE, device="cuda")
        out = torch.empty(t, H, dtype=DTYPE, device="cuda")
        moe_sum(x, out), moe_weighted_sum(x, w, None, shared, output=out), compiled_sum(x, out), compiled_weighted(x, w, shared, 2.5)
        s = run_benchmark_or_none(lambda: moe_sum(x, out))
        es = run_benchmark_or_none(lambda: eager_sum(x, out))
        cs = run_benchmark_or_none(lambda: compiled_sum(x, out))
        ws = run_benchmark_or_none(lambda: moe_weighted_sum(x, w, None, shared, routed_scaling_factor=2.5, output=out))
        ew = run_benchmark_or_none(lambda: eager_weighted(x, w, shared, 2.5))
        cw = run_benchmark_or_none(lambda: compiled_weighted(x, w, shared, 2.5))
        ref = None
        if reference is not None:
            ref_out = torch.empty(t, H, dtype=DTYPE, device="cuda")
            ref = run_benchmark_or_none(lambda: reference(x, w, ref_out, routed_scaling_factor=2.5))
        sum_bytes, weighted_bytes = (t * K * H + t * H) * 2, (t * K * H + 2 * t * H) * 2
        gs = sum_bytes / (s["median"] * 1e-6) / 1e9
        gw = weighted_bytes / (ws["median"] * 1e-6) / 1e9
        print(f"| {t} | {fmt(s)} | {gs:.0f} | {100 * gs / ceiling:.1f}% | {fmt(es)} | {fmt(cs)} | {fmt(ws)} | {gw:.0f} | "
              f"{100 * gw / ceiling:.1f}% | {fmt(ew)} | {fmt(cw)} | {fmt(ref)} | {ew['median'] / ws['median']:.2f}x | "
              f"{(cw['median'] / ws['median']) if cw else float('nan'):.2f}x |")


if __name__ == "__main__":
    main()
