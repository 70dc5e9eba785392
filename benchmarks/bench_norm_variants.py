"""The RMSNorm variants (jitkern.ops.gemma_rmsnorm, gemma_fused_add_rmsnorm, rmsnorm_hf) against jitkern's
rmsnorm / fused_add_rmsnorm (the same kernels with the plain rule: the floor), torch.compile of the models'
own code and, where it imports (REFERENCE_WHEEL), the reference framework's (SGLang's) rmsnorm_hf. bf16
[T, 4096]. Prints a markdown table: CUDA-graph medians in us (p20-p80) and GB/s of the bytes moved."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_rope  # noqa: E402
from bench_rope import in_turns  # noqa: E402
from utils import copy_ceiling_text, copy_ceilings, environment, get_benchmark_range, reference_ops  # noqa: E402

from jitkern.ops import fused_add_rmsnorm, gemma_fused_add_rmsnorm, gemma_rmsnorm, rmsnorm, rmsnorm_hf, warmup  # noqa: E402

H, EPS, DTYPE = 4096, 1e-6, torch.bfloat16
SIZES = get_benchmark_range([1, 4, 16, 64, 256, 4096, 16384, 32768], [1, 64, 4096])


def gemma_code(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * (1.0 + w.float())).to(x.dtype)


def llama_code(x, w):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


def main() -> None:
    warmup(ops=["gemma_rmsnorm", "gemma_fused_add_rmsnorm", "rmsnorm_hf", "rmsnorm", "fused_add_rmsnorm"], dtypes=[DTYPE])
    w = (torch.rand(H, device="cuda") - 0.5).to(DTYPE)
    compiled_gemma, compiled_llama = torch.compile(gemma_code), torch.compile(llama_code)
    fns = {
        "gemma_rmsnorm": lambda x, r, out: gemma_rmsnorm(x, w, EPS, out=out),
        "rmsnorm (floor)": lambda x, r, out: rmsnorm(x, w, out, EPS),
        "torch.compile gemma": lambda x, r, out: compiled_gemma(x, w),
        "gemma_fused_add_rmsnorm": lambda x, r, out: gemma_fused_add_rmsnorm(x, r, w, EPS),
        "fused_add_rmsnorm (floor)": lambda x, r, out: fused_add_rmsnorm(x, r, w, EPS),
        "rmsnorm_hf": lambda x, r, out: rmsnorm_hf(x, w, EPS, out=out),
        "torch.compile llama": lambda x, r, out: compiled_llama(x, w),
    }
    try:
        ref = reference_ops("layernorm.rmsnorm_hf").rmsnorm_hf
        fns["reference rmsnorm_hf"] = lambda x, r, out: ref(x, w, EPS, out=out)
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        print(f"- not run: the reference's rmsnorm_hf: {type(e).__name__}: {str(e)[:200]}")
    ceilings = copy_ceilings(use_cudagraph=True)
    print(f"\n### RMSNorm variants, bf16 [T, {H}] ({environment()})\n")
    print(f"Measured copy ceiling: {copy_ceiling_text(ceilings)}. CUDA-graph medians in us (p20-p80), the median one of "
          f"{bench_rope.ROUNDS} rounds in which the columns take turns; GB/s for the jitkern variants.\n")
    names = list(fns)
    print("| T | " + " | ".join(f"{n} us" for n in names) + " | gemma GB/s | gemma fused add GB/s | hf GB/s |")
    print("|---|" + "---|" * (len(names) + 3))
    for t in SIZES:
        x = torch.randn(t, H, dtype=DTYPE, device="cuda")
        r, out = torch.randn_like(x), torch.empty_like(x)
        res = in_turns({n: (lambda f=f: f(x, r, out)) for n, f in fns.items()}, t)
        cells = " | ".join("n/a" if v is None else f"{v['median']:.2f} [{v['p20']:.2f}-{v['p80']:.2f}]" for v in res.values())
        rate = [f"{k * t * H * 2 / (res[n]['median'] * 1e-6) / 1e9:.0f}" for n, k in (("gemma_rmsnorm", 2), ("gemma_fused_add_rmsnorm", 4),
                                                                                       ("rmsnorm_hf", 2))]
        print(f"| {t} | {cells} | " + " | ".join(rate) + " |")


if __name__ == "__main__":
    main()
