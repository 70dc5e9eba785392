"""RoPE fused with the KV-cache write (jitkern.ops.apply_rope_with_cos_sin_cache_inplace with
fused_set_kv_buffer_arg) against RoPE then store_cache, torch eager and torch.compile of the same math, and
the reference framework's (SGLang's) kernels where they import (REFERENCE_WHEEL, see utils.reference_path; its
fused rope also needs an importable `flashinfer` package with its headers under data/include, as the
flashinfer-python wheel installs them). q 32 heads, kv 8 heads, head dim 128, bf16,
q/k/v column slices of one fused qkv buffer, NeoX style, a paged cache of 16-token pages. Decode: one
token per request (random positions, each token in its own random page); prefill: one sequence
(positions 0..T-1, its pages a random permutation). Prints markdown tables.

Bytes moved (fused): q and k read and written back, v read, the k and v cache rows written, positions,
locations and the cos/sin rows read. GB/s and % of the measured copy ceiling use those bytes for every
provider (the unfused pair moves more: it reads k and v again). The pattern ceiling is a kernel that moves
the q, k, v and cache bytes alone (benchmarks/kernels/copy_ceiling.cuh, rewrite_to_cache); the gathered
pattern adds RoPE's one dependency on top: q and k are written back only after the cos/sin row at the
token's position has arrived, which can be read only once the position has (rewrite_to_cache_gathered)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import (BATCH, BATCHES, copy_ceiling_text, copy_ceilings, environment, get_benchmark_range, is_in_ci,  # noqa: E402
                   per_call_us, reference_module, run_benchmark, yardstick_module)

from jitkern.ops import FusedSetKVBufferArg, apply_rope_with_cos_sin_cache_inplace, rotary_embedding, store_cache, warmup  # noqa: E402
from jitkern.ops.rope import _rope_module  # noqa: E402

HQ, HK, D, PAGE = 32, 8, 128, 16
ROUNDS = 1 if is_in_ci() else 3  # rounds of the main table (in_turns)
DTYPE = torch.bfloat16
MAX_POS = 65536
DECODE = get_benchmark_range([1, 2, 4, 8, 16, 32, 64], [1, 64])
PREFILL = get_benchmark_range([4096, 8192, 16384, 32768], [4096])
PAGES = 2 * max(PREFILL) // PAGE


def cos_sin_cache():
    inv_freq = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = torch.outer(torch.arange(MAX_POS, dtype=torch.float64), inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).float().cuda()


def eager_rope_store(q, k, v, pos, cs, kc, vc, loc):
    """The same math in torch: NeoX RoPE on q and k in place (fp32), then the k and v rows to the cache
    (kc, vc: the caches seen as [slots, HK * D], made outside, so that torch.compile writes the rows in
    place instead of copying whole caches)."""
    t = q.shape[0]
    cos, sin = cs[pos].chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]

    def rot(x, heads):
        x = x.view(t, heads, D).float()
        x1, x2 = x[..., : D // 2], x[..., D // 2 :]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(DTYPE).view(t, heads * D)

    q.copy_(rot(q, HQ))
    k.copy_(rot(k, HK))
    kc.index_put_((loc,), k)
    vc.index_put_((loc,), v)


compiled_rope_store = torch.compile(eager_rope_store)


def import_reference(module: str):
    ref = reference_module(module)
    if ref is None:
        raise ImportError("the reference framework is not installed")
    return ref


def reference_kernels():
    """The reference's kernels that import here: {name: callable(q, k, v, pos, cs, cs_bf16, kc, vc, loc)}, and why the others do not
    (its fused rope JIT-builds against the headers of the installed flashinfer package, which a stand-in
    module does not provide)."""
    found, missing = {}, []
    try:
        ref = import_reference("rope")
        RefArg, ref_fused = ref.FusedSetKVBufferArg, ref.apply_rope_with_cos_sin_cache_inplace

        found["reference fused rope (flashinfer-based)"] = lambda q, k, v, pos, cs, cs16, kc, vc, loc: ref_fused(
            pos, q, k, D, cs, True, RefArg(v, kc.view(-1, HK * D), vc.view(-1, HK * D), None, None, loc))
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        missing.append(f"reference fused rope (sglang.jit_kernel.rope): {type(e).__name__}: {e}")
    try:
        ref_store = import_reference("kvcache").store_cache
        ref_rope = import_reference("pos_enc").rotary_embedding

        def ref_pair(q, k, v, pos, cs, cs16, kc, vc, loc):
            ref_rope(pos, q, k, D, cs16, True)
            ref_store(k, v, kc.view(-1, HK * D), vc.view(-1, HK * D), loc)

        found["reference rotary_embedding + store_cache"] = ref_pair
    except Exception as e:  # noqa: BLE001
        missing.append(f"reference rotary_embedding/store_cache (sglang.jit_kernel.pos_enc, .kvcache): {type(e).__name__}: {e}")
    return found, missing


def inputs(t, decode):
    qkv = torch.randn(t, (HQ + 2 * HK) * D, dtype=DTYPE, device="cuda")
    q, k, v = qkv[:, : HQ * D], qkv[:, HQ * D : (HQ + HK) * D], qkv[:, (HQ + HK) * D :]
    pages = torch.randperm(PAGES, device="cuda")
    if decode:
        pos = torch.randint(0, MAX_POS, (t,), device="cuda")
        loc = pages[:t] * PAGE + torch.randint(0, PAGE, (t,), device="cuda")
    else:
        pos = torch.arange(t, device="cuda")
        loc = pages[torch.arange(t, device="cuda") // PAGE] * PAGE + torch.arange(t, device="cuda") % PAGE
    return q, k, v, pos, loc


def moved_bytes(t):
    row = HK * D * 2
    return t * (2 * HQ * D * 2 + 2 * row + row + 2 * row + 8 + 8 + D * 4)


def providers(cs, cs16, kc, vc, refs):
    kc_rows, vc_rows = kc.view(-1, HK * D), vc.view(-1, HK * D)
    fused = lambda q, k, v, pos, loc: apply_rope_with_cos_sin_cache_inplace(  # noqa: E731
        pos, q, k, D, cs, True, FusedSetKVBufferArg(v, kc, vc, None, None, loc))

    def unfused(q, k, v, pos, loc):
        rotary_embedding(pos, q, k, D, cs, True)
        store_cache(k, v, kc, vc, loc)

    out = {"jitkern fused": fused, "jitkern rope then store_cache": unfused,
           "torch eager": lambda q, k, v, pos, loc: eager_rope_store(q, k, v, pos, cs, kc_rows, vc_rows, loc),
           "torch.compile": lambda q, k, v, pos, loc: compiled_rope_store(q, k, v, pos, cs, kc_rows, vc_rows, loc)}
    for name, fn in refs.items():
        out[name] = lambda q, k, v, pos, loc, fn=fn: fn(q, k, v, pos, cs, cs16, kc, vc, loc)
    return out


def check(cs, cs16, kc, vc, refs):
    """The fused op, the torch math and the reference's kernels agree before anything is timed (a wrong
    kernel is not benchmarked)."""
    q, k, v, pos, loc = inputs(64, True)
    q2, k2 = q.clone(), k.clone()
    kc2, vc2 = kc.clone(), vc.clone()
    apply_rope_with_cos_sin_cache_inplace(pos, q, k, D, cs, True, FusedSetKVBufferArg(v, kc, vc, None, None, loc))
    eager_rope_store(q2, k2, v, pos, cs, kc2.view(-1, HK * D), vc2.view(-1, HK * D), loc)
    torch.testing.assert_close(q, q2, rtol=1.6e-2, atol=1.6e-2)
    torch.testing.assert_close(kc.view(-1, HK * D)[loc], kc2.view(-1, HK * D)[loc], rtol=1.6e-2, atol=1.6e-2)
    assert torch.equal(vc.view(-1, HK * D)[loc], v)
    for name, fn in refs.items():
        q3, k3 = q2.clone(), k2.clone()
        kc3 = torch.zeros_like(kc)
        try:
            fn(q3, k3, v, pos, cs, cs16, kc3, torch.zeros_like(vc), loc)
        except Exception as e:  # noqa: BLE001 - reported by the timing loop
            print(f"<!-- {name} failed its check call: {type(e).__name__}: {str(e)[:300]} -->")
            continue
        # Both rotate q2/k2 once more; they must agree with each other.
        q4, k4 = q2.clone(), k2.clone()
        rotary_embedding(pos, q4, k4, D, cs16 if "rotary_embedding" in name else cs, True)
        print(f"<!-- {name}: max |q - jitkern| = {(q3.float() - q4.float()).abs().max().item():.3g}, "
              f"k cache rows equal to its k: {torch.equal(kc3.view(-1, HK * D)[loc], k3)} -->")


def in_turns(fns: dict, t: int) -> dict:
    """{name: run_benchmark's result or None}: every function takes its turn in each of ROUNDS rounds and
    the round with the median time counts, so that what one leaves in L2 (50 MB on an H100, as large as a
    prefill's working set) favours none of them. A function that raises is reported and left out."""
    runs = {name: [] for name in fns}
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            if runs[name] is None:
                continue
            try:
                runs[name].append(run_benchmark(fn))
            except Exception as e:  # noqa: BLE001 - a baseline that cannot run is reported, not fatal
                print(f"<!-- {name} failed at T={t}: {type(e).__name__}: {str(e)[:300]} -->")
                runs[name] = None
    return {name: None if r is None else sorted(r, key=lambda x: x["median"])[len(r) // 2] for name, r in runs.items()}


def main() -> None:
    warmup(ops=["apply_rope_with_cos_sin_cache_inplace", "rotary_embedding", "store_cache"],
           dtypes=[DTYPE])
    cs = cos_sin_cache()
    cs16 = cs.to(DTYPE)
    kc, vc = (torch.zeros(PAGES, PAGE, HK, D, dtype=DTYPE, device="cuda") for _ in range(2))
    refs, missing = reference_kernels()
    check(cs, cs16, kc, vc, refs)
    ceilings = copy_ceilings(use_cudagraph=True)
    ceiling = max(ceilings.values())
    print(f"\n### RoPE + KV-cache write, q {HQ} / kv {HK} heads, d {D}, bf16, paged cache of {PAGE}-token pages ({environment()})\n")
    print(f"Measured copy ceiling: {copy_ceiling_text(ceilings)}. Times are CUDA-graph medians in us (p20-p80), each from the "
          f"median one of {ROUNDS} rounds in which every column and both pattern kernels take turns.\n")
    for line in missing:
        print(f"- not run: {line}")
    names = list(providers(cs, cs16, kc, vc, refs))
    print("\n| phase | T | " + " | ".join(f"{n} us" for n in names) + " | fused GB/s | fused % of copy ceiling | pattern ceiling us | "
          "fused % of pattern | gathered pattern us | fused % of gathered | unfused / fused |")
    print("|---|---|" + "---|" * (len(names) + 7))
    yard = yardstick_module()
    kc32, vc32 = kc.view(torch.int32).view(-1), vc.view(torch.int32).view(-1)
    table = cs.view(torch.int32)
    for phase, sizes in (("decode", DECODE), ("prefill", PREFILL)):
        for t in sizes:
            q, k, v, pos, loc = inputs(t, phase == "decode")
            # The same bytes without the math: q, k read and written back, v read, k and v cache rows written.
            rows = torch.as_strided(q, (t, (HQ + 2 * HK) * D), q.stride()).view(torch.int32)
            fns = {name: (lambda fn=fn: fn(q, k, v, pos, loc)) for name, fn in providers(cs, cs16, kc, vc, refs).items()}
            fns["pattern"] = lambda: yard.rewrite_to_cache(rows, loc, kc32, vc32, (HQ + HK) * D * 2 // 16, HK * D * 2 // 16, 0)
            fns["gathered"] = lambda: yard.rewrite_to_cache_gathered(rows, loc, pos, table, kc32, vc32, (HQ + HK) * D * 2 // 16,
                                                                      HK * D * 2 // 16, 0)
            res = in_turns(fns, t)
            pattern, gathered = res.pop("pattern"), res.pop("gathered")
            fused = res["jitkern fused"]["median"]
            gbps = moved_bytes(t) / (fused * 1e-6) / 1e9
            cells = " | ".join("n/a" if r is None else f"{r['median']:.2f} [{r['p20']:.2f}-{r['p80']:.2f}]" for r in res.values())
            ratio = res["jitkern rope then store_cache"]["median"] / fused
            print(f"| {phase} | {t} | {cells} | {gbps:.0f} | {100 * gbps / ceiling:.1f}% | {pattern['median']:.2f} | "
                  f"{100 * pattern['median'] / fused:.1f}% | {gathered['median']:.2f} | {100 * gathered['median'] / fused:.1f}% | "
                  f"{ratio:.2f}x |")
    launch_floor(cs, kc, vc)
    launch_shapes(cs, kc, vc, ceiling)
    per_call_table(cs, kc, vc)


def launch_floor(cs, kc, vc) -> None:
    """Decode sizes against one launch of a kernel that moves only the k and v rows (store_cache alone)."""
    print("\n#### Decode against one launch of the cache write alone (us)\n")
    print("| T | jitkern fused | store_cache alone | rotary_embedding alone |")
    print("|---|---|---|---|")
    for t in get_benchmark_range([1, 8, 64], [1]):
        q, k, v, pos, loc = inputs(t, True)
        fused = run_benchmark(lambda: apply_rope_with_cos_sin_cache_inplace(pos, q, k, D, cs, True,
                                                                           FusedSetKVBufferArg(v, kc, vc, None, None, loc)))["median"]
        store = run_benchmark(lambda: store_cache(k, v, kc, vc, loc))["median"]
        rope = run_benchmark(lambda: rotary_embedding(pos, q, k, D, cs, True))["median"]
        print(f"| {t} | {fused:.2f} | {store:.2f} | {rope:.2f} |")


def launch_shapes(cs, kc, vc, ceiling) -> None:
    """The fused kernel at launch shapes the exported function takes for tuning: thread groups per CTA
    (each group 8 threads: one per 16-byte pair unit of a head) and CTAs per token; (0, 0) is the default."""
    m = _rope_module(DTYPE)
    shapes = {"decode": [(0, 0), (40, 1), (16, 3), (8, 5), (4, 10), (2, 20)], "prefill": [(0, 0), (8, 1), (16, 1), (20, 1), (40, 1), (8, 5)]}
    columns = list(dict.fromkeys(shapes["decode"] + shapes["prefill"]))
    print("\n#### Launch shapes of the fused kernel (us; groups x CTAs per token; prefill: % of the copy ceiling)\n")
    print("| phase | T | " + " | ".join(f"{g}x{s}" if g else "default" for g, s in columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for phase, sizes in (("decode", get_benchmark_range([1, 8, 64], [1])), ("prefill", get_benchmark_range([4096, 32768], [4096]))):
        for t in sizes:
            q, k, v, pos, loc = inputs(t, phase == "decode")
            cells = []
            for g, s in columns:
                if (g, s) not in shapes[phase]:
                    cells.append("")
                    continue
                us = run_benchmark(lambda g=g, s=s: m.apply_store(pos, q, k, q, k, cs, D, True, v, kc, vc, loc, 1.0, 1.0, g, s))["median"]
                cells.append(f"{us:.2f}" + (f" ({100 * moved_bytes(t) / (us * 1e-6) / 1e9 / ceiling:.1f}%)" if phase == "prefill" else ""))
            print(f"| {phase} | {t} | " + " | ".join(cells) + " |")


def per_call_table(cs, kc, vc) -> None:
    """Host time per eager call at T = 1 (what a step outside a CUDA graph pays per layer)."""
    q, k, v, pos, loc = inputs(1, True)
    print(f"\n#### Host time per call, T = 1 (us; median over {BATCHES} batches of {BATCH} calls)\n")
    print("| path | us per call |")
    print("|---|---|")
    arg = FusedSetKVBufferArg(v, kc, vc, None, None, loc)
    for name, fn in {"fused (apply_rope_with_cos_sin_cache_inplace + FusedSetKVBufferArg)":
                     lambda: apply_rope_with_cos_sin_cache_inplace(pos, q, k, D, cs, True, arg),
                     "rotary_embedding": lambda: rotary_embedding(pos, q, k, D, cs, True),
                     "store_cache": lambda: store_cache(k, v, kc, vc, loc)}.items():
        print(f"| {name} | {per_call_us(fn):.2f} |")


if __name__ == "__main__":
    main()
