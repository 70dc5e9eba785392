"""Per-head QK RMSNorm + RoPE (+ the KV-cache write) in one kernel (jitkern.ops.fused_qknorm_rope) against
the sequence of jitkern's unfused ops and, where it imports (REFERENCE_WHEEL, see utils.reference_path),
the reference framework's (SGLang's) fused_qk_norm_rope (in place on the qkv buffer, no cache write; it
computes cos/sin from the RoPE base instead of reading a table). q 32 heads, kv 8 heads, head dim 128,
bf16, q/k/v column slices of one fused qkv buffer, NeoX style, fp32 cos/sin cache, a paged cache of
16-token pages. Decode: one token per request (random positions, each in its own random page); prefill:
one sequence (positions 0..T-1, its pages a random permutation). Prints markdown tables.

Bytes moved: q and k read and written back (and, with the cache write, v read and the k and v cache rows
written), positions (and locations) and the cos/sin rows read. The pattern ceilings are kernels that move the q,
k, v and cache bytes alone (benchmarks/kernels/copy_ceiling.cuh: rewrite_to_cache with the write, rewrite_columns
without); the gathered pattern moves every byte the op does with RoPE's one dependency: a token's q and k are
written back only after its cos/sin row has arrived, read once its position has (rewrite_to_cache_gathered,
rewrite_gathered).

--schedules: the product beside its kernels under other launch choices and the staged kernel's floor (its heads
copied back unchanged) (SCHEDULES, benchmarks/kernels/qknorm_rope_schedules.cuh), each checked bit for bit against
the product before it is timed (the floor differs, noted), with and without the cache write; --sizes=T,T,... picks
the token counts (default 1, 64, 1024, 2048, 4096, 32768), --only=i,j,... the SCHEDULES columns.
Without it, --decode=T,T,... and --prefill=T,T,... replace the main tables' sizes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import (copy_ceiling_text, copy_ceilings, environment, get_benchmark_range, per_call_us, reference_ops_or_none,  # noqa: E402
                   reference_version, yardstick_module)

import bench_rope  # noqa: E402
import jitkern  # noqa: E402
from bench_rope import in_turns  # noqa: E402
from jitkern.ops import (FusedSetKVBufferArg, apply_rope_with_cos_sin_cache_inplace, fused_inplace_qknorm, fused_qknorm_rope,  # noqa: E402
                         rotary_embedding, store_cache, warmup)

HQ, HK, D, PAGE = bench_rope.HQ, bench_rope.HK, bench_rope.D, bench_rope.PAGE
EPS, BASE = 1e-6, 1e6
DTYPE = torch.bfloat16
MAX_POS = bench_rope.MAX_POS
DECODE = get_benchmark_range([1, 2, 4, 8, 16, 32, 64, 128, 256], [1, 64])
PREFILL = get_benchmark_range([4096, 8192, 16384, 32768], [4096])
PAGES = bench_rope.PAGES


def cos_sin_cache():
    inv_freq = 1.0 / (BASE ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = torch.outer(torch.arange(MAX_POS, dtype=torch.float64), inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).float().cuda()


def reference_fused():
    """The reference's fused_qk_norm_rope(qkv, ...) as fn(qkv, pos32, qw, kw), or (None, why not)."""
    try:
        ref = reference_ops_or_none("attention.fused_qknorm_rope")
        if ref is None:
            return None, "the reference framework is not installed or did not load (REFERENCE_WHEEL)"
        fn = ref.fused_qk_norm_rope
        return (lambda qkv, pos32, qw, kw: fn(qkv, HQ, HK, HK, D, EPS, qw, kw, BASE, True, pos32, 1.0, 0.0, 0.0, 1.0, D)), None
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        return None, f"{type(e).__name__}: {str(e)[:300]}"


