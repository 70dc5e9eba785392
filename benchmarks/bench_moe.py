"""The MoE routing family. Tables (us, CUDA-graph medians), next to a one-CTA launch floor:
- `reference`: topk_softmax against the reference framework's (SGLang's) newest topk_softmax, side by side in
  one process (REFERENCE_WHEEL), fp32 and bf16 gating, 64/128/256 experts, k = 1-8, 1 to 32768 tokens;
- `routing`: topk_softmax (plain and DeepSeek-V2's grouped form, which the reference runs in torch), the grouped
  sigmoid router and moe_align_block_size at T = 1, 64, 4096 tokens with 64/128/256 experts (k = 8), against a
  torch implementation and torch.compile of it;
- `sigmoid`: topk_sigmoid (fp32 gating, 256 experts, k = 8, plain and DeepSeek-V3's grouped form) beside its
  kernel with the PDL trigger forced to each place (benchmarks/kernels/moe_topk_schedules.cuh) and the
  reference's moe_topk_sigmoid / moe_fused_gate, outputs compared bit for bit with the product's; then
  topk_softmax fp32 with 256 experts beside the reference's;
- `align`: moe_align_block_size (top-8) beside its forms forced whatever the size (the warp and grid forms;
  the two-pass kernel as a cluster of 8 or 16, with match_any or ballots: benchmarks/kernels/moe_align_schedules.cuh)
  and the reference's moe_align_block_size (and its moe_align_small_numel up to 64 ids), outputs compared with
  torch_align's entry for entry.
`python bench_moe.py [reference] [routing] [sigmoid] [align]` (default: reference and routing)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import (call_each, environment, get_benchmark_range, interleaved, reference_ops_or_none, reference_version, run_benchmark,  # noqa: E402
                   yardstick_module)

import jitkern  # noqa: E402
from jitkern.ops import moe_align_block_size, topk_sigmoid, topk_softmax  # noqa: E402
from jitkern.ops.moe import align_sizes  # noqa: E402

TOKENS = get_benchmark_range([1, 64, 4096], [1, 4096])
EXPERTS = [64, 128, 256]
K = 8
BLOCK = 64


def torch_topk_softmax(logits):
    w, ids = torch.topk(torch.softmax(logits.float(), dim=-1), K, dim=-1)
    return w / w.sum(-1, keepdim=True), ids.int()


def torch_grouped_softmax(logits, groups, topk_group):
    scores = torch.softmax(logits.float(), dim=-1)
    t, e = scores.shape
    chosen = torch.topk(scores.view(t, groups, -1).max(dim=-1).values, topk_group, dim=-1)[1]
    mask = torch.zeros(t, groups, dtype=torch.bool, device=scores.device).scatter_(1, chosen, True)
    w, ids = torch.topk(scores.masked_fill(~mask.repeat_interleave(e // groups, dim=1), 0.0), K, dim=-1)
    return w / w.sum(-1, keepdim=True), ids.int()


def torch_grouped_sigmoid(logits, bias, groups, topk_group):
    scores = logits.float().sigmoid()
    choice = scores + bias
    t, e = choice.shape
    group_scores = choice.view(t, groups, -1).topk(2, dim=-1)[0].sum(-1)
    chosen = torch.topk(group_scores, topk_group, dim=-1)[1]
    mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, chosen, True)
    ids = torch.topk(choice.masked_fill(~mask.repeat_interleave(e // groups, dim=1), float("-inf")), K, dim=-1)[1]
    w = scores.gather(1, ids)
    return w / w.sum(-1, keepdim=True), ids.int()


def torch_align(ids, experts, block):
    flat = ids.view(-1).long()
    n = flat.numel()
    size, blocks = align_sizes(n, experts, block)
    counts = torch.bincount(flat, minlength=experts)
    padded = (counts + block - 1) // block * block
    ends = padded.cumsum(0)
    starts = ends - padded
    order = torch.sort(flat, stable=True)[1]
    by_expert = flat[order]
    rank = torch.arange(n, device=ids.device) - (counts.cumsum(0) - counts)[by_expert]
    sorted_ids = torch.full((size,), n, dtype=torch.int32, device=ids.device)
    sorted_ids[starts[by_expert] + rank] = order.int()
    first = torch.arange(blocks, device=ids.device) * block
    expert_ids = torch.searchsorted(ends, first, right=True).int()
    expert_ids = torch.where(first < ends[-1], expert_ids, -1)
    return sorted_ids, expert_ids, ends[-1:].int()


compiled = {"softmax": torch.compile(torch_topk_softmax), "grouped softmax": torch.compile(torch_grouped_softmax),
            "sigmoid": torch.compile(torch_grouped_sigmoid),
            "align": torch.compile(torch_align)}


def fmt(r):
    return "n/a" if r is None else f"{r['median']:.2f}"


def bench(fn, use_cudagraph: bool = True):
    try:
        return run_benchmark(fn, use_cudagraph=use_cudagraph)
    except Exception as e:  # noqa: BLE001 - a baseline that cannot run is reported, not fatal
        print(f"<!-- failed: {type(e).__name__}: {str(e)[:200]} -->")
        return None


def ratio(base, j):
    return "n/a" if base is None else f"{base['median'] / j['median']:.2f}x"


def reference_columns(r, j) -> tuple:
    """The reference's time and reference / jitkern as table cells ("n/a" without the reference)."""
    return ("n/a", "n/a") if r is None else (f"{r:.2f}", f"{r / j:.2f}x")


