"""The gated activation family: act-and-mul (bf16, d = 14336) against its access pattern's ceiling (read 2
bytes, write 1: the `halve` yardstick over the same bytes), the copy ceiling, torch eager and torch.compile
of the same math; decode latency against a one-CTA launch floor; SiLU-and-mul to fp8 (per-token-group and
static) against the two ops in sequence and torch.compile. Prints markdown tables."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import copy_ceiling_text, copy_ceilings, environment, get_benchmark_range, run_benchmark, run_benchmark_or_none, yardstick_module  # noqa: E402

from jitkern.ops import (gelu_and_mul, gelu_tanh_and_mul, per_tensor_quant_fp8, per_token_group_quant_8bit, silu_and_mul,  # noqa: E402
                         silu_and_mul_per_token_group_quant_fp8, silu_and_mul_quant_fp8)

DTYPE = torch.bfloat16
D = 14336
TOKENS = get_benchmark_range([1, 4, 16, 64, 256, 1024, 4096, 8192, 16384], [1, 64, 4096])
FP8_MAX = 448.0


def eager_silu(x, out):
    torch.mul(F.silu(x[..., :D]), x[..., D:], out=out)


def eager_gelu(x, out):
    torch.mul(F.gelu(x[..., :D]), x[..., D:], out=out)


def eager_gelu_tanh(x, out):
    torch.mul(F.gelu(x[..., :D], approximate="tanh"), x[..., D:], out=out)


def eager_silu_group_quant(x):
    y = (F.silu(x[..., :D].float()) * x[..., D:].float()).to(DTYPE).float().view(x.shape[0], -1, 128)
    s = y.abs().amax(-1, keepdim=True).clamp(min=1e-10) / FP8_MAX
    return (y / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(x.shape[0], -1), s.squeeze(-1)


compiled = {name: torch.compile(fn) for name, fn in (("silu", eager_silu), ("gelu", eager_gelu), ("gelu_tanh", eager_gelu_tanh),
                                                     ("silu_group_quant", eager_silu_group_quant))}
OPS = {"silu": silu_and_mul, "gelu": gelu_and_mul, "gelu_tanh": gelu_tanh_and_mul}
EAGER = {"silu": eager_silu, "gelu": eager_gelu, "gelu_tanh": eager_gelu_tanh}


def compile_everything() -> None:
    x = torch.randn(2, 2 * D, dtype=DTYPE, device="cuda")
    out = torch.empty(2, D, dtype=DTYPE, device="cuda")
    for name, op in OPS.items():
        op(out, x)
        compiled[name](x, out)
    silu_and_mul_per_token_group_quant_fp8(x)
    silu_and_mul_quant_fp8(x, torch.ones(1, device="cuda"))
    per_token_group_quant_8bit(out, 128)
    per_tensor_quant_fp8(out, output_s=torch.ones(1, device="cuda"), is_static=True)
    compiled["silu_group_quant"](x)
    yardstick_module()
    torch.cuda.synchronize()


def fmt(r):
    return "n/a" if r is None else f"{r['median']:.2f} [{r['p20']:.2f}-{r['p80']:.2f}]"


def act_tables(ceiling: float) -> None:
    module = yardstick_module()
    for name, op in OPS.items():
        print(f"\n#### {name}_and_mul, bf16, d = {D} (input [T, {2 * D}])\n")
        print("| T | jitkern us | GB/s | % copy ceiling | pattern ceiling us (halve, same bytes) | % of pattern | torch eager us | "
              "torch.compile us | vs eager | vs compile |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for t in TOKENS:
            x = torch.randn(t, 2 * D, dtype=DTYPE, device="cuda")
            out = torch.empty(t, D, dtype=DTYPE, device="cuda")
            num_bytes = 3 * t * D * 2
            j = run_benchmark_or_none(lambda: op(out, x))
            e = run_benchmark_or_none(lambda: EAGER[name](x, out))
            c = run_benchmark_or_none(lambda: compiled[name](x, out))
            pattern, pct = "n/a", "n/a"
            if t % 2 == 0:  # halve needs whole 16 KiB tiles
                src, dst = x.view(-1).view(torch.int32), out.view(-1).view(torch.int32)
                p = run_benchmark(lambda: module.halve(dst, src))["median"]
                pattern, pct = f"{p:.2f}", f"{100 * p / j['median']:.1f}%"
            gbps = num_bytes / (j["median"] * 1e-6) / 1e9
            print(f"| {t} | {fmt(j)} | {gbps:.0f} | {100 * gbps / ceiling:.1f}% | {pattern} | {pct} | {fmt(e)} | {fmt(c)} | "
                  f"{e['median'] / j['median']:.2f}x | {(c['median'] / j['median']) if c else float('nan'):.2f}x |")


def decode_floor() -> None:
    """One launch's latency: a one-CTA copy of 16 KiB in the same CUDA-graph timing."""
    module = yardstick_module()
    src = torch.zeros(4096, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    floor = run_benchmark(lambda: module.copy(dst, src))["median"]
    print(f"\nLaunch floor (one CTA copying 16 KiB, CUDA graph): {floor:.2f} us\n")


def quant_tables() -> None:
    print(f"\n#### SiLU-and-mul to fp8, bf16 input [T, {2 * D}]: fused against the two ops in sequence\n")
    print("| T | fused group-quant us | silu_and_mul + per_token_group_quant_8bit us | speed-up | torch.compile (same math) us | "
          "fused static us | silu_and_mul + per_tensor_quant_fp8 (static) us | speed-up | pattern ceiling us (quarter, same bytes) | "
          "fused group-quant % of pattern |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    module = yardstick_module()
    for t in TOKENS:
        x = torch.randn(t, 2 * D, dtype=DTYPE, device="cuda")
        y = torch.empty(t, D, dtype=DTYPE, device="cuda")
        q = torch.empty(t, D, dtype=torch.float8_e4m3fn, device="cuda")
        s = torch.empty(t, D // 128, device="cuda")
        qs = torch.empty_like(q)
        sq = torch.empty_like(s)
        scale = torch.tensor([0.05], device="cuda")
        fused = run_benchmark_or_none(lambda: silu_and_mul_per_token_group_quant_fp8(x, output_q=q, output_s=s))
        pair = run_benchmark_or_none(lambda: (silu_and_mul(y, x), per_token_group_quant_8bit(y, 128, output_q=qs, output_s=sq)))
        comp = run_benchmark_or_none(lambda: compiled["silu_group_quant"](x))
        fused_static = run_benchmark_or_none(lambda: silu_and_mul_quant_fp8(x, scale, output_q=q))
        pair_static = run_benchmark_or_none(lambda: (silu_and_mul(y, x), per_tensor_quant_fp8(y, output_q=qs, output_s=scale, is_static=True)))
        pattern = "n/a | n/a"
        if t % 4 == 0:  # quarter needs pairs of 16 KiB tiles
            src, dst = x.view(torch.int32).reshape(-1), torch.empty(t * D // 4, dtype=torch.int32, device="cuda")
            p = run_benchmark(lambda: module.quarter(dst, src))["median"]
            pattern = f"{p:.2f} | {100 * p / fused['median']:.1f}%"
        print(f"| {t} | {fmt(fused)} | {fmt(pair)} | {pair['median'] / fused['median']:.2f}x | {fmt(comp)} | {fmt(fused_static)} | "
              f"{fmt(pair_static)} | {pair_static['median'] / fused_static['median']:.2f}x | {pattern} |")


def main() -> None:
    compile_everything()
    ceilings = copy_ceilings(use_cudagraph=True)
    print(f"\n### Gated activations, bf16 ({environment()})\n")
    print(f"Measured copy ceiling: {copy_ceiling_text(ceilings)}. Times are CUDA-graph medians (p20-p80 in brackets). "
          "Bytes: input read once, output written once.")
    decode_floor()
    act_tables(max(ceilings.values()))
    quant_tables()


if __name__ == "__main__":
    main()