def inputs(t, decode):
    """bench_rope's inputs (the same shapes, positions and cache locations) and their qkv buffer."""
    q, k, v, pos, loc = bench_rope.inputs(t, decode)
    return torch.as_strided(q, (t, (HQ + 2 * HK) * D), q.stride()), q, k, v, pos, loc


def moved_bytes(t, store):
    qk = 2 * (HQ + HK) * D * 2
    return t * (qk + (3 * HK * D * 2 + 8 if store else 0) + 8 + D * 4)


def cover(sizes) -> None:
    """The paged caches (bench_rope's inputs' too) large enough for the sizes asked for (CI=1 sizes them for its own)."""
    global PAGES
    PAGES = bench_rope.PAGES = max(bench_rope.PAGES, 2 * max(sizes) // PAGE)


def pattern_kernel(yard, qkv, loc, kc, vc, store):
    """The access pattern's ceiling: a kernel that moves the op's bytes and nothing else."""
    words = qkv.view(torch.int32)
    if store:
        kc32, vc32 = kc.view(torch.int32).view(-1), vc.view(torch.int32).view(-1)
        return lambda: yard.rewrite_to_cache(words, loc, kc32, vc32, (HQ + HK) * D * 2 // 16, HK * D * 2 // 16, 0)
    return lambda: yard.rewrite_columns(words, (HQ + HK) * D // 2, 0)


def gathered_kernel(yard, qkv, pos, table, loc, kc, vc, store):
    """The op's whole access pattern (its cos/sin rows too) with RoPE's dependency and no arithmetic."""
    words = qkv.view(torch.int32)
    if store:
        kc32, vc32 = kc.view(torch.int32).view(-1), vc.view(torch.int32).view(-1)
        return lambda: yard.rewrite_to_cache_gathered(words, loc, pos, table, kc32, vc32, (HQ + HK) * D * 2 // 16, HK * D * 2 // 16, 0)
    return lambda: yard.rewrite_gathered(words, pos, table, (HQ + HK) * D * 2 // 16, 0)


def check(cs, qw, kw, kc, vc, ref):
    """The fused op agrees with the unfused sequence (and the reference's op, where it runs) before anything is timed."""
    qkv, q, k, v, pos, loc = inputs(64, True)
    qkv2 = qkv.clone()
    q2, k2, v2 = qkv2[:, : HQ * D], qkv2[:, HQ * D : (HQ + HK) * D], qkv2[:, (HQ + HK) * D :]
    fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, True, FusedSetKVBufferArg(v, kc, vc, None, None, loc))
    fused_inplace_qknorm(q2, k2, qw, kw, EPS, head_dim=D)
    rotary_embedding(pos, q2, k2, D, cs, True)
    torch.testing.assert_close(qkv, qkv2, rtol=1.6e-2, atol=1.6e-2)
    assert torch.equal(kc.view(-1, HK * D)[loc], k) and torch.equal(vc.view(-1, HK * D)[loc], v)
    if ref is not None:
        qkv3, _, _, _, _, _ = inputs(64, True)
        qkv4 = qkv3.clone()
        try:
            ref(qkv3, pos.int(), qw, kw)
            fused_qknorm_rope(pos, qkv4[:, : HQ * D], qkv4[:, HQ * D : (HQ + HK) * D], qw, kw, cs, EPS, True)
            print(f"<!-- reference fused_qk_norm_rope: max |qkv - jitkern| = {(qkv3.float() - qkv4.float()).abs().max().item():.3g} -->")
        except Exception as e:  # noqa: BLE001
            print(f"<!-- reference fused_qk_norm_rope failed its check call: {type(e).__name__}: {str(e)[:300]} -->")


def main(decode=DECODE, prefill=PREFILL) -> None:
    warmup(ops=["fused_qknorm_rope", "fused_inplace_qknorm", "apply_rope_with_cos_sin_cache_inplace", "rotary_embedding", "store_cache"],
           dtypes=[DTYPE])
    cs = cos_sin_cache()
    qw, kw = (torch.rand(D, device="cuda") + 0.5).to(DTYPE), (torch.rand(D, device="cuda") + 0.5).to(DTYPE)
    kc, vc = (torch.zeros(PAGES, PAGE, HK, D, dtype=DTYPE, device="cuda") for _ in range(2))
    ref, why = reference_fused()
    check(cs, qw, kw, kc, vc, ref)
    ceilings = copy_ceilings(use_cudagraph=True)
    ceiling = max(ceilings.values())
    yard = yardstick_module()
    table = cs.view(torch.int32)
    print(f"\n### QK-norm + RoPE (+ KV-cache write), q {HQ} / kv {HK} heads, d {D}, bf16, paged cache of {PAGE}-token pages "
          f"({environment()})\n")
    print(f"Measured copy ceiling: {copy_ceiling_text(ceilings)}. Times are CUDA-graph medians in us (p20-p80), each from the "
          f"median one of {bench_rope.ROUNDS} rounds in which every column and the pattern kernel take turns.\n")
    if ref is None:
        print(f"- not run: the reference's fused_qk_norm_rope: {why}")

    def fused_store(qkv, q, k, v, pos, loc):
        fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, True, FusedSetKVBufferArg(v, kc, vc, None, None, loc))

    def norm_then_fused_rope(qkv, q, k, v, pos, loc):
        fused_inplace_qknorm(q, k, qw, kw, EPS, head_dim=D)
        apply_rope_with_cos_sin_cache_inplace(pos, q, k, D, cs, True, FusedSetKVBufferArg(v, kc, vc, None, None, loc))

    def three_ops(qkv, q, k, v, pos, loc):
        fused_inplace_qknorm(q, k, qw, kw, EPS, head_dim=D)
        rotary_embedding(pos, q, k, D, cs, True)
        store_cache(k, v, kc, vc, loc)

    def fused_only(qkv, q, k, v, pos, loc):
        fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, True)

    def norm_then_rope(qkv, q, k, v, pos, loc):
        fused_inplace_qknorm(q, k, qw, kw, EPS, head_dim=D)
        rotary_embedding(pos, q, k, D, cs, True)

    tables = {
        "with the KV-cache write": ({"jitkern fused": fused_store, "jitkern qknorm, then RoPE + write": norm_then_fused_rope,
                                     "jitkern qknorm, rotary_embedding, store_cache": three_ops}, True),
        "without the cache write": ({"jitkern fused": fused_only, "jitkern qknorm, then rotary_embedding": norm_then_rope,
                                     **({"reference fused_qk_norm_rope": lambda qkv, q, k, v, pos, loc: ref(qkv, pos, qw, kw)} if ref else {})},
                                    False),
    }
    for title, (providers, store) in tables.items():
        names = list(providers)
        print(f"\n#### {title}\n")
        print("| phase | T | " + " | ".join(f"{n} us" for n in names) + " | fused GB/s | fused % of copy ceiling | pattern ceiling us | "
              "fused % of pattern | gathered pattern us | fused % of gathered | " + " | ".join(f"{n} / fused" for n in names[1:]) + " |")
        print("|---|---|" + "---|" * (len(names) + 6 + len(names) - 1))
        for phase, sizes in (("decode", decode), ("prefill", prefill)):
            for t in sizes:
                qkv, q, k, v, pos, loc = inputs(t, phase == "decode")
                fns_gathered = gathered_kernel(yard, qkv, pos, table, loc, kc, vc, store)
                if ref is not None and not store:
                    pos = pos.int()  # the reference takes int32 positions
                fns = {name: (lambda fn=fn: fn(qkv, q, k, v, pos, loc)) for name, fn in providers.items()}
                fns["pattern"] = pattern_kernel(yard, qkv, loc, kc, vc, store)
                fns["gathered"] = fns_gathered
                res = in_turns(fns, t)
                pattern, gathered = res.pop("pattern"), res.pop("gathered")
                fused = res["jitkern fused"]["median"]
                gbps = moved_bytes(t, store) / (fused * 1e-6) / 1e9
                cells = " | ".join("n/a" if r is None else f"{r['median']:.2f} [{r['p20']:.2f}-{r['p80']:.2f}]" for r in res.values())
                ratios = " | ".join("n/a" if res[n] is None else f"{res[n]['median'] / fused:.2f}x" for n in names[1:])
                print(f"| {phase} | {t} | {cells} | {gbps:.0f} | {100 * gbps / ceiling:.1f}% | {pattern['median']:.2f} | "
                      f"{100 * pattern['median'] / fused:.1f}% | {gathered['median']:.2f} | {100 * gathered['median'] / fused:.1f}% | {ratios} |")
    qkv, q, k, v, pos, loc = inputs(1, True)
    arg = FusedSetKVBufferArg(v, kc, vc, None, None, loc)
    print("\n#### Host time per eager call, T = 1 (us)\n")
    print("| path | us per call |")
    print("|---|---|")
    print(f"| fused_qknorm_rope + FusedSetKVBufferArg | {per_call_us(lambda: fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, True, arg)):.2f} |")
    print(f"| fused_qknorm_rope | {per_call_us(lambda: fused_qknorm_rope(pos, q, k, qw, kw, cs, EPS, True)):.2f} |")


# ---- launch schedules (--schedules) ---------------------------------------------------------------

# (name, the C++ type whose apply / apply_store run it), the product first.
SCHEDULES = [("product", "jitkern_qknorm_rope::QkNormRopeOps<bf16_t>"),
             ("floor: the staged kernel copying its heads back unchanged", "bench_qknorm_rope::Schedule<64, 2, 96, true, false, bench_qknorm_rope::CopyHead>"),
             ("staged (the product's) at every size", "bench_qknorm_rope::Schedule<64>"),
             ("staged, 128 registers", "bench_qknorm_rope::Schedule<64, 2, 128>"),
             ("staged, CTAs of 128", "bench_qknorm_rope::Schedule<128>"),
             ("staged, CTAs of 160 (a token's 40 heads in two turns)", "bench_qknorm_rope::Schedule<160>"),
             ("one head a lane group, PDL trigger at the start", "bench_qknorm_rope::Schedule<0, 2, 96, true, false, jitkern_qknorm_rope::NormRopeHead, bench_qknorm_rope::Ops::Setup::Trigger::kAtStart>"),
             ("one head a lane group, PDL trigger by the library's rule (at the start up to 8 CTAs)",
              "bench_qknorm_rope::Schedule<0, 2, 96, true, false, jitkern_qknorm_rope::NormRopeHead, bench_qknorm_rope::Ops::Setup::Trigger::kByRule>"),
             ("staged, a grid of the CTAs the SMs hold at once (tokens in turn at every size)",
              "bench_qknorm_rope::Schedule<64, 2, 96, true, false, jitkern_qknorm_rope::NormRopeHead, bench_qknorm_rope::Ops::Setup::Trigger::kAfterWait, 1>"),
             ("floor, a grid of the CTAs the SMs hold at once",
              "bench_qknorm_rope::Schedule<64, 2, 96, true, false, bench_qknorm_rope::CopyHead, bench_qknorm_rope::Ops::Setup::Trigger::kAfterWait, 1>")]


def schedule_module():
    here = Path(__file__).resolve().parent
    wrappers = [(f"{export}_{i}", f"{cpp}::{export}") for i, (_, cpp) in enumerate(SCHEDULES) for export in ("apply", "apply_store")]
    return jitkern.load_jit("bench_qknorm_rope_schedules", cuda_files=[str(here / "kernels" / "qknorm_rope_schedules.cuh")],
                            extra_include_paths=[str(here.parent / "csrc")], cuda_wrappers=wrappers, host_without_nvcc=True)


def schedules(sizes, only=None) -> None:
    """only: the SCHEDULES indices to run (None: all)."""
    start = time.perf_counter()
    module = schedule_module()
    built = time.perf_counter() - start
    cs = cos_sin_cache()
    qw, kw = (torch.rand(D, device="cuda") + 0.5).to(DTYPE), (torch.rand(D, device="cuda") + 0.5).to(DTYPE)
    kc, vc = (torch.zeros(PAGES, PAGE, HK, D, dtype=DTYPE, device="cuda") for _ in range(2))
    yard = yardstick_module()
    print(f"\n### QK-norm + RoPE launch schedules, q {HQ} / kv {HK} heads, d {D}, bf16, NeoX, paged cache of {PAGE}-token pages "
          f"({environment()}; reference {reference_version()}; built in {built:.0f} s)\n")
    print("CUDA-graph medians in us, one round in turns with the pattern kernel; (x%): the pattern's time / the schedule's. Every "
          "schedule's q, k and cache rows equal the product's bit for bit (else a note).\n")
    print("| write | T | pattern us | gathered pattern us | " + " | ".join(name for name, _ in SCHEDULES) + " |")
    print("|---|---|---|---|" + "---|" * len(SCHEDULES))
    for store in (True, False):
        for t in sizes:
            qkv, q, k, v, pos, loc = inputs(t, t <= 256)
            src = qkv.clone()

            def call(i, qkv=qkv, q=q, k=k, v=v, pos=pos, loc=loc):
                if store:
                    return module[f"apply_store_{i}"](pos, q.view(t, HQ, D), k.view(t, HK, D), qw, kw, cs, EPS, 0.0, True, 0, 0, 0, False,
                                                       v.view(t, HK, D), kc, vc, loc, 1.0, 1.0)
                return module[f"apply_{i}"](pos, q.view(t, HQ, D), k.view(t, HK, D), qw, kw, cs, EPS, 0.0, True, 0, 0, 0, False)

            picked = [i for i in range(len(SCHEDULES)) if only is None or i in only]
            outputs = []
            for i in picked:
                qkv.copy_(src), kc.fill_(0), vc.fill_(0)
                call(i)
                outputs.append((qkv.clone(), kc.view(-1, HK * D)[loc].clone(), vc.view(-1, HK * D)[loc].clone()))
            for i, got in zip(picked[1:], outputs[1:]):
                if not all(torch.equal(a, b) for a, b in zip(got, outputs[0])):
                    print(f"<!-- T={t} write={store}: {SCHEDULES[i][0]} differs from {SCHEDULES[picked[0]][0]} -->")
            fns = {i: (lambda i=i: call(i)) for i in picked}
            fns["pattern"] = pattern_kernel(yard, qkv, loc, kc, vc, store)
            fns["gathered"] = gathered_kernel(yard, qkv, pos, cs.view(torch.int32), loc, kc, vc, store)
            res = in_turns(fns, t)
            pattern, gathered = res.pop("pattern")["median"], res.pop("gathered")["median"]
            cells = " | ".join("n/a" if i not in res or res[i] is None else f"{res[i]['median']:.2f} ({100 * pattern / res[i]['median']:.1f}%)"
                               for i in range(len(SCHEDULES)))
            print(f"| {'yes' if store else 'no'} | {t} | {pattern:.2f} | {gathered:.2f} | {cells} |", flush=True)


if __name__ == "__main__":
    option = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)

    def sizes(name, default):
        return [int(x) for x in option[name].split(",")] if name in option else default

    if "--schedules" in sys.argv[1:]:
        asked = sizes("--sizes", [1, 64, 1024, 2048, 4096, 32768])
        cover(asked)
        schedules(asked, sizes("--only", None))
    else:
        decode, prefill = sizes("--decode", DECODE), sizes("--prefill", PREFILL)
        cover(decode + prefill)
        main(decode, prefill)
