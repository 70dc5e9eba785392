"""jitkern beside the reference framework's newest kernels (SGLang's sglang.kernels.ops, from the wheel
REFERENCE_WHEEL names or the installed package), in one process, same inputs, for every op both have:
CUDA-graph replay medians (median of 3 interleaved rounds), bf16. Prints one markdown table; the ratio
is reference time / jitkern time (above 1: jitkern faster). `bench_vs_reference.py OP...`: those ops only;
`--check OP...`: builds both sides and compares their outputs, no timing (a run beside other work).

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
                 (4096, 4096), (32768, 4096), (64, 3584), (256, 3584), (4096, 3584), (64, 2560)]:
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


DECODE_AND_PREFILL = (1, 16, 64, 256, 4096)  # tokens: decode batches and a prefill chunk


def differs(pairs, atol: float = 0.0, rtol: float = 0.0) -> str | None:
    """None where each (jitkern's, the reference's) pair of outputs agrees within atol + rtol * |reference|,
    else what differs (a case whose outputs differ is reported, not timed)."""
    for i, (mine, theirs) in enumerate(pairs):
        if mine.shape != theirs.shape:
            return f"output {i}: shapes {tuple(mine.shape)} and {tuple(theirs.shape)}"
        a, b = mine.float(), theirs.float()
        bad = ((a - b).abs() > atol + rtol * b.abs()) & ~(a.isnan() & b.isnan())
        if bad.any():
            return f"output {i}: {int(bad.sum())} of {bad.numel()} differ, max |diff| {float((a - b).abs().nan_to_num().max()):.3g}"
    return None


def returned(f, box, *args, **kwargs):
    """f(*args, **kwargs) as a function of nothing whose result is kept in box[0] (ops that allocate their outputs)."""
    def call():
        box[:] = [f(*args, **kwargs)]
    return call


MLA_NOPE, MLA_ROPE, MLA_SLOTS = 512, 64, 65536  # DeepSeek-V3's MLA row: kv_lora_rank 512 + rope 64


def mla_rows(t):
    """cache_k_nope [T, 1, 512], cache_k_rope [T, 1, 64], loc [T] int64 (no slot 0: the padding slot the
    reference skips), and one zeroed cache per side."""
    loc = torch.randperm(MLA_SLOTS - 1, device="cuda")[:t] + 1
    caches = [torch.zeros(MLA_SLOTS, 1, MLA_NOPE + MLA_ROPE, device="cuda", dtype=DTYPE) for _ in range(2)]
    return rand(t, 1, MLA_NOPE), rand(t, 1, MLA_ROPE), loc, caches


def set_mla_kv_buffer_cases(ref):
    for t in DECODE_AND_PREFILL:
        nope, rope, loc, (mine, theirs) = mla_rows(t)
        yield ("set_mla_kv_buffer (512 + 64, 65536 slots)", f"T={t}", bound(ops.set_mla_kv_buffer, mine, loc, nope, rope),
               bound(ref.set_mla_kv_buffer, theirs, loc, nope, rope), lambda mine=mine, theirs=theirs: differs([(mine, theirs)]))


def set_mla_kv_concat_q_cases(ref):
    heads = 16  # DeepSeek-V3's 128 query heads over 8 GPUs
    for t in DECODE_AND_PREFILL:
        nope, rope, loc, (mine, theirs) = mla_rows(t)
        q_nope, q_rope = rand(t, heads, MLA_NOPE), rand(t, heads, MLA_ROPE)
        q_mine, q_theirs = [], []
        yield (f"set_mla_kv_concat_q (512 + 64, 65536 slots, {heads} q heads)", f"T={t}",
               returned(ops.set_mla_kv_concat_q, q_mine, mine, loc, nope, rope, q_nope, q_rope),
               returned(ref.set_mla_kv_concat_q, q_theirs, theirs, loc, nope, rope, q_nope, q_rope),
               lambda mine=mine, theirs=theirs, q_mine=q_mine, q_theirs=q_theirs: differs([(mine, theirs), (q_mine[0], q_theirs[0])]))


def concat_mla_k_cases(ref):
    for t in (1, 64, 4096):
        k_nope, k_rope = rand(t, 128, 128), rand(t, 1, 64)  # the reference's fixed 128 heads, nope 128 + rope 64
        mine, theirs = (torch.zeros(t, 128, 192, device="cuda", dtype=DTYPE) for _ in range(2))
        yield ("concat_mla_k (128 heads, 128 + 64)", f"T={t}", bound(ops.concat_mla_k, mine, k_nope, k_rope),
               bound(ref.concat_mla_k, theirs, k_nope, k_rope), lambda mine=mine, theirs=theirs: differs([(mine, theirs)]))


def routed(pairs):
    """The (weights, ids) pairs of a top-k, each row's experts in id order (the order the k are listed in
    is not part of the op)."""
    out = []
    for (w, ids), (rw, rids) in pairs:
        order, rorder = ids.long().argsort(-1), rids.long().argsort(-1)
        out += [(ids.long().gather(-1, order), rids.long().gather(-1, rorder)), (w.gather(-1, order), rw.gather(-1, rorder))]
    return out


def topk_sigmoid_cases(ref):
    experts, k = 256, 8
    bias = torch.randn(experts, device="cuda") * 0.1
    for t in DECODE_AND_PREFILL:
        g = torch.randn(t, experts, device="cuda")
        w, ids, rw, rids = (torch.empty(t, k, device="cuda", dtype=dt) for dt in (torch.float32, torch.int32) * 2)
        yield ("topk_sigmoid fp32 + correction bias, renormalize, k = 8", f"{experts} experts x {t}",
               bound(ops.topk_sigmoid, w, ids, g, True, bias), bound(ref.topk_sigmoid, rw, rids, g, True, bias),
               lambda w=w, ids=ids, rw=rw, rids=rids: differs(routed([((w, ids), (rw, rids))]), atol=1e-5, rtol=1e-5))


def grouped_topk_cases(ref):
    """DeepSeek-V3's router: 256 experts in 8 groups, the 4 best groups (their two best biased scores), top-8,
    renormalized and scaled by 2.5; the reference's op is moe_fused_gate."""
    experts, k, scale = 256, 8, 2.5
    bias = torch.randn(experts, device="cuda") * 0.1
    for t in DECODE_AND_PREFILL:
        g = torch.randn(t, experts, device="cuda")
        w, ids = torch.empty(t, k, device="cuda"), torch.empty(t, k, device="cuda", dtype=torch.int32)
        box = []
        yield ("topk_sigmoid grouped (DeepSeek-V3: 8 groups, 4 kept, k = 8) / moe_fused_gate", f"{experts} experts x {t}",
               bound(lambda *a: ops.topk_sigmoid(*a, num_expert_group=8, topk_group=4, routed_scaling_factor=scale), w, ids, g, True, bias),
               returned(ref.moe_fused_gate, box, g, bias, k, "sigmoid", 0, True, scale, True, 0.0, 8, 4),
               lambda w=w, ids=ids, box=box: differs(routed([((w, ids), box[0])]), atol=1e-5, rtol=1e-5))


