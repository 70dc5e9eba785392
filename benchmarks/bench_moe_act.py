"""The MoE activation family (bf16): silu_and_mul over moe_align_block_size's sorted layout (DeepSeek-V3's
routing: 256 experts, top-8, d = 2048 per expert) and over the masked per-expert layout of low-latency
expert-parallel dispatch (32 local experts, 1024 rows each), plain and fused with fp8 quantization (per token,
per group of 128 under either rounding policy, "exact" and "sglang"), against the unfused sequences (jitkern's
silu_and_mul over the whole buffer; the computed rows gathered, silu_and_mul, scattered back; + the
quantizer), torch, and the reference framework's masked kernels where its wheel has them. Bytes: the computed rows' input and output (and the ids or counts read);
% of the measured copy ceiling. Prints markdown tables.

--schedules: the product beside the second schedule of its form's list (SCHEDULES: the product's kernels under
other launch choices, benchmarks/kernels/moe_act_schedules.cuh), same inputs, one process, the reference's
DeepSeek-V4 kernel beside the masked group form and silu_and_mul over the P rows beside the sorted one, % of the
copy ceiling from T = 4096; --schedules=all: every schedule of SCHEDULES, median of 2 interleaved rounds
(--rounds=N: N), and the launch floor. Every schedule's output is compared bit for bit with the product's (of
its rounding policy).
--layouts=sorted (or masked), --forms=masked_group (SCHEDULES' keys, comma-separated) and --sizes=4096 (T,
comma-separated; 64h: the masked layout's T * 8 rows all to one expert) limit them."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import (copy_ceiling_text, copy_ceilings, environment, get_benchmark_range, interleaved, overhead_module,  # noqa: E402
                   reference_ops_or_none, reference_version, run_benchmark, run_benchmark_or_none, yardstick_module)

import jitkern  # noqa: E402
from jitkern.jit import warmup as build_all  # noqa: E402

from jitkern.ops import (moe_align_block_size, per_token_group_quant_8bit, per_token_quant_fp8, silu_and_mul,  # noqa: E402
                         silu_and_mul_masked, silu_and_mul_masked_per_token_group_quant_fp8, silu_and_mul_masked_per_token_quant_fp8,
                         silu_and_mul_sorted, silu_and_mul_sorted_per_token_group_quant_fp8, silu_and_mul_sorted_per_token_quant_fp8)

DTYPE = torch.bfloat16
EXPERTS, TOPK, D = 256, 8, 2048
SORTED_TOKENS = get_benchmark_range([1, 4, 16, 64, 256, 1024, 4096, 16384], [1, 64, 4096])
LOCAL_EXPERTS, M_MAX = 32, 1024
MASKED_TOKENS = get_benchmark_range([1, 16, 64, 256, 1024, 4096], [1, 64])


def fmt(r):
    return "n/a" if r is None else f"{r['median']:.2f}"


def ratio(a, b):
    return "n/a" if a is None or b is None else f"{a['median'] / b['median']:.2f}x"


def moved_bytes(form: str, rows: int, ids: int = 0) -> int:
    """What a form moves: the computed rows' input and output (fp8 codes and scales for the quantized forms)
    and `ids` int32 ids read."""
    out = {"act": D * 2, "group": D + D // 128 * 4, "token": D + 4}[form]
    return rows * (2 * D * 2 + out) + ids * 4


def eager_silu(x):
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def gathered(x, idx, out):
    """The unfused sequence: the computed rows gathered, silu_and_mul on them, the results put back."""
    out.index_copy_(0, idx, silu_and_mul(x.index_select(0, idx)))


def sorted_layout(tokens: int):
    g = torch.Generator(device="cuda").manual_seed(tokens)
    ids = torch.rand(tokens, EXPERTS, device="cuda", generator=g).argsort(dim=1)[:, :TOPK].to(torch.int32)
    block = 16 if tokens <= 64 else 64  # the fused MoE GEMMs' block at decode and prefill sizes
    sorted_ids, _, post_pad = moe_align_block_size(ids, EXPERTS, block)
    rows = (torch.arange(sorted_ids.numel(), device="cuda") < post_pad[0]) & (sorted_ids < ids.numel())
    return sorted_ids, post_pad, ids.numel(), rows.nonzero().squeeze(1)


def sorted_tables(ceiling: float) -> None:
    print(f"\n#### Sorted layout: {EXPERTS} experts, top-{TOPK}, d = {D}, bf16 (input [P, {2 * D}], P = the padded capacity)\n")
    print("| T | rows computed / P | silu_and_mul_sorted us | GB/s | % copy ceiling | silu_and_mul over P rows us | vs it | "
          "gather + silu_and_mul + scatter us | vs it | torch eager over P us | per-token fp8 fused us | silu_and_mul + per_token_quant_fp8 "
          "(P rows) us | vs it | group fp8 fused us | % copy ceiling | group fp8 fused, rounding=sglang us | % copy ceiling | "
          "silu_and_mul + per_token_group_quant_8bit (P rows) us | vs it |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for t in SORTED_TOKENS:
        sorted_ids, post_pad, n, idx = sorted_layout(t)
        P, rows = sorted_ids.numel(), idx.numel()
        x = torch.randn(P, 2 * D, dtype=DTYPE, device="cuda")
        out = torch.empty(P, D, dtype=DTYPE, device="cuda")
        q = torch.empty(P, D, dtype=torch.float8_e4m3fn, device="cuda")
        s1 = torch.empty(P, 1, device="cuda")
        sg = torch.empty(P, D // 128, device="cuda")
        q2, s2, sg2 = torch.empty_like(q), torch.empty_like(s1), torch.empty_like(sg)
        fused = run_benchmark_or_none(lambda: silu_and_mul_sorted(x, sorted_ids, post_pad, n, out))
        whole = run_benchmark_or_none(lambda: silu_and_mul(out, x))
        gather = run_benchmark_or_none(lambda: gathered(x, idx, out))
        eager = run_benchmark_or_none(lambda: eager_silu(x))
        token = run_benchmark_or_none(lambda: silu_and_mul_sorted_per_token_quant_fp8(x, sorted_ids, post_pad, n, output_q=q, output_s=s1))
        token_pair = run_benchmark_or_none(lambda: per_token_quant_fp8(silu_and_mul(out, x), output_q=q2, output_s=s2))
        group = run_benchmark_or_none(lambda: silu_and_mul_sorted_per_token_group_quant_fp8(x, sorted_ids, post_pad, n, output_q=q,
                                                                                             output_s=sg))
        group_sglang = run_benchmark_or_none(lambda: silu_and_mul_sorted_per_token_group_quant_fp8(x, sorted_ids, post_pad, n, output_q=q,
                                                                                                    output_s=sg, rounding="sglang"))
        group_pair = run_benchmark_or_none(lambda: per_token_group_quant_8bit(silu_and_mul(out, x), 128, output_q=q2, output_s=sg2))
        moved, moved_group = moved_bytes("act", rows, P), moved_bytes("group", rows, P)
        share = lambda r, b: "n/a" if r is None else f"{100 * b / (r['median'] * 1e-6) / 1e9 / ceiling:.1f}%"  # noqa: E731
        gbps = moved / (fused["median"] * 1e-6) / 1e9
        print(f"| {t} | {rows} / {P} | {fmt(fused)} | {gbps:.0f} | {100 * gbps / ceiling:.1f}% | {fmt(whole)} | {ratio(whole, fused)} | "
              f"{fmt(gather)} | {ratio(gather, fused)} | {fmt(eager)} | {fmt(token)} | {fmt(token_pair)} | {ratio(token_pair, token)} | "
              f"{fmt(group)} | {share(group, moved_group)} | {fmt(group_sglang)} | {share(group_sglang, moved_group)} | {fmt(group_pair)} | "
              f"{ratio(group_pair, group)} |")


def masked_counts(tokens: int, hot: bool = False):
    """tokens * top-k rows routed over the local experts at random (the counts as dispatch writes them); `hot`:
    every row to expert 0 (at most M)."""
    if hot:
        return torch.tensor([min(tokens * TOPK, M_MAX)] + [0] * (LOCAL_EXPERTS - 1), dtype=torch.int32, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(tokens)
    experts = torch.randint(0, LOCAL_EXPERTS, (tokens * TOPK,), device="cuda", generator=g)
    return torch.bincount(experts, minlength=LOCAL_EXPERTS).clamp(max=M_MAX).to(torch.int32)


def dsv4_topk(tokens: int) -> int:
    """The topk passed to the reference's DeepSeek-V4 masked kernel: it computes at most M * topk rows of the
    buffer (M taken as the tokens dispatched) and leaves the rest unwritten, so topk is raised until M * topk
    covers the T * 8 rows routed here (T = 4096: 32, not 8, else it computes 8192 of the 32422 rows)."""
    return max(TOPK, -(-tokens * TOPK // M_MAX))


def masked_tables(ceiling: float) -> None:
    ep = reference_ops_or_none("moe.ep_moe_kernels")
    dsv4 = reference_ops_or_none("moe.dsv4")
    print(f"\n#### Masked layout: {LOCAL_EXPERTS} local experts, {M_MAX} rows each, d = {D}, bf16 (input [{LOCAL_EXPERTS}, {M_MAX}, {2 * D}]); "
          f"T * {TOPK} rows routed to this rank's experts; reference {reference_version()}\n")
    print("| T | rows | silu_and_mul_masked us | GB/s | % copy ceiling | silu_and_mul over every row us | vs it | gather + silu_and_mul + "
          "scatter us | vs it | reference silu_and_mul_masked_fwd (Triton) us | vs it | per-token fp8 fused us | group fp8 fused us | "
          "group fp8 fused, rounding=sglang us | silu_and_mul + per_token_group_quant_8bit (every row) us | vs it | reference masked "
          "post-quant (Triton) us | vs it | reference masked post-quant (CUDA, dsv4) us | vs exact | vs sglang |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    x = torch.randn(LOCAL_EXPERTS, M_MAX, 2 * D, dtype=DTYPE, device="cuda")
    out = torch.empty(LOCAL_EXPERTS, M_MAX, D, dtype=DTYPE, device="cuda")
    q = torch.empty(LOCAL_EXPERTS, M_MAX, D, dtype=torch.float8_e4m3fn, device="cuda")
    s1 = torch.empty(LOCAL_EXPERTS, M_MAX, 1, device="cuda")
    sg = torch.empty(LOCAL_EXPERTS, M_MAX, D // 128, device="cuda")
    for t in MASKED_TOKENS:
        masked_m = masked_counts(t)
        rows = int(masked_m.sum())
        computed = torch.arange(M_MAX, device="cuda")[None, :] < masked_m[:, None]
        idx = computed.view(-1).nonzero().squeeze(1)
        x2, out2, q2, sg2 = x.view(-1, 2 * D), out.view(-1, D), q.view(-1, D), sg.view(-1, D // 128)
        fused = run_benchmark_or_none(lambda: silu_and_mul_masked(x, masked_m, out))
        whole = run_benchmark_or_none(lambda: silu_and_mul(out2, x2))
        gather = run_benchmark_or_none(lambda: gathered(x2, idx, out2))
        token = run_benchmark_or_none(lambda: silu_and_mul_masked_per_token_quant_fp8(x, masked_m, output_q=q, output_s=s1))
        group = run_benchmark_or_none(lambda: silu_and_mul_masked_per_token_group_quant_fp8(x, masked_m, output_q=q, output_s=sg))
        group_sglang = run_benchmark_or_none(lambda: silu_and_mul_masked_per_token_group_quant_fp8(x, masked_m, output_q=q, output_s=sg,
                                                                                                    rounding="sglang"))
        group_pair = run_benchmark_or_none(lambda: per_token_group_quant_8bit(silu_and_mul(out2, x2), 128, output_q=q2, output_s=sg2))
        ref = ref_quant = ref_dsv4 = None
        if ep is not None:
            ref = run_benchmark_or_none(lambda: ep.silu_and_mul_masked_fwd(x, out, masked_m))
            ref_quant = run_benchmark_or_none(lambda: ep.silu_and_mul_masked_post_quant_fwd(x, q, sg, 128, masked_m))
        if dsv4 is not None:
            ref_dsv4 = run_benchmark_or_none(lambda: dsv4.silu_and_mul_masked_post_quant(x, q, sg, 128, masked_m, topk=dsv4_topk(t)))
        gbps = moved_bytes("act", rows) / (fused["median"] * 1e-6) / 1e9
        print(f"| {t} | {rows} | {fmt(fused)} | {gbps:.0f} | {100 * gbps / ceiling:.1f}% | {fmt(whole)} | {ratio(whole, fused)} | "
              f"{fmt(gather)} | {ratio(gather, fused)} | {fmt(ref)} | {ratio(ref, fused)} | {fmt(token)} | {fmt(group)} | {fmt(group_sglang)} | "
              f"{fmt(group_pair)} | {ratio(group_pair, group)} | {fmt(ref_quant)} | {ratio(ref_quant, group)} | {fmt(ref_dsv4)} | "
              f"{ratio(ref_dsv4, group)} | {ratio(ref_dsv4, group_sglang)} |")


# ---- launch schedules (--schedules) ---------------------------------------------------------------

# Each form's schedules, the product first: (name, the C++ type whose entry point runs it,
# benchmarks/kernels/moe_act_schedules.cuh[, the rounding policy of a group form where not "exact"]).
# --schedules compares the product with the second of its form's list (the previous product where the
# product changed), --schedules=all with every one; each schedule's output is compared with the first of its
# rounding policy's.
PRODUCT = ("product", "bench_moe_act::Product<>")
SGLANG = "bench_moe_act::Rounding::kSglang"
WIDTH = "bench_moe_act::MaskedGroupWidth"


def widths(*shapes):
    """The masked group form's interleaved kernel at each (threads a CTA, CTAs an SM, warps spread over the
    CTAs) under both rounding policies."""
    out = []
    for threads, ctas, spread in shapes:
        name = f"CTAs of {threads} threads, {ctas} an SM{'' if spread else ', the warps in CTA order'}"
        cpp = f"{WIDTH}<{threads}, {ctas}, {str(spread).lower()}"
        out += [(name, f"{cpp}>"), (f"{name}, rounding=sglang", f"{cpp}, {SGLANG}>", "sglang")]
    return out
SCHEDULES = {
    "masked_group": [PRODUCT,
                     ("previous product: CTAs of 128 threads, 10 an SM, the warps in CTA order", f"{WIDTH}<128, 10, false>"),
                     ("product, rounding=sglang", f"bench_moe_act::Product<{SGLANG}>", "sglang"),
                     ("previous product, rounding=sglang", f"{WIDTH}<128, 10, false, {SGLANG}>", "sglang"),
                     *widths((256, 4, True), (128, 8, True), (512, 2, False)),
                     ("scanned rows (silu_and_mul_group_quant_masked_kernel)", "bench_moe_act::MaskedGroupMasked<8, bench_moe_act::Rounding::kExact>")],
    "masked_act": [PRODUCT,
                   ("turns over the computed rows, warp scan (no chunks)", "bench_moe_act::MaskedAct<4>"),
                   ("interleaved rows, 2 vectors a thread the grid apart", "bench_moe_act::MaskedActInterleaved"),
                   ("turns, masked_m read before the wait", "bench_moe_act::MaskedAct<2>"),
                   ("turns, the CTA's scan", "bench_moe_act::MaskedAct<0>")],
    "masked_token": [PRODUCT,
                     ("interleaved rows", "bench_moe_act::MaskedTokenInterleaved"),
                     ("expert by bisection", "bench_moe_act::MaskedToken<3>"),
                     ("masked_m read before the wait", "bench_moe_act::MaskedToken<2>"),
                     ("the CTA's scan", "bench_moe_act::MaskedToken<0>")],
    "sorted_act": [PRODUCT, ("per row at every capacity, 2 vectors a thread", "bench_moe_act::SortedActPerRow")],
    "sorted_group": [PRODUCT, ("previous product: chunks of 8 rows, a CTA per chunk", "bench_moe_act::SortedGroupBounded<0>"),
                     ("product, rounding=sglang", f"bench_moe_act::Product<{SGLANG}>", "sglang"),
                     ("previous product, rounding=sglang", f"bench_moe_act::SortedGroupBounded<0, {SGLANG}>", "sglang"),
                     ("per row at every capacity", "bench_moe_act::SortedGroup<0>"),
                     ("chunks at every capacity, 8 lanes of 2 vectors", "bench_moe_act::SortedGroup<8>"),
                     ("a warp a row, 4 lanes of 4 vectors a group, 4 warps a CTA, one turn, the divisions' range tests kept",
                      "bench_moe_act::SortedGroupWarps<4, 4, jitkern_moe_act::kOneTurn>"),
                     ("the same, rounding=sglang", f"bench_moe_act::SortedGroupWarps<4, 4, jitkern_moe_act::kOneTurn, {SGLANG}>", "sglang"),
                     ("a warp a row, 8 lanes of 2 vectors a group, 4 warps a CTA, one turn", "bench_moe_act::SortedGroupWarps<4, 8, jitkern_moe_act::kOneTurn>"),
                     ("a warp a row, 4 lanes of 4 vectors a group, 2 warps a CTA, one turn", "bench_moe_act::SortedGroupWarps<2, 4, jitkern_moe_act::kOneTurn>"),
                     *((f"the product's chunks, registers bounded for {k} CTAs an SM", f"bench_moe_act::SortedGroupBounded<{k}>") for k in (7, 8))],
    "sorted_token": [PRODUCT, ("previous product: the resident CTAs", "bench_moe_act::SortedToken<0>"),
                     ("a CTA a row", "bench_moe_act::SortedToken<jitkern_moe_act::kOneTurn>"),
                     *((f"{k} times the resident CTAs", f"bench_moe_act::SortedTokenTimes<{k}>") for k in (2, 3, 6)),
                     *((f"the resident CTAs for {100 - p}% of the rows, {r} runs an SM for the rest",
                        f"bench_moe_act::SortedTokenTail<{p}, {r}>") for p, r in ((5, 4), (10, 4), (10, 8), (20, 8))),
                     *((f"chunks of {k} rows, a CTA per chunk", f"bench_moe_act::SortedTokenChunks<{k}>") for k in (8, 16, 32))],
}
ENTRY = {"masked_group": "silu_and_mul_masked_per_token_group_quant_fp8", "masked_act": "silu_and_mul_masked",
         "masked_token": "silu_and_mul_masked_per_token_quant_fp8", "sorted_act": "silu_and_mul_sorted",
         "sorted_group": "silu_and_mul_sorted_per_token_group_quant_fp8", "sorted_token": "silu_and_mul_sorted_per_token_quant_fp8"}


def export_name(kind, i) -> str:
    return f"{kind}_{i}"


def schedule_modules(schedules):
    """One module per kind (built at once): export_name(kind, i) -> the entry point of schedule i."""
    here = Path(__file__).resolve().parent
    specs = [jitkern.JitSpec(f"bench_moe_act_{kind}", cuda_files=[str(here / "kernels" / "moe_act_schedules.cuh")],
                             extra_include_paths=[str(here.parent / "csrc")], host_without_nvcc=True,
                             cuda_wrappers=[(export_name(kind, i), f"{cpp}::{ENTRY[kind]}") for i, (_, cpp, *_) in enumerate(scheds)])
             for kind, scheds in schedules.items()]
    return dict(zip(schedules, build_all(*specs)))


def schedule_table(kind, label, module, schedules, args, outputs, extra=None, rounds=1, moved=None, ceiling=None) -> None:
    """Every schedule of `kind` on args + outputs (+ group size and eps for the group forms), the outputs
    compared with the product's; with `moved` (bytes), each time's % of the copy ceiling (GB/s)."""
    tail = (128, 1e-10) if kind.endswith("group") else ()
    fns = {name: (lambda i=i: module[export_name(kind, i)](*args, *outputs, *tail)) for i, (name, *_) in enumerate(schedules)}
    expected = {}  # rounding policy -> the outputs of its first schedule
    for (name, _, *rounding), fn in zip(schedules, fns.values()):
        for o in outputs:
            o.view(torch.uint8).fill_(0x55)
        fn()
        got = [o.view(torch.uint8).clone() for o in outputs]
        first = expected.setdefault(tuple(rounding), got)
        if first is not got and not all(torch.equal(a, b) for a, b in zip(got, first)):
            print(f"<!-- {kind} {label}: {name} differs from the first schedule of its rounding -->")
    for name, fn in (extra or {}).items():
        try:
            fn()
            fns[name] = fn
        except Exception as e:  # noqa: BLE001 - the table goes on without it
            print(f"<!-- {name} left out: {type(e).__name__}: {str(e)[:300]} -->")
    ranked = sorted(interleaved(fns, rounds=rounds).items(), key=lambda kv: kv[1])
    def cell(name, t):  # the extras (the reference's kernel, the dense op) move other bytes: no %
        return f"{name} {t:.2f}" + (f" ({100 * moved / (t * 1e-6) / 1e9 / ceiling:.1f}%)" if moved and name not in (extra or {}) else "")

    print(f"| {kind} | {label} | " + " | ".join(cell(name, t) for name, t in ranked) + " |", flush=True)


def schedules(everything: bool, layouts=("masked", "sorted"), sizes=("1", "64", "4096"), rounds=None, forms=None) -> None:
    start = time.perf_counter()
    scheds = {kind: v if everything else v[:2] for kind, v in SCHEDULES.items() if forms is None or kind in forms}
    rounds = rounds or (2 if everything else 1)
    dsv4 = reference_ops_or_none("moe.dsv4")
    modules = schedule_modules(scheds)
    built = time.perf_counter() - start
    ceilings = copy_ceilings(use_cudagraph=True)
    ceiling = max(ceilings.values())
    print(f"\n### MoE activation schedules ({environment()}; reference {reference_version()})\n")
    print(f"us, fastest first (median of {rounds} interleaved round{'s' if rounds > 1 else ''}); bf16, d = {D}; built in {built:.0f} s. "
          f"Measured copy ceiling: {copy_ceiling_text(ceilings)}.\n")
    floor = {}
    if everything:
        empty, i = overhead_module().launch_empty_pdl, torch.zeros(16, device="cuda", dtype=torch.int32)
        floor = {"floor: empty kernel": lambda: empty(i, i)}
    x = torch.randn(LOCAL_EXPERTS, M_MAX, 2 * D, dtype=DTYPE, device="cuda")
    out = torch.empty(LOCAL_EXPERTS, M_MAX, D, dtype=DTYPE, device="cuda")
    q = torch.empty(LOCAL_EXPERTS, M_MAX, D, dtype=torch.float8_e4m3fn, device="cuda")
    s1 = torch.empty(LOCAL_EXPERTS, M_MAX, device="cuda")
    sg = torch.empty(LOCAL_EXPERTS, M_MAX, D // 128, device="cuda")
    for size in sizes if "masked" in layouts else ():
        t, hot = int(size.rstrip("h")), size.endswith("h")
        masked_m = masked_counts(t, hot)
        label = f"masked T={t}{', every row to one expert' if hot else ''} ({int(masked_m.sum())} rows)"
        extra = dict(floor)
        if dsv4 is not None:
            extra["reference (CUDA, dsv4)"] = lambda m=masked_m, k=dsv4_topk(t): dsv4.silu_and_mul_masked_post_quant(x, q, sg, 128, m, topk=k)
        for kind, outputs, more in (("masked_group", (q, sg), extra), ("masked_act", (out,), floor), ("masked_token", (q, s1), None)):
            if kind not in scheds:
                continue
            moved = moved_bytes(kind.split("_")[1], int(masked_m.sum())) if t >= 4096 else None
            schedule_table(kind, label, modules[kind], scheds[kind], (x, masked_m), outputs, more, rounds, moved, ceiling)
    for t in (int(size) for size in sizes) if "sorted" in layouts else ():
        sorted_ids, post_pad, n, idx = sorted_layout(t)
        P = sorted_ids.numel()
        xs = torch.randn(P, 2 * D, dtype=DTYPE, device="cuda")
        outs, qs = torch.empty(P, D, dtype=DTYPE, device="cuda"), torch.empty(P, D, dtype=torch.float8_e4m3fn, device="cuda")
        label = f"sorted T={t} ({idx.numel()} / {P} rows)"
        dense = {**floor, "silu_and_mul over P rows": lambda: silu_and_mul(outs, xs)}
        for kind, outputs, more in (("sorted_act", (outs,), dense), ("sorted_group", (qs, torch.empty(P, D // 128, device="cuda")), None),
                                    ("sorted_token", (qs, torch.empty(P, device="cuda")), None)):
            if kind not in scheds:
                continue
            moved = moved_bytes(kind.split("_")[1], idx.numel(), P) if t >= 4096 else None
            schedule_table(kind, label, modules[kind], scheds[kind], (xs, sorted_ids, post_pad, n), outputs, more, rounds, moved, ceiling)
    print(f"<!-- {time.perf_counter() - start:.0f} s in all -->")


def main() -> None:
    ceilings = copy_ceilings(use_cudagraph=True)
    module = yardstick_module()
    src = torch.zeros(4096, dtype=torch.int32, device="cuda")
    floor = run_benchmark(lambda: module.copy(torch.empty_like(src), src))["median"]
    print(f"\n### MoE activations ({environment()})\n")
    print(f"Measured copy ceiling: {copy_ceiling_text(ceilings)}. Launch floor (one CTA copying 16 KiB): {floor:.2f} us. "
          "CUDA-graph medians in us.\n")
    ceiling = max(ceilings.values())
    sorted_tables(ceiling)
    masked_tables(ceiling)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--schedules" in args or "--schedules=all" in args:
        option = {a.split("=")[0]: a.split("=")[1] for a in args if a.startswith(("--layouts=", "--sizes=", "--rounds=", "--forms="))}
        schedules(everything="--schedules=all" in args, layouts=option.get("--layouts", "masked,sorted").split(","),
                  sizes=option.get("--sizes", "1,64,4096").split(","), rounds=int(option.get("--rounds", 0)),
                  forms=option["--forms"].split(",") if "--forms" in option else None)
    else:
        main()
