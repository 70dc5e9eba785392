"""The MLA cache write (jitkern.ops.set_mla_kv_buffer, set_mla_kv_concat_q) against torch, jitkern's unfused
pair (set_mla_kv_buffer then concat_mla_absorb_q) and, where they import (REFERENCE_WHEEL, see
utils.reference_path), the reference framework's (SGLang's) kernels of the same names. DeepSeek-V3 shapes:
k_nope 512 + k_rope 64 bf16 per token, 16 query heads (128 over 8 GPUs), a paged cache of 64-token pages,
each token in its own random slot. Prints markdown tables: time (CUDA-graph medians, us), GB/s of the
bytes moved (the rows read and written) and % of the measured copy ceiling.

`bench_mla_cache.py variants [--check] [--quick]`: set_mla_kv_buffer beside its alternatives (benchmarks/
kernels/mla_cache_variants.cuh), the reference's kernel and, where the rows make whole 16 KiB tiles, the copy
kernel on the same bytes; a flat cache of 65536 slots [S, 1, 576] (as bench_vs_reference.py), median of 3
interleaved rounds; --check: outputs only; --quick: the rows kernel's forms only (no module but jitkern's to build),
at 1, 64, 256 and 4096 tokens."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_rope  # noqa: E402
from bench_rope import in_turns  # noqa: E402
from utils import copy_ceiling_text, copy_ceilings, environment, get_benchmark_range, interleaved, reference_ops, yardstick_module  # noqa: E402

import jitkern  # noqa: E402
from jitkern import ops  # noqa: E402
from jitkern.jit import warmup as build_all  # noqa: E402
from jitkern.ops import concat_mla_absorb_q, set_mla_kv_buffer, set_mla_kv_concat_q, warmup  # noqa: E402

NOPE, ROPE, HEADS, PAGE = 512, 64, 16, 64
DTYPE = torch.bfloat16
DECODE = get_benchmark_range([1, 4, 16, 64, 256], [1, 64])
PREFILL = get_benchmark_range([4096, 16384, 32768], [4096])
SLOTS = 2 * max(PREFILL)


def references():
    """{name: fn(buf, loc, kn, kr, qn, qr)} of the reference's kernels that import here, and why the others do not."""
    found, missing = {}, []
    for name, module, attr in (("reference set_mla_kv_buffer", "kvcache.set_mla_kv_buffer", "set_mla_kv_buffer"),
                               ("reference set_mla_kv_concat_q", "attention.set_mla_kv_concat_q", "set_mla_kv_concat_q")):
        try:
            fn = getattr(reference_ops(module), attr)
            found[name] = ((lambda b, loc, kn, kr, qn, qr, fn=fn: fn(b.view(-1, NOPE + ROPE), loc, kn, kr)) if "buffer" in name else
                           (lambda b, loc, kn, kr, qn, qr, fn=fn: fn(b.view(-1, NOPE + ROPE), loc, kn, kr, qn, qr)))
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            missing.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")
    return found, missing


def inputs(t):
    kv = torch.randn(t, NOPE + ROPE, dtype=DTYPE, device="cuda")
    q = torch.randn(t, HEADS, NOPE + ROPE, dtype=DTYPE, device="cuda")
    loc = torch.randperm(SLOTS, device="cuda")[:t]
    return kv[:, :NOPE], kv[:, NOPE:], q[..., :NOPE], q[..., NOPE:], loc


