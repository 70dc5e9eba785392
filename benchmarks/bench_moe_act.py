"""The MoE activation family (bf16): silu_and_mul over moe_align_block_size's sorted layout (DeepSeek-V3's
routing: 256 experts, top-8, d = 2048 per expert) and over the masked per-expert layout of low-latency
expert-parallel dispatch (32 local experts, 1024 rows each), plain and fused with fp8 quantization (per token,
per group of 128), against the unfused sequences (jitkern's silu_and_mul over the whole buffer; the computed
rows gathered, silu_and_mul, scattered back; + the quantizer), torch, and the reference framework's masked
kernels where its wheel has them. Bytes: the computed rows' input and output (and the ids or counts read);
% of the measured copy ceiling. Prints markdown tables."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import (copy_ceiling_text, copy_ceilings, environment, get_benchmark_range, reference_ops_or_none, reference_version,  # noqa: E402
                   run_benchmark, run_benchmark_or_none, yardstick_module)

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
        moved = rows * 3 * D * 2 + P * 4
        moved_group = rows * (2 * D * 2 + D + D // 128 * 4) + P * 4
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
        gbps = rows * 3 * D * 2 / (fused["median"] * 1e-6) / 1e9
        print(f"| {t} | {rows} | {fmt(fused)} | {gbps:.0f} | {100 * gbps / ceiling:.1f}% | {fmt(whole)} | {ratio(whole, fused)} | "
              f"{fmt(gather)} | {ratio(gather, fused)} | {fmt(ref)} | {ratio(ref, fused)} | {fmt(token)} | {fmt(group)} | {fmt(group_pair)} | "
              f"{ratio(group_pair, group)} | {fmt(ref_quant)} | {ratio(ref_quant, group)} | {fmt(ref_dsv4)} | {ratio(ref_dsv4, group)} |")


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
    main()
