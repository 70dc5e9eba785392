"""Launch schedules of the norm, fp8 quantization (per group, per token), KV-store and MLA concatenation kernels
(benchmarks/kernels/schedules.cuh)
beside the product op, the reference's newest kernel and the launch floor (an empty kernel), same inputs,
one process: CUDA-graph replay medians, median of 3 interleaved rounds, bf16. What the launch rules
(include/jitkern/policy.cuh, impl/norm_launch.cuh, csrc/quant.cuh, csrc/kv_rows.cuh) are chosen from.
Prints markdown tables, fastest first per shape; `bench_schedules.py [--check] [rmsnorm] [quant] [quant_sglang] [quant_sglang_wave]
[quant_ue8m0] [qknorm] [store] [token_quant] [concat]`: those tables only; --check: each variant's output against the
product's, no timing."""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_reference import DTYPE, rand  # noqa: E402
from utils import environment, interleaved, overhead_module, reference_builder, reference_ops_or_none, reference_version  # noqa: E402

import jitkern  # noqa: E402
from jitkern import ops  # noqa: E402
from jitkern.jit import warmup as build_all  # noqa: E402

TRIGGER = {0: "start", 1: "after wait", 2: "end"}


def module():
    """The schedule kernels' module, built in one parallel build with the product ops' modules (bf16)."""
    here = Path(__file__).resolve().parent
    spec = jitkern.JitSpec("bench_schedules", cuda_files=[str(here / "kernels" / "schedules.cuh")],
                           cuda_wrappers=[("rmsnorm", "bench_schedules::rmsnorm_schedule"), ("qknorm", "bench_schedules::qknorm_schedule"),
                                          ("group_quant", "bench_schedules::group_quant_schedule"),
                                          ("rmsnorm_static", "bench_schedules::rmsnorm_static"), ("store", "bench_schedules::store_schedule"),
                                          ("token_quant", "bench_schedules::token_quant_schedule"),
                                          ("concat", "bench_schedules::concat_schedule")],
                           extra_include_paths=[str(here.parent / "csrc")], host_without_nvcc=True)
    products = ops.specs(ops=["rmsnorm", "fused_inplace_qknorm", "per_token_group_quant_8bit", "store_cache", "per_token_quant_fp8",
                              "concat_mla_absorb_q"], dtypes=["bfloat16"])
    return build_all(spec, *products)[0]


def table(title: str, shapes, check_only: bool = False) -> None:
    """shapes: (shape label, {variant: fn}, check): check() compares every variant's output with the product's."""
    print(f"\n#### {title}\n")
    for label, fns, check in shapes:
        try:
            check()
        except AssertionError as e:  # reported; the timing still says what the schedule costs
            print(f"<!-- {label}: {e} -->")
            if check_only:
                raise
        if check_only:
            print(f"| {label} | {len(fns)} variants equal to the product |", flush=True)
            continue
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        ranked = sorted(interleaved(fns).items(), key=lambda kv: kv[1])
        print(f"| {label} | " + " | ".join(f"{name} {t:.2f}" for name, t in ranked) + " |", flush=True)


FLOOR = "floor: empty kernel"


def with_floor(variants: dict) -> dict:
    """The launch floor beside the variants: an empty one-warp kernel launched as the ops are (PDL wait only)."""
    empty, i = overhead_module().launch_empty_pdl, torch.zeros(16, device="cuda", dtype=torch.int32)
    variants[FLOOR] = lambda: empty(i, i)
    return variants


