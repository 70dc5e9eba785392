"""jitkern beside the reference framework's newest kernels (SGLang's sglang.kernels.ops, from the wheel
REFERENCE_WHEEL names or the installed package), in one process, same inputs, for every op both have:
CUDA-graph replay medians (median of 3 interleaved rounds), bf16. Prints one markdown table; the ratio
is reference time / jitkern time (above 1: jitkern faster). `bench_vs_reference.py OP...`: those ops only.

The reference's ops are built by its own JIT loader; where that cannot run (it needs the `ninja`
executable), by jitkern.compat.sglang from the same sources; the table says which."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import environment, interleaved, overhead_module, reference_builder, reference_ops, reference_version  # noqa: E402

import jitkern  # noqa: E402
from jitkern import ops  # noqa: E402

DTYPE = torch.bfloat16
EPS = 1e-6


def rand(*shape, dtype=DTYPE):
    return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype)


def bound(f, *args):
    """f(*args) as a function of nothing (each case keeps its own tensors, not the loop's last ones)."""
    return lambda: f(*args)


def rmsnorm_cases(ref):
    for t, h in [(1, 4096), (16, 4096), (128, 4096), (256, 4096), (1, 2048), (64, 2048), (1, 8192), (64, 8192), (256, 8192),
                 (4096, 4096), (32768, 4096)]:
        x, w = rand(t, h), rand(h)
        out = torch.empty_like(x)
        yield "rmsnorm", f"[{t}, {h}]", bound(ops.rmsnorm, x, w, out, EPS), bound(ref.rmsnorm, x, w, out, EPS)


def fused_add_rmsnorm_cases(ref):
    for t, h in [(1, 4096), (16, 4096), (128, 4096), (4096, 4096)]:
        x, r, w = rand(t, h), rand(t, h), rand(h)
        yield "fused_add_rmsnorm", f"[{t}, {h}]", bound(ops.fused_add_rmsnorm, x, r, w, EPS), bound(ref.fused_add_rmsnorm, x, r, w, EPS)


def qknorm_cases(ref):
    for t in (1, 64, 256, 8192, 32768):
        q, k, qw, kw = rand(t, 32, 128), rand(t, 8, 128), rand(128), rand(128)
        yield ("fused_inplace_qknorm (32 q + 8 k heads x 128)", f"T={t}", bound(ops.fused_inplace_qknorm, q, k, qw, kw, EPS),
               bound(ref.fused_inplace_qknorm, q, k, qw, kw, EPS))


def group_quant_cases(ref):
    """Each shape with jitkern's default rounding ("exact", x / s) and with rounding="sglang" (the reference's bits)."""
    for t, h in [*((t, 7168) for t in (1, 16, 64, 128, 256, 512, 1024, 4096)), *((t, h) for h in (2048, 4096) for t in (16, 256, 4096))]:
        x = rand(t, h)
        q = torch.empty(t, h, device="cuda", dtype=torch.float8_e4m3fn)
        s = torch.empty(t, h // 128, device="cuda", dtype=torch.float32)
        for rounding in ("exact", "sglang"):
            yield (f"per_token_group_quant fp8, group 128, rounding={rounding}", f"[{t}, {h}]",
                   bound(lambda x, q, s, r: ops.per_token_group_quant_8bit(x, 128, rounding=r, output_q=q, output_s=s), x, q, s, rounding),
                   bound(ref.per_token_group_quant, x, q, s, 128))


def per_token_quant_cases(ref):
    for t in (1, 16, 4096):
        x = rand(t, 4096)
        q = torch.empty(t, 4096, device="cuda", dtype=torch.float8_e4m3fn)
        s = torch.empty(t, 1, device="cuda", dtype=torch.float32)
        yield "per_token_quant_fp8", f"[{t}, 4096]", bound(ops.per_token_quant_fp8, x, q, s), bound(ref.per_token_quant_fp8, x, q, s)


def per_tensor_quant_cases(ref):
    for t in (1, 16, 4096):
        x = rand(t, 4096)
        q = torch.empty(t, 4096, device="cuda", dtype=torch.float8_e4m3fn)
        s = torch.full((1,), 0.01, device="cuda")
        yield ("per_tensor_quant_fp8 static", f"[{t}, 4096]", bound(ops.per_tensor_quant_fp8, x, q, s, True),
               bound(ref.per_tensor_quant_fp8, x, q, s, True))


def silu_and_mul_cases(ref):
    for t in (1, 16, 4096):
        x = rand(t, 2 * 11008)
        out = torch.empty(t, 11008, device="cuda", dtype=DTYPE)
        yield "silu_and_mul", f"[{t}, 2 x 11008]", bound(ops.silu_and_mul, out, x), bound(ref.silu_and_mul, x, out)


def rotary_embedding_cases(ref):
    d, max_pos = 128, 4096
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, device="cuda", dtype=torch.float32) / d))
    freqs = torch.outer(torch.arange(max_pos, device="cuda", dtype=torch.float32), inv_freq)
    cs = torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(DTYPE)  # the reference's form: the cache in q's dtype
    for t in (1, 64, 4096):
        q, k = rand(t, 32 * d), rand(t, 8 * d)
        pos = torch.randint(0, max_pos, (t,), device="cuda")
        yield ("rotary_embedding (32 q + 8 k heads x 128)", f"T={t}", bound(ops.rotary_embedding, pos, q, k, d, cs, True),
               bound(ref.rotary_embedding, pos, q, k, d, cs, True))


