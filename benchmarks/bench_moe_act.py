"""The MoE activation family (bf16): silu_and_mul over moe_align_block_size's sorted layout (DeepSeek-V3's
routing: 256 experts, top-8, d = 2048 per expert) and over the masked per-expert layout of low-latency
expert-parallel dispatch (32 local experts, 1024 rows each), plain and fused with fp8 quantization (per token,
per group of 128), against the unfused sequences (jitkern's silu_and_mul over the whole buffer; the computed
rows gathered, silu_and_mul, scattered back; + the quantizer), torch, and the reference framework's masked
kernels where its wheel has them. Bytes: the computed rows' input and output (and the ids or counts read);
% of the measured copy ceiling. Prints markdown tables.

--schedules: the product's launch schedule beside the second of its list (PREVIOUS where the product changed, else
PER_ROW; benchmarks/kernels/moe_act_schedules.cuh),
same inputs, one process, the reference's DeepSeek-V4 kernel beside the masked group form and silu_and_mul over
the P rows beside the sorted one, % of the copy ceiling at T = 4096; --schedules=all: every schedule of
SCHEDULES, median of 2 interleaved rounds (--rounds=N: N), and the launch floor. Every schedule's output is compared
with the product's first. --layouts=sorted (or masked) and --sizes=4096 (T, comma-separated) limit them."""

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
MASKED_TOKENS = get_benchmark_range([1, 16, 64, 256], [1, 64])


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
          "(P rows) us | vs it | group fp8 fused us | % copy ceiling | silu_and_mul + per_token_group_quant_8bit (P rows) us | vs it |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
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
        group_pair = run_benchmark_or_none(lambda: per_token_group_quant_8bit(silu_and_mul(out, x), 128, output_q=q2, output_s=sg2))
        moved, moved_group = moved_bytes("act", rows, P), moved_bytes("group", rows, P)
        gbps = moved / (fused["median"] * 1e-6) / 1e9
        gbps_group = moved_group / (group["median"] * 1e-6) / 1e9
        print(f"| {t} | {rows} / {P} | {fmt(fused)} | {gbps:.0f} | {100 * gbps / ceiling:.1f}% | {fmt(whole)} | {ratio(whole, fused)} | "
              f"{fmt(gather)} | {ratio(gather, fused)} | {fmt(eager)} | {fmt(token)} | {fmt(token_pair)} | {ratio(token_pair, token)} | "
              f"{fmt(group)} | {100 * gbps_group / ceiling:.1f}% | {fmt(group_pair)} | {ratio(group_pair, group)} |")


def masked_counts(tokens: int):
    """tokens * top-k rows routed over the local experts at random (the counts as dispatch writes them)."""
    g = torch.Generator(device="cuda").manual_seed(tokens)
    experts = torch.randint(0, LOCAL_EXPERTS, (tokens * TOPK,), device="cuda", generator=g)
    return torch.bincount(experts, minlength=LOCAL_EXPERTS).clamp(max=M_MAX).to(torch.int32)