def topk_softmax_in_turns(ref, logits, k: int, renormalize: bool, rounds: int = 3) -> tuple:
    """jitkern's topk_softmax (int32 ids) on logits and the reference's (None: without it), timed in turns: jitkern's
    time, the reference's (None) and the tokens the two route differently ("n/a")."""
    t = logits.shape[0]
    w, ids = torch.empty(t, k, device="cuda"), torch.empty(t, k, dtype=torch.int32, device="cuda")
    fns = {"jitkern": lambda: topk_softmax(w, ids, logits, renormalize)}
    if ref is not None:
        rw, rids = torch.empty_like(w), torch.empty_like(ids)
        fns["reference"] = lambda: ref.topk_softmax(rw, rids, logits, renormalize)
    call_each(fns)
    # The reference ranks its probabilities (ties of rounding, and of bf16 logits, may order differently).
    differ = int((ids != rids).any(-1).sum()) if ref is not None else "n/a"
    times = interleaved(fns, rounds)
    return times["jitkern"], times.get("reference"), differ


def launch_floor() -> float:
    module = yardstick_module()
    src = torch.zeros(4096, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    module.copy(dst, src)
    return run_benchmark(lambda: module.copy(dst, src))["median"]


REF_TOKENS = get_benchmark_range([1, 16, 64, 256, 4096, 32768], [1, 64, 256, 4096])


def reference_table(floor: float) -> None:
    """topk_softmax (int32 ids) against the reference's, each shape timed in turns."""
    ref = reference_ops_or_none("moe.moe_topk_softmax")
    print(f"\n### topk_softmax against the reference {reference_version()} ({environment()})\n")
    print(f"CUDA-graph medians (us) of 3 interleaved runs; launch floor (one CTA copying 16 KiB): {floor:.2f} us.\n")
    print("| gating | experts | k | renormalize | T | jitkern | reference | reference / jitkern | tokens routed differently |")
    print("|---|---|---|---|---|---|---|---|---|")
    cases = [(d, e, 8, False, t) for d in (torch.float32, torch.bfloat16) for e in EXPERTS for t in REF_TOKENS]
    cases += [(torch.float32, 128, k, False, t) for k in (1, 2, 4) for t in (1, 4096)]
    cases += [(torch.float32, 128, 8, True, t) for t in (1, 64, 4096)]
    for dtype, e, k, renormalize, t in cases:
        j, r, differ = topk_softmax_in_turns(ref, torch.randn(t, e, device="cuda").to(dtype), k, renormalize)
        r_text, ratio_text = reference_columns(r, j)
        print(f"| {str(dtype).replace('torch.', '')} | {e} | {k} | {renormalize} | {t} | {j:.2f} | {r_text} | {ratio_text} | {differ} |",
              flush=True)


def routing_table(floor: float) -> None:
    print(f"\n### MoE routing ({environment()})\n")
    print(f"Times in us, CUDA-graph medians except the align rows; k = {K}; launch floor (one CTA copying 16 KiB): {floor:.2f} us.\n")
    print("| op | T | experts | jitkern | torch | torch.compile | vs torch | vs compile | gating read GB/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for e in EXPERTS:
        groups = e // 32
        bias = torch.randn(e, device="cuda") * 0.1
        for t in TOKENS:
            logits = torch.randn(t, e, dtype=torch.bfloat16, device="cuda")
            w = torch.empty(t, K, device="cuda")
            ids = torch.empty(t, K, dtype=torch.int32, device="cuda")
            topk_softmax(w, ids, logits, True)
            cases = {
                "topk_softmax (bf16, renormalize)": (lambda: topk_softmax(w, ids, logits, True), lambda: torch_topk_softmax(logits),
                                                     lambda: compiled["softmax"](logits)),
                f"topk_softmax grouped ({groups} groups, top {groups // 2})": (
                    lambda: topk_softmax(w, ids, logits, True, num_expert_group=groups, topk_group=groups // 2),
                    lambda: torch_grouped_softmax(logits, groups, groups // 2),
                    lambda: compiled["grouped softmax"](logits, groups, groups // 2)),
                f"topk_sigmoid grouped ({groups} groups, top {groups // 2})": (
                    lambda: topk_sigmoid(w, ids, logits, True, bias, num_expert_group=groups, topk_group=groups // 2),
                    lambda: torch_grouped_sigmoid(logits, bias, groups, groups // 2),
                    lambda: compiled["sigmoid"](logits, bias, groups, groups // 2)),
            }
            for name, (j_fn, t_fn, c_fn) in cases.items():
                j_fn(), c_fn()
                j, tt, c = bench(j_fn), bench(t_fn), bench(c_fn)
                gb = t * e * 2 / (j["median"] * 1e-6) / 1e9
                print(f"| {name} | {t} | {e} | {fmt(j)} | {fmt(tt)} | {fmt(c)} | {ratio(tt, j)} | {ratio(c, j)} | {gb:.1f} |")
            route = torch.randint(0, e, (t, K), dtype=torch.int32, device="cuda")
            outs = moe_align_block_size(route, e, BLOCK)
            compiled["align"](route, e, BLOCK)
            # torch's bincount reads its result on the host, so no CUDA graph captures the torch forms: every
            # form of this row is timed by plain launches (jitkern's graph time in brackets).
            g = bench(lambda: moe_align_block_size(route, e, BLOCK, *outs))
            j = bench(lambda: moe_align_block_size(route, e, BLOCK, *outs), use_cudagraph=False)
            tt = bench(lambda: torch_align(route, e, BLOCK), use_cudagraph=False)
            c = bench(lambda: compiled["align"](route, e, BLOCK), use_cudagraph=False)
            print(f"| moe_align_block_size (block {BLOCK}), launched | {t} | {e} | {fmt(j)} ({fmt(g)}) | {fmt(tt)} | {fmt(c)} | "
                  f"{ratio(tt, j)} | {ratio(c, j)} | - |")


SIGMOID_TOKENS = get_benchmark_range([1, 16, 64, 256, 512, 1024, 4096, 32768], [1, 64, 256, 1024, 4096])
SIGMOID_ROUNDS = get_benchmark_range(3, 2)
# bench_moe_topk::sigmoid_trigger's forced PDL trigger places.
TRIGGERS = {"trigger at the start": 0, "after the wait": 1, "after the stores": 2}
SOFTMAX_TOKENS = get_benchmark_range([64, 256, 4096], [64, 256, 4096])


def triggers_module():
    here = Path(__file__).resolve().parent
    return jitkern.load_jit("bench_moe_topk", cuda_files=[str(here / "kernels" / "moe_topk_schedules.cuh")],
                            extra_include_paths=[str(here.parent / "csrc")],
                            cuda_wrappers=[("topk_sigmoid", "bench_moe_topk::sigmoid_trigger<>")])


def sigmoid_table(floor: float) -> None:
    """topk_sigmoid beside its kernel with the PDL trigger forced to each place (moe_topk_schedules.cuh) and
    the reference's, each shape timed in turns (ids and weights equal to jitkern's bit for bit, else the row
    says so); then topk_softmax fp32 with 256 experts beside the reference's."""
    module = triggers_module()
    plain_ref, gate_ref = reference_ops_or_none("moe.moe_topk_sigmoid"), reference_ops_or_none("moe.moe_fused_gate")
    experts, k, scale = 256, 8, 2.5
    print(f"\n### topk_sigmoid and its PDL trigger beside the reference {reference_version()} ({environment()})\n")
    print(f"fp32 gating, {experts} experts, k = {k}, correction bias, renormalize; CUDA-graph medians (us), the median of {SIGMOID_ROUNDS} "
          f"interleaved runs; launch floor (one CTA copying 16 KiB): {floor:.2f} us. jitkern: the trigger MoeOps::launch picks.\n")
    print("| form | T | jitkern | " + " | ".join(TRIGGERS) + " | reference | reference / jitkern | bits as jitkern's |")
    print("|---|---|---|" + "---|" * len(TRIGGERS) + "---|---|---|")
    bias = torch.randn(experts, device="cuda") * 0.1
    for grouped in (False, True):
        groups, topk_group, scaling = (8, 4, scale) if grouped else (1, 1, 1.0)
        for t in SIGMOID_TOKENS:
            g = torch.randn(t, experts, device="cuda")
            outs = {name: (torch.empty(t, k, device="cuda"), torch.empty(t, k, dtype=torch.int32, device="cuda"))
                    for name in ("jitkern", *TRIGGERS)}
            fns = {"jitkern": lambda: topk_sigmoid(*outs["jitkern"], g, True, bias, num_expert_group=groups, topk_group=topk_group,
                                                   routed_scaling_factor=scaling)}
            for name, trigger in TRIGGERS.items():
                fns[name] = lambda o=outs[name], tr=trigger: module.topk_sigmoid(*o, g, bias, True, groups, topk_group, scaling, tr)
            if grouped and gate_ref is not None:
                fns["reference"] = lambda: gate_ref.moe_fused_gate(g, bias, k, "sigmoid", 0, True, scale, True, 0.0, 8, 4)
            elif not grouped and plain_ref is not None:
                rw, rids = torch.empty_like(outs["jitkern"][0]), torch.empty_like(outs["jitkern"][1])
                fns["reference"] = lambda: plain_ref.topk_sigmoid(rw, rids, g, True, bias)
            call_each(fns)
            torch.cuda.synchronize()
            w, ids = outs["jitkern"]
            same = "yes" if all(torch.equal(i, ids) and torch.equal(x.view(torch.int32), w.view(torch.int32))
                                for x, i in outs.values()) else "NO"
            times = interleaved(fns, SIGMOID_ROUNDS)
            j, r = times["jitkern"], times.get("reference")
            r_text, r_ratio = reference_columns(r, j)
            form = "grouped (8 groups, 4 kept, x 2.5)" if grouped else "plain"
            cols = " | ".join(f"{times[name]:.2f}" for name in TRIGGERS)
            print(f"| {form} | {t} | {j:.2f} | {cols} | {r_text} | {r_ratio} | {same} |", flush=True)
    ref = reference_ops_or_none("moe.moe_topk_softmax")
    print("\ntopk_softmax, fp32 gating, 256 experts, k = 8, renormalize (int32 ids):\n")
    print("| T | jitkern | reference | reference / jitkern |")
    print("|---|---|---|---|")
    for t in SOFTMAX_TOKENS:
        j, r, _ = topk_softmax_in_turns(ref, torch.randn(t, experts, device="cuda"), k, True, SIGMOID_ROUNDS)
        r_text, r_ratio = reference_columns(r, j)
        print(f"| {t} | {j:.2f} | {r_text} | {r_ratio} |", flush=True)


# (experts, T, block): 256 tokens (2048 ids) and the sizes around it, where the forms cross.
ALIGN_SHAPES = [(256, 1, 16), (256, 4, 16), (256, 64, 16), (256, 128, 16), (256, 192, 16), (256, 256, 16), (256, 384, 64),
                (256, 512, 64), (256, 1024, 64), (256, 4096, 64), (256, 32768, 64), (128, 128, 16), (128, 32768, 128)]
ALIGN_SMALL_NUMEL = 64  # the reference's one-CTA Triton form, which its MoE runner picks up to this many ids
ALIGN_ROUNDS = 1  # up to six timings a shape: one graph timing each keeps the table to seconds
SGLANG_SIZED = "jitkern, buffers of the reference's sizes"  # numel + (E + 2)(block - 1): what a drop-in caller passes
# name -> (the schedule module's export, the fewest and the most ids it is timed at: where it may decide the launch).
# "at start": the PDL trigger at the kernel's start whatever its CTAs (the launch triggers after the wait from 2).
ALIGN_FORMS = {
    "warp": ("align_warp", 0, 32),
    "grid": ("align_0", 0, 4096),
    "grid, at start": ("align_0_start", 1024, 4096),
    "cluster, match_any": ("align_8_match", 2048, 8192),
    "cluster, match_any, at start": ("align_8_match_start", 4096, 8192),
    "cluster, ballots": ("align_8_ballots", 32768, 32768),
    "cluster of 16, ballots": ("align_16_ballots", 16384, 1 << 31),
    "cluster of 16, ballots, at start": ("align_16_ballots_start", 32768, 32768),
}
ALIGN_EXPORTS = {  # the schedule module's export -> its C++ function (benchmarks/kernels/moe_align_schedules.cuh)
    "align_warp": "bench_moe_align::align_warp<>",
    "align_0": "bench_moe_align::align_schedule<0, false>",
    "align_0_start": "bench_moe_align::align_schedule<0, false, true>",
    "align_8_match": "bench_moe_align::align_schedule<8, false>",
    "align_8_match_start": "bench_moe_align::align_schedule<8, false, true>",
    "align_8_ballots": "bench_moe_align::align_schedule<8, true>",
    "align_16_ballots": "bench_moe_align::align_schedule<16, true>",
    "align_16_ballots_start": "bench_moe_align::align_schedule<16, true, true>",
}


def align_module():
    here = Path(__file__).resolve().parent
    return jitkern.load_jit("bench_moe_align", cuda_files=[str(here / "kernels" / "moe_align_schedules.cuh")],
                            extra_include_paths=[str(here.parent / "csrc")], cuda_wrappers=list(ALIGN_EXPORTS.items()))


def align_table(floor: float) -> None:
    """moe_align_block_size of top-8 ids beside its forms forced (the warp and grid forms, the two-pass kernel as a
    cluster of 8 with match_any or ballots and of 16 with ballots) and the reference's (moe_align_block_size, and
    moe_align_small_numel where it takes the size), each shape timed in turns; every jitkern form's outputs equal
    torch_align's. jitkern's op also writes into buffers of the reference's sizes (its padding filled to their
    end), as a caller of the reference's interface passes them."""
    schedules = align_module()
    ref, small = reference_ops_or_none("moe.moe_align"), reference_ops_or_none("moe.moe_align_small_numel")
    print(f"\n### moe_align_block_size beside its forms and the reference {reference_version()} ({environment()})\n")
    print(f"Top-8 int32 ids; CUDA-graph medians (us) of {ALIGN_ROUNDS} interleaved run(s); launch floor (one CTA copying 16 KiB): "
          f"{floor:.2f} us; '-': not timed at that size. reference: its moe_align_block_size; small numel: its "
          f"moe_align_small_numel (up to {ALIGN_SMALL_NUMEL} ids); reference / jitkern: the quicker of the two.\n")
    print(f"| experts | T | block | jitkern | {SGLANG_SIZED} | {' | '.join(ALIGN_FORMS)} | reference | small numel | "
          "reference / jitkern | outputs as torch's |")
    print("|---|---|---|---|---|" + "---|" * len(ALIGN_FORMS) + "---|---|---|---|")
    for e, t, block in ALIGN_SHAPES:
        ids = torch.randint(0, e, (t, K), device="cuda", dtype=torch.int32)
        size, blocks = align_sizes(ids.numel(), e, block)
        forms = {name: export for name, (export, fewest, most) in ALIGN_FORMS.items() if fewest <= ids.numel() <= most}
        outs = {name: (torch.empty(size, dtype=torch.int32, device="cuda"), torch.empty(blocks, dtype=torch.int32, device="cuda"),
                       torch.empty(1, dtype=torch.int32, device="cuda")) for name in ("jitkern", *forms)}
        padded = -(-(ids.numel() + (e + 2) * (block - 1)) // 4) * 4  # the reference's buffer sizes (its MoE runner's)
        big = (torch.empty(padded, dtype=torch.int32, device="cuda"), torch.empty(-(-padded // block), dtype=torch.int32, device="cuda"),
               torch.empty(1, dtype=torch.int32, device="cuda"))
        fns = {"jitkern": lambda: moe_align_block_size(ids, e, block, *outs["jitkern"]),
               SGLANG_SIZED: lambda: moe_align_block_size(ids, e, block, *big)}
        totals = {}  # a reference form's name -> its num_tokens_post_pad
        for name, export in forms.items():
            fns[name] = lambda fn=getattr(schedules, export), out=outs[name]: fn(ids.view(-1), e, block, *out)
        if ref is not None:
            rs, re_ = torch.empty(padded, device="cuda", dtype=torch.int32), torch.empty(-(-padded // block), device="cuda", dtype=torch.int32)
            rn, cumsum = torch.empty(1, device="cuda", dtype=torch.int32), torch.zeros(e + 3, device="cuda", dtype=torch.int32)
            fns["reference"] = lambda: ref.moe_align_block_size(ids, e + 1, block, rs, re_, rn, cumsum, True)
            totals["reference"] = rn
        if small is not None and ids.numel() <= ALIGN_SMALL_NUMEL:
            ss, se, sn = (torch.empty_like(x) for x in outs["jitkern"])
            fns["small numel"] = lambda: small.moe_align_small_numel(ids, e + 1, block, ss, se, sn)
            totals["small numel"] = sn
        for name in [n for n in fns if n.startswith("cluster of 16") or n == "small numel"]:  # a GPU may refuse: left out
            try:
                fns[name]()
                torch.cuda.synchronize()
            except Exception as ex:  # noqa: BLE001 - the cluster size or the reference's Triton build
                print(f"<!-- {name} failed: {type(ex).__name__}: {str(ex)[:200]} -->")
                del fns[name]
                outs.pop(name, None)
                totals.pop(name, None)
        call_each(fns)
        torch.cuda.synchronize()
        expected = torch_align(ids, e, block)
        differ = [name for name in outs if not all(torch.equal(a, b) for a, b in zip(outs[name], expected))]
        big_tails = bool((big[0][size:] == ids.numel()).all()) and bool((big[1][blocks:] == -1).all())
        if not (torch.equal(big[0][:size], expected[0]) and torch.equal(big[1][:blocks], expected[1])
                and torch.equal(big[2], expected[2]) and big_tails):
            differ.append(SGLANG_SIZED)
        same = "NO: " + ", ".join(differ) if differ else "yes"
        for name, total in totals.items():
            if int(total) != int(outs["jitkern"][2]):
                same += f" ({name}'s total {int(total)}, jitkern's {int(outs['jitkern'][2])})"
        times = interleaved(fns, rounds=ALIGN_ROUNDS)
        j = times["jitkern"]
        quickest = min((times[name] for name in totals), default=None)
        cols = " | ".join(f"{times[name]:.2f}" if name in times else "-"
                          for name in (SGLANG_SIZED, *ALIGN_FORMS, "reference", "small numel"))
        print(f"| {e} | {t} | {block} | {j:.2f} | {cols} | {reference_columns(quickest, j)[1]} | {same} |", flush=True)


def main() -> None:
    tables = sys.argv[1:] or ["reference", "routing"]
    floor = launch_floor()
    if "reference" in tables:
        reference_table(floor)
    if "routing" in tables:
        routing_table(floor)
    if "sigmoid" in tables:
        sigmoid_table(floor)
    if "align" in tables:
        align_table(floor)


if __name__ == "__main__":
    main()