def store_cache_cases(ref):
    for t in (16, 256):
        k, v = rand(t, 8, 128), rand(t, 8, 128)
        kc, vc = torch.zeros(65536, 8, 128, device="cuda", dtype=DTYPE), torch.zeros(65536, 8, 128, device="cuda", dtype=DTYPE)
        loc = torch.randperm(65536, device="cuda")[:t]
        yield ("store_cache (k, v rows of 8 x 128, 65536 slots)", f"T={t}", bound(ops.store_cache, k, v, kc, vc, loc),
               bound(ref.store_cache, k.view(t, -1), v.view(t, -1), kc.view(65536, -1), vc.view(65536, -1), loc))


def topk_softmax_cases(ref):
    for experts, t in ((128, 1), (128, 64), (128, 4096), (256, 64)):
        g = torch.randn(t, experts, device="cuda", dtype=torch.float32)
        w = torch.empty(t, 8, device="cuda", dtype=torch.float32)
        ids = torch.empty(t, 8, device="cuda", dtype=torch.int32)
        yield ("topk_softmax fp32, k = 8", f"{experts} experts x {t}", bound(ops.topk_softmax, w, ids, g),
               bound(ref.topk_softmax, w, ids, g))


def concat_mla_absorb_q_cases(ref):
    for t in (1, 16, 64, 128, 256, 1024, 4096):  # around a wave of rows a warp each (T = 66 on 132 SMs)
        a, b = rand(t, 128, 512), rand(t, 128, 64)
        yield "concat_mla_absorb_q", f"[{t}, 128, 512 + 64]", bound(ops.concat_mla_absorb_q, a, b), bound(ref.concat_mla_absorb_q, a, b)