def moe_sum_cases(ref):
    for t in DECODE_AND_PREFILL:
        x = rand(t, 8, 7168)  # DeepSeek-V3: top-8 of hidden 7168
        mine, theirs = (torch.empty(t, 7168, device="cuda", dtype=DTYPE) for _ in range(2))
        yield ("moe_sum / moe_topk_sum (k = 8, hidden 7168)", f"T={t}", bound(ops.moe_sum, x, mine), bound(ref.moe_topk_sum, x, theirs),
               lambda mine=mine, theirs=theirs: differs([(mine, theirs)], atol=1e-2, rtol=8e-3))


def moe_weighted_sum_cases(ref):
    for t in (1, 64, 4096):
        x, w = rand(t, 8, 7168), torch.rand(t, 8, device="cuda")
        mine, theirs = (torch.empty(t, 7168, device="cuda", dtype=DTYPE) for _ in range(2))
        yield ("moe_weighted_sum / moe_fused_mul_sum (k = 8, hidden 7168)", f"T={t}",
               bound(lambda x, w, out: ops.moe_weighted_sum(x, w, output=out), x, w, mine), bound(ref.moe_fused_mul_sum, x, w, theirs),
               lambda mine=mine, theirs=theirs: differs([(mine, theirs)], atol=1e-2, rtol=8e-3))