def main() -> None:
    warmup(ops=["set_mla_kv_buffer", "set_mla_kv_concat_q", "concat_mla_absorb_q"], dtypes=[DTYPE])
    buf = torch.zeros(SLOTS // PAGE, PAGE, 1, NOPE + ROPE, dtype=DTYPE, device="cuda")
    refs, missing = references()
    kn, kr, qn, qr, loc = inputs(64)
    q = set_mla_kv_concat_q(buf, loc, kn, kr, qn, qr)
    assert torch.equal(buf.view(-1, NOPE + ROPE)[loc], torch.cat([kn, kr], -1)) and torch.equal(q, torch.cat([qn, qr], -1))
    ceilings = copy_ceilings(use_cudagraph=True)
    ceiling = max(ceilings.values())
    print(f"\n### MLA cache write, k {NOPE} + {ROPE}, {HEADS} query heads, bf16, pages of {PAGE} ({environment()})\n")
    print(f"Measured copy ceiling: {copy_ceiling_text(ceilings)}. CUDA-graph medians in us (p20-p80), the "
          f"median one of {bench_rope.ROUNDS} rounds in which the columns take turns.\n")
    for line in missing:
        print(f"- not run: {line}")
    rows = buf.view(-1, NOPE + ROPE)
    tables = {
        "set_mla_kv_buffer": ({"jitkern": lambda b, loc, kn, kr, qn, qr: set_mla_kv_buffer(b, loc, kn, kr, reserved_skip_index=-1),
                               "torch index_put_ of cat": lambda b, loc, kn, kr, qn, qr: rows.index_put_((loc,), torch.cat([kn, kr], -1)),
                               **{n: f for n, f in refs.items() if "buffer" in n}}, False, DECODE + PREFILL),
        "set_mla_kv_concat_q": ({"jitkern": lambda b, loc, kn, kr, qn, qr: set_mla_kv_concat_q(b, loc, kn, kr, qn, qr),
                                 "jitkern set_mla_kv_buffer, then concat_mla_absorb_q": lambda b, loc, kn, kr, qn, qr: (
                                     set_mla_kv_buffer(b, loc, kn, kr, reserved_skip_index=-1), concat_mla_absorb_q(qn, qr)),
                                 **{n: f for n, f in refs.items() if "concat" in n}}, True, DECODE),
    }
    for title, (fns, query, sizes) in tables.items():
        names = list(fns)
        print(f"\n#### {title}\n")
        print("| T | " + " | ".join(f"{n} us" for n in names) + " | jitkern GB/s | % of copy ceiling | " +
              " | ".join(f"{n} / jitkern" for n in names[1:]) + " |")
        print("|---|" + "---|" * (2 * len(names) + 1))
        for t in sizes:
            kn, kr, qn, qr, loc = inputs(t)
            res = in_turns({n: (lambda f=f: f(buf, loc, kn, kr, qn, qr)) for n, f in fns.items()}, t)
            mine = res["jitkern"]["median"]
            moved = t * (NOPE + ROPE) * 2 * 2 * (1 + (HEADS if query else 0)) + t * 8
            gbps = moved / (mine * 1e-6) / 1e9
            cells = " | ".join("n/a" if r is None else f"{r['median']:.2f} [{r['p20']:.2f}-{r['p80']:.2f}]" for r in res.values())
            ratios = " | ".join("n/a" if res[n] is None else f"{res[n]['median'] / mine:.2f}x" for n in names[1:])
            print(f"| {t} | {cells} | {gbps:.0f} | {100 * gbps / ceiling:.1f}% | {ratios} |")


VARIANTS = {"the kernel before": 0, "trigger after loads": 1, "no prefetch": 2}  # mla_cache_variants.cuh's store_kv
VARIANT_SIZES = [1, 16, 64, 256, 4096]
FLAT_SLOTS = 65536


def variants_module():
    """benchmarks/kernels/mla_cache_variants.cuh, built in one parallel build with the product's module (bf16)."""
    here = Path(__file__).resolve().parent
    spec = jitkern.JitSpec("bench_mla_cache_variants", cuda_files=[str(here / "kernels" / "mla_cache_variants.cuh")],
                           cuda_wrappers=[("store_kv", "bench_mla_cache::store_kv")],
                           extra_include_paths=[str(here.parent / "csrc")], host_without_nvcc=True)
    return build_all(spec, *ops.specs(ops=["set_mla_kv_buffer"], dtypes=["bfloat16"]))[0]


def variants(check_only: bool, quick: bool = False) -> None:
    """set_mla_kv_buffer beside its alternatives and the reference's; where the rows make whole 16 KiB tiles
    (256 and 4096 tokens) also the copy kernel on the same bytes (the rows read and written), the ceiling of
    what the write can reach."""
    mod = variants_module()
    yardstick = None if quick else yardstick_module()
    refs, missing = ({}, []) if quick else references()
    ref = refs.get("reference set_mla_kv_buffer")
    buf = torch.zeros(FLAT_SLOTS, 1, NOPE + ROPE, dtype=DTYPE, device="cuda")
    rows = buf.view(-1, NOPE + ROPE)
    title = "set_mla_kv_buffer"
    print(f"\n### {title} beside its alternatives, k {NOPE} + {ROPE}, bf16, {FLAT_SLOTS} slots ({environment()})\n")
    print("us, CUDA-graph replay medians, median of 3 interleaved rounds; copy: the copy kernel on the rows' bytes.\n")
    for line in missing:
        print(f"- not run: {line}")
    variants_run = {n: v for n, v in VARIANTS.items() if not quick or v > 0}
    names = ["jitkern", *variants_run, *(["reference"] if ref else [])]
    print("| T | " + " | ".join(names) + " | copy | " + " | ".join(f"{n} / jitkern" for n in names[1:]) + " | jitkern % of copy |")
    print("|---|" + "---|" * (2 * len(names) + 1), flush=True)
    for t in [1, 64, 256, 4096] if quick else VARIANT_SIZES:
        kv = torch.randn(t, 1, NOPE + ROPE, dtype=DTYPE, device="cuda")
        kn, kr = kv[..., :NOPE], kv[..., NOPE:]
        loc = torch.randperm(FLAT_SLOTS - 1, device="cuda")[:t] + 1
        fns = {"jitkern": lambda: set_mla_kv_buffer(buf, loc, kn, kr),
               **{n: (lambda v=v: mod.store_kv(v, rows, loc, kn.squeeze(1), kr.squeeze(1))) for n, v in variants_run.items()},
               **({"reference": lambda: ref(buf, loc, kn.squeeze(1), kr.squeeze(1), None, None)} if ref else {})}
        for name, fn in fns.items():  # each one's output from a zeroed cache
            buf.zero_()
            fn()
            torch.cuda.synchronize()
            assert torch.equal(rows[loc], kv.squeeze(1)), f"{title} T={t} {name}: cache rows differ"
        copy = None
        if yardstick is not None and t * (NOPE + ROPE) * 2 % (1 << 14) == 0:  # the copy kernel takes whole 16 KiB tiles
            src = kv.view(-1).view(torch.int32)
            dst = torch.empty_like(src)
            yardstick.copy(dst, src)
            assert torch.equal(dst, src)
            fns["copy"] = copy = lambda dst=dst, src=src: yardstick.copy(dst, src)
        if check_only:
            print(f"| {t} | {len(fns)} columns equal to torch |", flush=True)
            continue
        m = interleaved(fns)
        mine = m["jitkern"]
        copied = (f"{m['copy']:.2f}", f"{100 * m['copy'] / mine:.0f}%") if copy else ("-", "-")
        print(f"| {t} | " + " | ".join(f"{m[n]:.2f}" for n in names) + f" | {copied[0]} | " +
              " | ".join(f"{m[n] / mine:.2f}x" for n in names[1:]) + f" | {copied[1]} |", flush=True)


if __name__ == "__main__":
    if "variants" in sys.argv[1:]:
        variants("--check" in sys.argv[1:], "--quick" in sys.argv[1:])
    else:
        main()