def rmsnorm_shapes(m, ref):
    for t, h in [(1, 4096), (16, 4096), (128, 4096), (1, 2048), (64, 8192), (4096, 4096)]:
        x, w = rand(t, h), rand(h)
        out, expected = torch.empty_like(x), torch.empty_like(x)
        variants = {"product": lambda x=x, w=w, out=out: ops.rmsnorm(x, w, out)}
        if ref is not None:
            variants["reference"] = lambda x=x, w=w, out=out: ref.rmsnorm(x, w, out)
        for r, trig, rows in [(4, 0, 0), (4, 2, 0), (2, 2, 0), (2, 2, 2)]:  # the product's kernel as launched now, then other shapes
            if (h // 8) % (32 * r) == 0 and h // 8 // r <= 1024:
                variants[f"{h // 8 // r}x{r} {TRIGGER[trig]}{['', ' token-rows', ' slim'][rows]}"] = (
                    lambda x=x, w=w, out=out, r=r, trig=trig, rows=rows: m.rmsnorm(x, w, out, r, trig, rows))
        for r, trig in [(1, 2), (2, 0), (2, 2), (4, 0), (4, 2)]:
            if h // 8 // r <= 1024:
                variants[f"static {h // 8 // r}x{r} {TRIGGER[trig]}"] = (
                    lambda x=x, w=w, out=out, r=r, trig=trig: m.rmsnorm_static(x, w, out, r, trig))
        with_floor(variants)

        def check(x=x, w=w, out=out, expected=expected, variants=variants):
            ops.rmsnorm(x, w, expected)
            for name, fn in variants.items():
                if name == "reference" or name.startswith(FLOOR):
                    continue
                out.fill_(0)
                fn()
                assert torch.equal(out, expected), f"rmsnorm variant {name} differs from the product"
        yield f"[{t}, {h}]", variants, check


QK_ACCESS = ["generic ld/st", "ld.global/st.global", "ld.global.L1::no_allocate/st.global.cs"]


def qknorm_shapes(m, ref):
    for t in (8192, 32768):
        q, k, qw, kw = rand(t, 32, 128), rand(t, 8, 128), rand(128), rand(128)
        variants = {"product": lambda q=q, k=k, qw=qw, kw=kw: ops.fused_inplace_qknorm(q, k, qw, kw)}
        if ref is not None:
            variants["reference"] = lambda q=q, k=k, qw=qw, kw=kw: ref.fused_inplace_qknorm(q, k, qw, kw)
        # (rows a lane group takes a pass, threads, persistent, trigger, access): the reference's schedule
        # (persistent CTAs of 128, a row a group, trigger after the last row), then the product's, then others.
        for rows, threads, pers, trig, access in [(1, 128, 1, 2, 0), (1, 128, 1, 2, 1), (1, 128, 1, 2, 2), (2, 256, 0, 1, 0),
                                                  (2, 256, 0, 1, 1), (2, 256, 0, 1, 2), (2, 256, 1, 2, 1), (1, 256, 0, 1, 1)]:
            variants[f"{threads}t {rows} rows{' persistent' if pers else ''} {TRIGGER[trig]}, {QK_ACCESS[access]}"] = (
                lambda q=q, k=k, qw=qw, kw=kw, a=(rows, threads, pers, trig, access): m.qknorm(q, k, qw, kw, *a))
        with_floor(variants)

        def check(q=q, k=k, qw=qw, kw=kw, variants=variants):
            q0, k0 = q.clone(), k.clone()
            eq, ek = q.clone(), k.clone()
            ops.fused_inplace_qknorm(eq, ek, qw, kw)
            for name, fn in variants.items():
                if name == "reference" or name.startswith(FLOOR):
                    continue
                q.copy_(q0), k.copy_(k0)
                fn()
                assert torch.equal(q, eq) and torch.equal(k, ek), f"qknorm variant {name} differs from the product"
            q.copy_(q0), k.copy_(k0)
        yield f"T={t}", variants, check


def token_quant_shapes(m, ref):
    for t in (256, 1024, 4096):
        x = rand(t, 4096)
        q = torch.empty(t, 4096, device="cuda", dtype=torch.float8_e4m3fn)
        s = torch.empty(t, 1, device="cuda", dtype=torch.float32)
        variants = {"product": lambda x=x, q=q, s=s: ops.per_token_quant_fp8(x, q, s)}
        if ref is not None:
            variants["reference"] = lambda x=x, q=q, s=s: ref.per_token_quant_fp8(x, q, s)
        # (vectors a thread, two passes, CTA threads): a CTA a row of 256 / 128 / 512 threads (the product's kernel),
        # then a warp a row reading it twice as the reference does (jitkern's arithmetic).
        for r, two, threads in [(2, 0, 0), (4, 0, 0), (1, 0, 0), (4, 1, 256)]:
            name = f"a warp a row read twice (the reference's layout), {r} vectors a lane in flight, {threads}t" if two else (
                f"a CTA a row, {4096 // 8 // r}x{r}")
            variants[name] = lambda x=x, q=q, s=s, a=(r, two, threads): m.token_quant(x, q.view(torch.uint8), s.view(-1), *a)
        with_floor(variants)

        def check(x=x, q=q, s=s, variants=variants):
            eq, es = ops.per_token_quant_fp8(x)
            for name, fn in variants.items():
                if name == "reference" or name.startswith(FLOOR):
                    continue
                q.view(torch.uint8).fill_(0), s.fill_(0)
                fn()
                assert torch.equal(q.view(torch.uint8), eq.view(torch.uint8)) and torch.equal(s.view(-1), es.view(-1)), (
                    f"per-token quant variant {name} differs")
        yield f"[{t}, 4096]", variants, check


CONCAT = {2: "the output's vectors in order, 2 a thread (the product beyond 4 waves of rows)",
          31: "a warp a row (the product's kernel and CTAs)", 30: "a warp a row (the product's kernel), 256t", 10: "a warp a row, contiguous rows only, 256t",
          20: "a warp a row, 64-bit division and strides (the product before), 256t"}


def concat_shapes(m, ref):
    """[T, 128, 512 + 64] at decode sizes around a wave of rows a warp each (132 SMs x 64 warps: T = 66), at
    T = 64 with a as the absorbed q's bmm leaves it ([128, T, 512] transposed: a division a row), and at
    prefill sizes beyond the launch rule's 4 waves (T = 264): both of its arms at every size."""
    for t, transposed in [(1, False), (16, False), (32, False), (64, False), (64, True), (128, False), (256, False), (1024, False),
                          (4096, False)]:
        a = rand(128, t, 512).transpose(0, 1) if transposed else rand(t, 128, 512)
        b = rand(t, 128, 64)
        out = torch.empty(t, 128, 576, device="cuda", dtype=DTYPE)
        variants = {"product": lambda a=a, b=b: ops.concat_mla_absorb_q(a, b)}
        if ref is not None:
            variants["reference"] = lambda a=a, b=b: ref.concat_mla_absorb_q(a, b)
        for v, name in CONCAT.items():
            # 30: the product's CTAs from 5 tokens on; 10: contiguous only; 10 and 20: decode sizes only
            if (v == 30 and t > 4) or (v == 10 and transposed) or (v in (10, 20) and t > 256):
                continue
            variants[name] = lambda a=a, b=b, out=out, v=v: m.concat(a, b, out, v)
        with_floor(variants)

        def check(a=a, b=b, out=out, variants=variants):
            expected = torch.cat([a, b], dim=-1)
            assert torch.equal(ops.concat_mla_absorb_q(a, b), expected), "the product's concatenation is wrong"
            for name, fn in variants.items():
                if name in ("product", "reference") or name.startswith(FLOOR):
                    continue
                out.zero_()
                fn()
                assert torch.equal(out, expected), f"concat variant {name} differs"
        yield f"[{t}, 128, 512 + 64]{', a transposed' if transposed else ''}", variants, check


# group_quant_schedule's variants (benchmarks/kernels/schedules.cuh): (16-byte vectors a lane (0: the general
# kernel under its launch rule), contiguous lanes, CTA threads, trigger, IEEE scale divisions, flags: 1 every lane
# stores the scale, 2 warps past the last group return before the wait, 4 UE8M0: dividing by the scale).
GROUP_TRIGGER = {**TRIGGER, 3: "after the loads"}
GROUP_FLAGS = {1: "every lane stores the scale", 2: "warps past the end return before the wait",
               4: "dividing by the scale (two corrections a value)"}


def _group_variant(per_lane: int, contiguous: int, threads: int, trigger: int, ieee: int, flags: int) -> str:
    if per_lane == 0:
        return "the general kernel alone"
    extra = [", IEEE scale division"] * ieee + [f", {name}" for bit, name in GROUP_FLAGS.items() if flags & bit]
    return (f"lean {per_lane} vectors a lane{' contiguous' if contiguous else ' strided'}, {threads}t {GROUP_TRIGGER[trigger]}"
            + "".join(extra))


GROUP_VARIANTS = [(0, 0, 0, 0, 0, 0), (2, 1, 256, 2, 0, 0), (2, 1, 256, 2, 1, 0), (2, 0, 256, 2, 0, 0), (2, 1, 128, 2, 0, 0),
                  (2, 1, 128, 1, 0, 0), (2, 1, 64, 2, 0, 0), (4, 0, 256, 2, 0, 0), (4, 0, 128, 2, 0, 0), (4, 0, 128, 1, 0, 0),
                  (4, 0, 64, 2, 0, 0), (8, 1, 256, 2, 0, 0), (8, 1, 128, 2, 0, 0)]
SGLANG_GROUP_VARIANTS = [(0, 0, 0, 0, 0, 0), (2, 1, 256, 2, 0, 0), (2, 1, 256, 1, 0, 0), (2, 1, 128, 0, 0, 0), (2, 1, 128, 1, 0, 0)]
# rounding="sglang" where the rule takes CTAs of 256 (more than 1024 threads an SM): triggering after their stores (the
# rule before), after their loads (the rule's), and other candidates.
SGLANG_WAVE_VARIANTS = [(2, 1, 256, 2, 0, 0), (2, 1, 256, 3, 0, 0), (2, 1, 512, 2, 0, 0), (2, 1, 1024, 2, 0, 0), (2, 1, 256, 2, 0, 1),
                        (2, 1, 256, 2, 0, 2), (2, 1, 256, 2, 0, 3), (4, 1, 256, 2, 0, 0)]
UE8M0_GROUP_VARIANTS = [(0, 0, 0, 0, 0, 0), (2, 1, 256, 2, 0, 0), (2, 1, 256, 2, 0, 4), (2, 1, 128, 0, 0, 0), (2, 1, 128, 0, 0, 4)]


def group_quant_shapes(m, ref, rounding="exact", ue8m0=False, wave=False):
    """[T, 7168] from decode to prefill sizes (T = 256: 14336 groups, one wave of 8-lane groups of more than
    256 threads an SM), and [16 / 256 / 4096, 2048 / 4096]; the product and the variants with this rounding
    (ue8m0: row-major UE8M0 scales, [T, 7168] only; wave: rounding="sglang", the grids of more than 1024 threads
    an SM and [256, 7168], SGLANG_WAVE_VARIANTS)."""
    shapes = [*((t, 7168) for t in (1, 16, 64, 128, 256, 512, 1024, 4096)), *[(256, 2048), (256, 4096)] * (not ue8m0)]
    if rounding == "sglang":
        shapes += [(t, h) for h in (2048, 4096) for t in (16, 4096)]
    if wave:
        shapes = [(256, 7168), (512, 7168), (1024, 7168), (4096, 7168), (4096, 2048), (1024, 4096), (4096, 4096)]
    for t, h in shapes:
        x = rand(t, h)
        q = torch.empty(t, h, device="cuda", dtype=torch.float8_e4m3fn)
        s = (torch.empty(t, h // 128 // 4, device="cuda", dtype=torch.int32) if ue8m0
             else torch.empty(t, h // 128, device="cuda", dtype=torch.float32))
        variants = {"product": lambda x=x, q=q, s=s: ops.per_token_group_quant_8bit(x, 128, scale_ue8m0=ue8m0, rounding=rounding, output_q=q,
                                                                                    output_s=s)}
        if ref is not None:
            variants["reference"] = lambda x=x, q=q, s=s: ref.per_token_group_quant(x, q, s, 128, ue8m0)
        for v in (UE8M0_GROUP_VARIANTS if ue8m0 else SGLANG_WAVE_VARIANTS if wave else SGLANG_GROUP_VARIANTS if rounding == "sglang"
                  else GROUP_VARIANTS):
            per_lane, contiguous, threads, trigger, ieee, flags = v
            variants[_group_variant(*v)] = lambda x=x, q=q, s=s, a=(int(ue8m0), per_lane, contiguous, threads, trigger, ieee,
                                                                    int(rounding == "sglang"), flags): m.group_quant(x, q.view(torch.uint8), s, *a)
        with_floor(variants)

        def check(x=x, q=q, s=s, variants=variants):
            eq, es = ops.per_token_group_quant_8bit(x, 128, scale_ue8m0=ue8m0, rounding=rounding)
            for name, fn in variants.items():
                if (name == "reference" and rounding != "sglang") or name.startswith(FLOOR):
                    continue
                q.view(torch.uint8).fill_(0), s.fill_(0)
                fn()
                assert torch.equal(q.view(torch.uint8), eq.view(torch.uint8)) and torch.equal(s, es), f"group quant variant {name} differs"
        yield f"[{t}, {h}]", variants, check


STORE_TRIGGER = {0: "start", 1: "after wait", 2: "end", 3: "after loads"}


def store_shapes(m, ref):
    for t in (16, 256, 1024):
        k, v = rand(t, 8, 128), rand(t, 8, 128)
        kc, vc = torch.zeros(65536, 8, 128, device="cuda", dtype=DTYPE), torch.zeros(65536, 8, 128, device="cuda", dtype=DTYPE)
        loc = torch.randperm(65536, device="cuda")[:t]
        variants = {"product": lambda k=k, v=v, kc=kc, vc=vc, loc=loc: ops.store_cache(k, v, kc, vc, loc)}
        if ref is not None:
            variants["reference"] = lambda k=k, v=v, kc=kc, vc=vc, loc=loc, t=t: ref.store_cache(k.view(t, -1), v.view(t, -1), kc.view(65536, -1),
                                                                                               vc.view(65536, -1), loc)
        for trig, layout in [(1, 0), (3, 0), (3, 1), (2, 0), (0, 0)]:
            variants[f"static {STORE_TRIGGER[trig]}{' layout' if layout else ''}"] = (
                lambda k=k, v=v, kc=kc, vc=vc, loc=loc, trig=trig, layout=layout: m.store(k, v, kc, vc, loc, trig, layout))
        with_floor(variants)

        def check(k=k, v=v, kc=kc, vc=vc, loc=loc, variants=variants):
            for name, fn in variants.items():
                if name in ("product", "reference") or name.startswith(FLOOR):
                    continue
                kc.zero_(), vc.zero_()
                fn()
                assert torch.equal(kc[loc], k) and torch.equal(vc[loc], v), f"store variant {name} misplaces rows"
        yield f"T={t}", variants, check


def main() -> None:
    start = time.perf_counter()
    # Each of the reference's op modules that loads (the schedules are still compared with the product without it).
    modules = {path: reference_ops_or_none(path) for path in ["layernorm.norm", "quantization.per_token_group_quant", "kvcache.kvcache",
                                                              "quantization.per_token_quant_fp8", "attention.concat_mla"]}
    builder = reference_builder() if any(modules.values()) else "nothing"
    m = module()
    norm, quant = modules.get("layernorm.norm"), modules.get("quantization.per_token_group_quant")
    kv, token_quant, concat = (modules.get(p) for p in ["kvcache.kvcache", "quantization.per_token_quant_fp8", "attention.concat_mla"])
    print(f"\n### Launch schedules ({environment()}; reference SGLang {reference_version()}, built by {builder})")
    print("\nus, fastest first; NxR: N threads of R 16-byte vectors; static: the row's width a compile-time constant; trigger: where "
          "the PDL trigger is (start, after the wait, after the loads, after the last store).")
    check_only = "--check" in sys.argv
    wanted = [a for a in sys.argv[1:] if a != "--check"] or ["rmsnorm", "quant", "quant_sglang", "quant_sglang_wave", "quant_ue8m0", "qknorm",
                                                              "store", "token_quant", "concat"]
    tables = {title: list(shapes(m, ref)) for name, title, shapes, ref in [
        ("rmsnorm", "rmsnorm, bf16", rmsnorm_shapes, norm),
        ("quant", "fp8 group quantization, group 128, bf16 [T, H]", group_quant_shapes, quant),
        ("quant_sglang", 'fp8 group quantization, rounding="sglang", group 128, bf16 [T, H]',
         lambda m, ref: group_quant_shapes(m, ref, "sglang"), quant),
        ("quant_sglang_wave", 'fp8 group quantization, rounding="sglang", group 128, bf16 [T, H], grids of more than 1024 threads an SM',
         lambda m, ref: group_quant_shapes(m, ref, "sglang", wave=True), quant),
        ("quant_ue8m0", "fp8 group quantization, UE8M0 scales (row-major), group 128, bf16 [T, H]",
         lambda m, ref: group_quant_shapes(m, ref, ue8m0=True), quant),
        ("qknorm", "qknorm, 32 q + 8 k heads x 128, bf16", qknorm_shapes, norm),
        ("store", "store_cache, k and v rows of 8 x 128 bf16, 65536 slots, scattered", store_shapes, kv),
        ("token_quant", "per_token_quant_fp8, bf16 [T, 4096]", token_quant_shapes, token_quant),
        ("concat", "concat_mla_absorb_q, bf16", concat_shapes, concat)] if name in wanted}

    def first_call(fns):
        try:
            fns["reference"]()
        except Exception as e:  # noqa: BLE001 - the table goes on without the reference
            print(f"<!-- reference left out: {type(e).__name__}: {str(e)[:300]} -->")
            del fns["reference"]

    # The reference's builds at once, one call per module it builds (rmsnorm: one per hidden size), then the rest.
    firsts = {}
    for title, shapes in tables.items():
        for label, fns, _ in shapes:
            if "reference" in fns:
                firsts.setdefault((title, label.split(", ")[-1] if label.startswith("[") and title.startswith("rmsnorm") else ""), fns)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(first_call, firsts.values()))
    for fns in [fns for shapes in tables.values() for _, fns, _ in shapes if "reference" in fns]:
        first_call(fns)
    print(f"<!-- built in {time.perf_counter() - start:.0f} s -->")
    for title, shapes in tables.items():
        table(title, shapes, check_only)
    print(f"<!-- {time.perf_counter() - start:.0f} s in all -->")


if __name__ == "__main__":
    main()
