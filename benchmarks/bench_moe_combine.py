"""The MoE combine family (bf16, hidden 7168, k = 8: DeepSeek-V3's shape): moe_sum and moe_weighted_sum (router
weights, scaling, the shared expert's row) against torch eager and torch.compile of the same math, the
reference framework's Triton mul-sum where it is installed, the measured copy ceiling over the bytes moved,
and a one-CTA launch floor. Prints markdown tables. `--variants`: the product's launch rule against its runtime-k
schedules (benchmarks/kernels/moe_combine_schedules.cuh), beside the reference's kernels (SGLang's moe_topk_sum,
moe_fused_mul_sum), interleaved; each schedule's output compared bit for bit with the product's."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import (copy_ceiling_text, copy_ceilings, environment, get_benchmark_range, interleaved, reference_ops_or_none,  # noqa: E402
                   reference_version, run_benchmark, run_benchmark_or_none, yardstick_module)

import jitkern  # noqa: E402
from jitkern.jit import warmup as build_all  # noqa: E402

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
    module = reference_ops_or_none("moe.moe_fused_mul_sum")
    return None if module is None else module.moe_fused_mul_sum


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


# (name, C++ struct in benchmarks/kernels/moe_combine_schedules.cuh, the sizes it runs at: all where absent); the
# first is the product's launch rule, the second its runtime-k schedules (its rule for k other than 8, ids or shared row).
VARIANTS = [("product", "bench_moe_combine::Product"),
            ("runtime k", "bench_moe_combine::RuntimeK")]
TOKENS_OF = {"moe_weighted_sum": (1, 16, 64, 128, 256, 4096), "moe_sum": (1, 16, 64, 128, 256, 4096)}


def schedule_module(name: str, entries, ops):
    here = Path(__file__).resolve().parent
    spec = jitkern.JitSpec(name, cuda_files=[str(here / "kernels" / "moe_combine_schedules.cuh")],
                           extra_include_paths=[str(here.parent / "csrc")], host_without_nvcc=True,
                           cuda_wrappers=[(f"{op}_{i}", f"{e[1]}::{op}") for i, e in enumerate(entries) for op in ops])
    return build_all(spec)[0]


def schedules(rounds: int = 2, entries=VARIANTS, sizes_of=TOKENS_OF, name: str = "bench_moe_combine_variants") -> None:
    """Each op at each size: every schedule (outputs compared bit for bit with the product's) beside the reference's
    kernel (SGLang: moe_topk_sum, moe_fused_mul_sum, weights only as in its signature), fastest first; at 4096
    tokens each time's % of the copy ceiling (bytes: the k rows read, the output written)."""
    start = time.perf_counter()
    module = schedule_module(name, entries, sizes_of)
    refs = {"moe_sum": reference_ops_or_none("moe.moe_topk_sum"), "moe_weighted_sum": reference_ops_or_none("moe.moe_fused_mul_sum")}
    ceilings = copy_ceilings(use_cudagraph=True)
    ceiling = max(ceilings.values())
    print(f"\n### MoE combine schedules, bf16, k = {K}, hidden {H} ({environment()}; reference {reference_version()})\n")
    print(f"us, fastest first (median of {rounds} interleaved rounds); built in {time.perf_counter() - start:.0f} s. Measured copy ceiling: "
          f"{copy_ceiling_text(ceilings)}.\n")
    print("| op | T | schedules |")
    print("|---|---|---|")
    for op, sizes in sizes_of.items():
        for t in sizes:
            x = torch.randn(t, K, H, dtype=DTYPE, device="cuda")
            w = torch.rand(t, K, device="cuda")
            out = torch.empty(t, H, dtype=DTYPE, device="cuda")
            args = (x, out) if op == "moe_sum" else (x, out, w, None, None, 1.0)
            fns = {e[0]: (lambda i=i: module[f"{op}_{i}"](*args)) for i, e in enumerate(entries) if len(e) < 3 or t in e[2]}
            first = None
            for label, fn in fns.items():
                out.fill_(float("nan"))
                fn()
                got = out.clone()
                first = got if first is None else first
                if not torch.equal(got, first):
                    print(f"<!-- {op} T={t}: {label} differs from the product's output -->")
            ref = refs[op]
            if ref is not None:
                theirs = torch.empty_like(out)
                call = (lambda: ref.moe_topk_sum(x, theirs)) if op == "moe_sum" else (lambda: ref.moe_fused_mul_sum(x, w, theirs))
                try:
                    call()
                    fns["reference"] = call
                except Exception as e:  # noqa: BLE001 - the table goes on without it
                    print(f"<!-- reference left out: {type(e).__name__}: {str(e)[:300]} -->")
            moved = (t * K * H + t * H) * 2
            ranked = sorted(interleaved(fns, rounds=rounds).items(), key=lambda kv: kv[1])
            cells = [f"{n} {v:.2f}" + (f" ({100 * moved / (v * 1e-6) / 1e9 / ceiling:.1f}%)" if t == 4096 else "") for n, v in ranked]
            print(f"| {op} | {t} | " + " | ".join(cells) + " |", flush=True)
    print(f"<!-- {time.perf_counter() - start:.0f} s in all -->")


if __name__ == "__main__":
    if "--variants" in sys.argv:
        schedules()
    else:
        main()