def moe_align_cases(ref):
    """DeepSeek-V3's top-8 of 256 experts. The reference counts experts from -1 (its first bucket holds the
    ids -1, none here): num_experts + 1. The order of an expert's ids is not part of the op (the reference's
    many-CTA scatter takes them in any order): each expert's entries are compared as a multiset."""
    experts = 256
    for t in (1, 64, 4096):
        block = 16 if t <= 64 else 64  # the fused MoE's BLOCK_SIZE_M at these sizes
        ids = torch.randint(0, experts, (t, 8), device="cuda", dtype=torch.int32)
        padded = -(-(ids.numel() + (experts + 2) * (block - 1)) // 4) * 4
        rs, re = torch.empty(padded, device="cuda", dtype=torch.int32), torch.empty(-(-padded // block), device="cuda", dtype=torch.int32)
        rn, cumsum = torch.empty(1, device="cuda", dtype=torch.int32), torch.zeros(experts + 3, device="cuda", dtype=torch.int32)
        mine = []

        def agree(mine=mine, rs=rs, re=re, rn=rn, block=block, numel=ids.numel()):
            s, e, n = mine[0]
            if int(n) != int(rn):
                return f"num_tokens_post_pad {int(n)} and {int(rn)}"
            blocks = int(n) // block
            expert_of_entry = e[:blocks].long().repeat_interleave(block) * (numel + 1)  # (expert, id) as one sortable key
            return differs([(e[:blocks], re[:blocks]), ((expert_of_entry + s[:int(n)]).sort().values,
                                                         (expert_of_entry + rs[:int(n)]).sort().values)])

        yield (f"moe_align_block_size (256 experts, top-8)", f"T={t}, block {block}",
               returned(ops.moe_align_block_size, mine, ids, experts, block),
               bound(ref.moe_align_block_size, ids, experts + 1, block, rs, re, rn, cumsum, True), agree)


NORM_TOLERANCE = {"atol": 1e-2, "rtol": 8e-3}  # a bf16 rounding apart


def gemma_rmsnorm_cases(ref):
    for t, h in [*((t, 3584) for t in DECODE_AND_PREFILL), (64, 2560), (4096, 2560)]:  # Gemma-2 9B, Gemma-3 4B (the reference's: multiples of 512)
        x, w = rand(t, h), rand(h)
        mine, theirs = torch.empty_like(x), torch.empty_like(x)
        yield ("gemma_rmsnorm / grouped_gemma_rmsnorm (one group)", f"[{t}, {h}]", bound(ops.gemma_rmsnorm, x, w, EPS, mine),
               bound(lambda x, w, out: ref.grouped_gemma_rmsnorm(x, w, group_size=x.shape[-1], eps=EPS, out=out), x, w, theirs),
               lambda mine=mine, theirs=theirs: differs([(mine, theirs)], **NORM_TOLERANCE))


def gemma_fused_add_rmsnorm_cases(ref):
    """The reference's only Gemma fused add (Triton, out of place: returns the norm and the sum); jitkern's is in place."""
    for t in (1, 64, 4096):
        x, r, w = rand(t, 3584), rand(t, 3584), rand(3584)
        xm, rm = x.clone(), r.clone()
        box = []
        yield ("gemma_fused_add_rmsnorm (the reference's: Triton)", f"[{t}, 3584]", bound(ops.gemma_fused_add_rmsnorm, xm, rm, w, EPS),
               returned(ref.gemma_fused_add_rmsnorm, box, x, r, w, EPS),
               lambda xm=xm, rm=rm, box=box: differs([(xm, box[0][0]), (rm, box[0][1])], **NORM_TOLERANCE))


def rmsnorm_hf_cases(ref):
    for t, h in [*((t, 4096) for t in DECODE_AND_PREFILL), (64, 2048), (4096, 3584)]:
        x, w = rand(t, h), rand(h)
        mine, theirs = torch.empty_like(x), torch.empty_like(x)
        yield ("rmsnorm_hf", f"[{t}, {h}]", bound(ops.rmsnorm_hf, x, w, EPS, mine), bound(ref.rmsnorm_hf, x, w, EPS, theirs),
               lambda mine=mine, theirs=theirs: differs([(mine, theirs)], **NORM_TOLERANCE))


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
    "set_mla_kv_buffer": ("kvcache.set_mla_kv_buffer", set_mla_kv_buffer_cases, ["set_mla_kv_buffer"]),
    "set_mla_kv_concat_q": ("attention.set_mla_kv_concat_q", set_mla_kv_concat_q_cases, ["set_mla_kv_concat_q"]),
    "concat_mla_k": ("attention.concat_mla", concat_mla_k_cases, ["concat_mla_k"]),
    "topk_sigmoid": ("moe.moe_topk_sigmoid", topk_sigmoid_cases, ["topk_sigmoid"]),
    "topk_sigmoid_grouped": ("moe.moe_fused_gate", grouped_topk_cases, ["topk_sigmoid"]),
    "moe_sum": ("moe.moe_topk_sum", moe_sum_cases, ["moe_sum"]),
    "moe_weighted_sum": ("moe.moe_fused_mul_sum", moe_weighted_sum_cases, ["moe_weighted_sum"]),
    "moe_align_block_size": ("moe.moe_align", moe_align_cases, ["moe_align_block_size"]),
    "gemma_rmsnorm": ("layernorm.grouped_gemma_rmsnorm", gemma_rmsnorm_cases, ["gemma_rmsnorm"]),
    "gemma_fused_add_rmsnorm": ("layernorm.minimax_m3_rmsnorm", gemma_fused_add_rmsnorm_cases, ["gemma_fused_add_rmsnorm"]),
    "rmsnorm_hf": ("layernorm.rmsnorm_hf", rmsnorm_hf_cases, ["rmsnorm_hf"]),
}
FP32_GATING = {"topk_softmax", "topk_sigmoid"}  # jitkern's ops whose modules are built for fp32 here (the gating logits)


def first_calls(cases) -> list:
    """Calls every case once, the reference's builds in parallel (each compiles on its first call); returns
    the cases whose calls both ran and whose outputs agree (a case's optional fifth element says whether
    they differ: differs), as (op, shape, jitkern's call, the reference's), and prints the others."""
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
        if error is None and len(case) > 4:
            torch.cuda.synchronize()
            error = case[4]()  # each side called once on the same inputs
            error = error and f"outputs differ: {error}"
        if error is None:
            kept.append(case[:4])
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
    check_only = "--check" in sys.argv
    wanted = [name for name in sys.argv[1:] if name != "--check"] or list(OPS)
    modules, builder = reference_modules({OPS[name][0] for name in wanted})
    if any(m is None for m in modules.values()):
        print("not run: the reference is not installed (REFERENCE_WHEEL=/path/to/sglang-*.whl)")
        return
    needed = [op for name in wanted for op in OPS[name][2]]
    for dtype, names in ((DTYPE, [op for op in needed if op not in FP32_GATING]), (torch.float32, [op for op in needed if op in FP32_GATING])):
        if names:
            ops.warmup(dtypes=[dtype], ops=names)
    cases = first_calls([c for name in wanted for c in OPS[name][1](modules[OPS[name][0]])])
    if check_only:
        print(f"{len(cases)} cases ran on both sides with agreeing outputs: {sorted({c[0] for c in cases})}")
        return
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