def masked_tables(ceiling: float) -> None:
    ep = reference_ops_or_none("moe.ep_moe_kernels")
    dsv4 = reference_ops_or_none("moe.dsv4")
    print(f"\n#### Masked layout: {LOCAL_EXPERTS} local experts, {M_MAX} rows each, d = {D}, bf16 (input [{LOCAL_EXPERTS}, {M_MAX}, {2 * D}]); "
          f"T * {TOPK} rows routed to this rank's experts; reference {reference_version()}\n")
    print("| T | rows | silu_and_mul_masked us | GB/s | % copy ceiling | silu_and_mul over every row us | vs it | gather + silu_and_mul + "
          "scatter us | vs it | reference silu_and_mul_masked_fwd (Triton) us | vs it | per-token fp8 fused us | group fp8 fused us | "
          "silu_and_mul + per_token_group_quant_8bit (every row) us | vs it | reference masked post-quant (Triton) us | vs it | "
          "reference masked post-quant (CUDA, dsv4) us | vs it |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
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
        group_pair = run_benchmark_or_none(lambda: per_token_group_quant_8bit(silu_and_mul(out2, x2), 128, output_q=q2, output_s=sg2))
        ref = ref_quant = ref_dsv4 = None
        if ep is not None:
            ref = run_benchmark_or_none(lambda: ep.silu_and_mul_masked_fwd(x, out, masked_m))
            ref_quant = run_benchmark_or_none(lambda: ep.silu_and_mul_masked_post_quant_fwd(x, q, sg, 128, masked_m))
        if dsv4 is not None:
            ref_dsv4 = run_benchmark_or_none(lambda: dsv4.silu_and_mul_masked_post_quant(x, q, sg, 128, masked_m, topk=TOPK))
        gbps = moved_bytes("act", rows) / (fused["median"] * 1e-6) / 1e9
        print(f"| {t} | {rows} | {fmt(fused)} | {gbps:.0f} | {100 * gbps / ceiling:.1f}% | {fmt(whole)} | {ratio(whole, fused)} | "
              f"{fmt(gather)} | {ratio(gather, fused)} | {fmt(ref)} | {ratio(ref, fused)} | {fmt(token)} | {fmt(group)} | {fmt(group_pair)} | "
              f"{ratio(group_pair, group)} | {fmt(ref_quant)} | {ratio(ref_quant, group)} | {fmt(ref_dsv4)} | {ratio(ref_dsv4, group)} |")


# ---- launch schedules (--schedules) ---------------------------------------------------------------

# (scan, CTAs per SM, items, group items, load-all bytes, spread, chunk rows, pipelined, masked chunk rows, token
# warp rows, group vectors a lane, contiguous, turns first): bench_moe_act::Sched's arguments, beside the product's
# Schedule (PRODUCT); sched() fills the last five with none, none, 2, no, no. PER_ROW: the schedule before the
# chunks, the vote and the spread items (each vector of the sorted layout looking up its row's id; the masked
# layout's rows one vector or group a thread and turn, found by bisection); PREVIOUS: the product before the
# masked silu_and_mul's chunks and the sorted group form's four vectors a lane (the masked group form's is the
# product's). --schedules compares the product with the second of its kind's list, --schedules=all with every one.
PRODUCT = "product"


def sched(*v):
    return v + (0, 0, 2, 0, 0)[len(v) - 8:]


PER_ROW = {"masked": sched(3, 0, 1, 1, 0, 0, 0, 0), "sorted": sched(0, 0, 1, 1, 0, 0, 0, 0)}
PREVIOUS = {"masked": sched(1, 0, 2, 1, 0, 1, 0, 0), "sorted": sched(0, -2, 4, 2, 0, 0, 8, 0)}
SCHEDULES = {
    "masked_group": [PRODUCT, PREVIOUS["masked"], sched(1, -2, 1, 2, 0, 0, 0, 0, 8, 0, 4), sched(1, 2, 4, 2, 0, 1, 0, 0, -8, 0, 4, 0, 1),
                     sched(1, 3, 4, 2, 0, 1, 0, 0, -8, 0, 4, 0, 1)],
    "masked_act": [PRODUCT, PREVIOUS["masked"], sched(1, -2, 4, 1, 0, 0, 0, 0, 8), sched(1, 2, 4, 2, 0, 1, 0, 0, -8, 0, 4, 0, 1),
                   sched(1, 3, 4, 2, 0, 1, 0, 0, -8, 0, 4, 0, 1)],
    "masked_token": [PRODUCT, PER_ROW["masked"]],
    "sorted_act": [PRODUCT, PER_ROW["sorted"]],
    "sorted_group": [PRODUCT, PREVIOUS["sorted"]],
    "sorted_token": [PRODUCT, PER_ROW["sorted"]],
}
ENTRY = {"masked_group": "silu_and_mul_masked_per_token_group_quant_fp8", "masked_act": "silu_and_mul_masked",
         "masked_token": "silu_and_mul_masked_per_token_quant_fp8", "sorted_act": "silu_and_mul_sorted",
         "sorted_group": "silu_and_mul_sorted_per_token_group_quant_fp8", "sorted_token": "silu_and_mul_sorted_per_token_quant_fp8"}
SCAN = ["cta scan", "warp scan", "warp scan, masked_m before the wait", "warp scan, expert by bisection"]


def schedule_name(kind, sched) -> str:
    if sched == PRODUCT:
        return "product"
    scan, per_sm, items, group_items, load_all, spread, chunk, pipelined, masked_chunk, token_warp, group_vecs, contiguous, turns_first = sched
    chunk = masked_chunk if kind.startswith("masked") else chunk
    if kind.endswith("token") and kind.startswith("masked") and not token_warp:
        chunk = 0
    parts = [] if kind.startswith("sorted") else [SCAN[scan]]
    if chunk and turns_first:
        parts.append("by turns where the rows fit one turn of the grid, else")
    if chunk:
        parts.append(f"chunks of {chunk} rows" if chunk > 0 else f"chunks of up to {-chunk} rows, fewer where the rows are few")
    parts.append({-1: "threads/SM grid", 0: "occupancy grid", -2: "a CTA per chunk" if chunk else "a CTA per turn"}.get(per_sm, f"{per_sm} CTAs/SM"))
    if kind.endswith("act"):
        parts.append(f"{items} vec/turn")
    if kind.endswith("group"):
        parts.append(f"{group_items} groups/turn")
        if chunk and (group_vecs != 2 or contiguous):
            parts.append(f"{group_vecs} vec/lane" + (" one after another" if contiguous else ""))
    if kind.endswith("token") and chunk and token_warp:
        parts.append("a row per warp")
    if spread and (not chunk or turns_first):
        parts.append("grid apart")
    if pipelined and not chunk:
        parts.append("next turn located during the loads")
    if load_all:
        parts.append(f"load all <= {load_all >> 20} MiB")
    return ", ".join(parts)


def export_name(kind, sched) -> str:
    return kind + "_" + ("product" if sched == PRODUCT else "_".join(str(v).replace("-", "m") for v in sched))


def ops_type(sched) -> str:
    return "bench_moe_act::ProductOps" if sched == PRODUCT else f"bench_moe_act::Ops<{', '.join(map(str, sched))}>"


def schedule_modules(schedules):
    """One module per kind (built at once): export_name(kind, sched) -> the entry point under that schedule."""
    here = Path(__file__).resolve().parent
    specs = [jitkern.JitSpec(f"bench_moe_act_{kind}", cuda_files=[str(here / "kernels" / "moe_act_schedules.cuh")],
                             extra_include_paths=[str(here.parent / "csrc")], host_without_nvcc=True,
                             cuda_wrappers=[(export_name(kind, s), f"{ops_type(s)}::{ENTRY[kind]}") for s in scheds])
             for kind, scheds in schedules.items()]
    return dict(zip(schedules, build_all(*specs)))


def schedule_table(kind, label, module, schedules, args, outputs, extra=None, rounds=1, moved=None, ceiling=None) -> None:
    """Every schedule of `kind` on args + outputs (+ group size and eps for the group forms), the outputs
    compared with the product's; with `moved` (bytes), each time's % of the copy ceiling (GB/s)."""
    tail = (128, 1e-10) if kind.endswith("group") else ()
    fns = {schedule_name(kind, s): (lambda s=s: module[export_name(kind, s)](*args, *outputs, *tail)) for s in schedules}
    expected = None
    for name, fn in fns.items():
        for o in outputs:
            o.view(torch.uint8).fill_(0x55)
        fn()
        got = [o.view(torch.uint8).clone() for o in outputs]
        if expected is None:
            expected = got
        elif not all(torch.equal(a, b) for a, b in zip(got, expected)):
            print(f"<!-- {kind} {label}: {name} differs from the product -->")
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


def schedules(everything: bool, layouts=("masked", "sorted"), sizes=(1, 64, 4096), rounds=None) -> None:
    start = time.perf_counter()
    scheds = {kind: v if everything else v[:2] for kind, v in SCHEDULES.items()}
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
    for t in sizes if "masked" in layouts else ():
        masked_m = masked_counts(t)
        label = f"masked T={t} ({int(masked_m.sum())} rows)"
        extra = dict(floor)
        if dsv4 is not None:
            extra["reference (CUDA, dsv4)"] = lambda m=masked_m: dsv4.silu_and_mul_masked_post_quant(x, q, sg, 128, m, topk=TOPK)
        for kind, outputs, more in (("masked_group", (q, sg), extra), ("masked_act", (out,), floor), ("masked_token", (q, s1), None)):
            moved = moved_bytes(kind.split("_")[1], int(masked_m.sum())) if t == 4096 else None
            schedule_table(kind, label, modules[kind], scheds[kind], (x, masked_m), outputs, more, rounds, moved, ceiling)
    for t in sizes if "sorted" in layouts else ():
        sorted_ids, post_pad, n, idx = sorted_layout(t)
        P = sorted_ids.numel()
        xs = torch.randn(P, 2 * D, dtype=DTYPE, device="cuda")
        outs, qs = torch.empty(P, D, dtype=DTYPE, device="cuda"), torch.empty(P, D, dtype=torch.float8_e4m3fn, device="cuda")
        label = f"sorted T={t} ({idx.numel()} / {P} rows)"
        dense = {**floor, "silu_and_mul over P rows": lambda: silu_and_mul(outs, xs)}
        for kind, outputs, more in (("sorted_act", (outs,), dense), ("sorted_group", (qs, torch.empty(P, D // 128, device="cuda")), None),
                                    ("sorted_token", (qs, torch.empty(P, device="cuda")), None)):
            moved = moved_bytes(kind.split("_")[1], idx.numel(), P) if t == 4096 else None
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
        option = {a.split("=")[0]: a.split("=")[1] for a in args if a.startswith(("--layouts=", "--sizes=", "--rounds="))}
        schedules(everything="--schedules=all" in args, layouts=option.get("--layouts", "masked,sorted").split(","),
                  sizes=[int(t) for t in option.get("--sizes", "1,64,4096").split(",")], rounds=int(option.get("--rounds", 0)))
    else:
        main()