# op -> (the reference's op module under sglang.kernels.ops, its cases, jitkern's ops they call)
OPS = {
    "rmsnorm": ("layernorm.norm", rmsnorm_cases, ["rmsnorm"]),
    "fused_add_rmsnorm": ("layernorm.norm", fused_add_rmsnorm_cases, ["fused_add_rmsnorm"]),
    "qknorm": ("layernorm.norm", qknorm_cases, ["fused_inplace_qknorm"]),
    "per_token_group_quant": ("quantization.per_token_group_quant", group_quant_cases, ["per_token_group_quant_8bit"]),
    "per_token_quant_fp8": ("quantization.per_token_quant_fp8", per_token_quant_cases, ["per_token_quant_fp8"]),
    "per_tensor_quant_fp8": ("quantization.per_tensor_quant_fp8", per_tensor_quant_cases, ["per_tensor_quant_fp8"]),
    "silu_and_mul": ("activation.activation", silu_and_mul_cases, ["silu_and_mul"]),
    "rotary_embedding": ("attention.rope", rotary_embedding_cases, ["rotary_embedding"]),
    "store_cache": ("kvcache.kvcache", store_cache_cases, ["store_cache"]),
    "topk_softmax": ("moe.moe_topk_softmax", topk_softmax_cases, ["topk_softmax"]),
    "concat_mla_absorb_q": ("attention.concat_mla", concat_mla_absorb_q_cases, ["concat_mla_absorb_q"]),
}


def first_calls(cases) -> list:
    """Calls every case once, the reference's builds in parallel (each compiles on its first call); returns
    the cases whose calls both ran, and prints the others."""
    def run(case):
        try:
            case[3]()
            return None
        except Exception as e:  # noqa: BLE001 - a case that cannot run is reported, not fatal
            return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

    with ThreadPoolExecutor(8) as pool:
        errors = list(pool.map(run, cases))
    kept = []
    for case, error in zip(cases, errors):
        if error is not None:  # once more on its own (a build that raced another's)
            error = run(case)
        try:
            case[2]()
        except Exception as e:  # noqa: BLE001
            error = f"jitkern: {type(e).__name__}: {e}"
        if error is None:
            kept.append(case)
        else:
            print(f"<!-- not timed: {case[0]} {case[1]}: {error} -->", flush=True)
    torch.cuda.synchronize()
    return kept


def reference_modules(paths) -> tuple[dict, str]:
    """The reference's op modules at these paths (None where it is absent) and what builds their kernels:
    its own JIT loader, or jitkern.compat.sglang (the same sources) where the loader's build tool, the
    `ninja` executable, is missing."""
    modules = {path: reference_ops(path) for path in paths}
    return modules, reference_builder()


def main() -> None:
    wanted = sys.argv[1:] or list(OPS)
    modules, builder = reference_modules({OPS[name][0] for name in wanted})
    if any(m is None for m in modules.values()):
        print("not run: the reference is not installed (REFERENCE_WHEEL=/path/to/sglang-*.whl)")
        return
    needed = [op for name in wanted for op in OPS[name][2]]
    for dtype, names in ((DTYPE, [op for op in needed if op != "topk_softmax"]), (torch.float32, [op for op in needed if op == "topk_softmax"])):
        if names:  # (the gating logits are fp32)
            ops.warmup(dtypes=[dtype], ops=names)
    cases = first_calls([c for name in wanted for c in OPS[name][1](modules[OPS[name][0]])])
    print(f"\n### jitkern {jitkern.__version__} beside the reference (SGLang {reference_version()}, built by {builder})\n")
    print(f"{environment()}; us, CUDA-graph replay medians, median of 3 interleaved rounds; bf16 unless named.\n")
    print("| op | shape | reference us | jitkern us | reference / jitkern |")
    print("|---|---|---|---|---|")
    floor()
    for op, shape, mine, theirs in cases:
        m = interleaved({"jitkern": mine, "reference": theirs})
        print(f"| {op} | {shape} | {m['reference']:.2f} | {m['jitkern']:.2f} | {m['reference'] / m['jitkern']:.2f}x |", flush=True)
    floor()


def floor() -> None:
    """The launch floor, a row of the table: an empty one-warp kernel launched as the ops are (PDL), same timing."""
    x = torch.zeros(16, device="cuda", dtype=torch.int32)
    empty = overhead_module().launch_empty_pdl
    print(f"| launch floor: an empty kernel (PDL wait only) | 1 x 32 threads | | {interleaved({'floor': lambda: empty(x, x)})['floor']:.2f} | |",
          flush=True)


if __name__ == "__main__":
    main()
