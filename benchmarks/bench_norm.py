"""The RMSNorm family: jitkern vs torch eager vs torch.compile (bf16), time, GB/s and % of a measured
copy ceiling, over decode (T = 1..64) and prefill sizes, and at decode sizes beside the reference framework's kernels
(where its wheel is installed or REFERENCE_WHEEL names it). Prints markdown tables; writes a plot to
$OUT/bench_norm.png (or ./bench_norm.png). `bench_norm.py reference`: only the table beside the reference."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import (BATCH, BATCHES, copy_ceiling_text, copy_ceilings, environment, get_benchmark_range, per_call_us,  # noqa: E402
                   interleaved, reference_module, reference_ops_or_none, run_benchmark, yardstick_module)

from jitkern.ops import (fused_add_rmsnorm, fused_inplace_qknorm, fused_inplace_qknorm_across_heads, rmsnorm,  # noqa: E402
                         rmsnorm_quant_fp8)
from jitkern.ops.norm import _norm_module  # noqa: E402

DTYPE = torch.bfloat16
EPS = 1e-6
TOKENS = get_benchmark_range([1, 2, 4, 8, 16, 32, 64, 256, 1024, 4096, 8192, 32768], [1, 64, 4096])
HIDDEN = get_benchmark_range([4096, 8192], [4096])


def eager_rmsnorm(x, w, out):
    out.copy_(F.rms_norm(x, (x.shape[-1],), w, EPS))


def eager_fused_add(x, r, w):
    r.add_(x)
    x.copy_(F.rms_norm(r, (r.shape[-1],), w, EPS))


def eager_qknorm(q, k, qw, kw):
    q.copy_(F.rms_norm(q, (q.shape[-1],), qw, EPS))
    k.copy_(F.rms_norm(k, (k.shape[-1],), kw, EPS))


compiled_rmsnorm = torch.compile(eager_rmsnorm)
compiled_fused_add = torch.compile(eager_fused_add)
compiled_qknorm = torch.compile(eager_qknorm)


def cases():
    for h in HIDDEN:
        for t in TOKENS:
            x = torch.randn(t, h, dtype=DTYPE, device="cuda")
            w = torch.randn(h, dtype=DTYPE, device="cuda")
            out = torch.empty_like(x)
            yield ("rmsnorm", f"[{t}, {h}]", t, 2 * x.numel() * 2 + h * 2, {
                "jitkern": lambda x=x, w=w, out=out: rmsnorm(x, w, out, EPS),
                "torch eager": lambda x=x, w=w, out=out: eager_rmsnorm(x, w, out),
                "torch.compile": lambda x=x, w=w, out=out: compiled_rmsnorm(x, w, out),
            })
            r = torch.randn(t, h, dtype=DTYPE, device="cuda")
            yield ("fused_add_rmsnorm", f"[{t}, {h}]", t, 4 * x.numel() * 2 + h * 2, {
                "jitkern": lambda x=x, r=r, w=w: fused_add_rmsnorm(x, r, w, EPS),
                "torch eager": lambda x=x, r=r, w=w: eager_fused_add(x, r, w),
                "torch.compile": lambda x=x, r=r, w=w: compiled_fused_add(x, r, w),
            })
    for t in TOKENS:
        qkv = torch.randn(t, 48 * 128, dtype=DTYPE, device="cuda")
        q = qkv[:, : 32 * 128].view(t, 32, 128)
        k = qkv[:, 32 * 128 : 40 * 128].view(t, 8, 128)
        qw = torch.randn(128, dtype=DTYPE, device="cuda")
        kw = torch.randn(128, dtype=DTYPE, device="cuda")
        yield ("qknorm (32 q + 8 k heads, d 128)", f"T={t}", t, 2 * (q.numel() + k.numel()) * 2, {
            "jitkern": lambda q=q, k=k, qw=qw, kw=kw: fused_inplace_qknorm(q, k, qw, kw, EPS),
            "torch eager": lambda q=q, k=k, qw=qw, kw=kw: eager_qknorm(q, k, qw, kw),
            "torch.compile": lambda q=q, k=k, qw=qw, kw=kw: compiled_qknorm(q, k, qw, kw),
        })
        q2 = qkv[:, : 32 * 128]
        k2 = qkv[:, 32 * 128 : 40 * 128]
        qw2 = torch.randn(32 * 128, dtype=DTYPE, device="cuda")
        kw2 = torch.randn(8 * 128, dtype=DTYPE, device="cuda")
        yield ("qknorm across heads (q 4096, k 1024)", f"T={t}", t, 2 * (q2.numel() + k2.numel()) * 2, {
            "jitkern": lambda q=q2, k=k2, qw=qw2, kw=kw2: fused_inplace_qknorm_across_heads(q, k, qw, kw, EPS),
            "torch eager": lambda q=q2, k=k2, qw=qw2, kw=kw2: eager_qknorm(q, k, qw, kw),
            "torch.compile": lambda q=q2, k=k2, qw=qw2, kw=kw2: compiled_qknorm(q, k, qw, kw),
        })


def compile_everything() -> None:
    """JIT-compiles the jitkern modules and traces the torch.compile baselines before anything is timed,
    so that no measurement starts right after seconds of compiling with the GPU idle."""
    x = torch.randn(2, 4096, dtype=DTYPE, device="cuda")
    r, out, w = torch.randn_like(x), torch.empty_like(x), torch.randn(4096, dtype=DTYPE, device="cuda")
    qkv = torch.randn(2, 48 * 128, dtype=DTYPE, device="cuda")
    q, k = qkv[:, : 32 * 128].view(2, 32, 128), qkv[:, 32 * 128 : 40 * 128].view(2, 8, 128)
    hw = torch.randn(128, dtype=DTYPE, device="cuda")
    rmsnorm(x, w, out, EPS)
    fused_add_rmsnorm(x, r, w, EPS)
    fused_inplace_qknorm(q, k, hw, hw, EPS)
    fused_inplace_qknorm_across_heads(qkv[:, : 32 * 128], qkv[:, 32 * 128 : 40 * 128], torch.randn(4096, dtype=DTYPE, device="cuda"),
                                      torch.randn(1024, dtype=DTYPE, device="cuda"), EPS)
    compiled_rmsnorm(x, w, out)
    compiled_fused_add(x, r, w)
    compiled_qknorm(q, k, hw, hw)
    yardstick_module()
    torch.cuda.synchronize()


def reference_table() -> None:
    """Decode sizes, jitkern beside the reference framework's own JIT kernels (SGLang, from its wheel),
    same inputs, same process."""
    ref = reference_module("norm")
    print(f"\n#### Decode sizes beside the reference (us, CUDA-graph medians, median of 3 interleaved rounds; {environment()})\n")
    if ref is None:
        print("not run: the reference is not installed (REFERENCE_WHEEL=/path/to/sglang-*.whl)")
        return
    print("| op | T | jitkern | reference | reference / jitkern |")
    print("|---|---|---|---|---|")
    h, d = 4096, 128
    for t in (1, 2, 4, 8, 16, 32, 64):
        x, w = torch.randn(t, h, dtype=DTYPE, device="cuda"), torch.randn(h, dtype=DTYPE, device="cuda")
        out, r = torch.empty_like(x), torch.randn_like(x)
        q, k = torch.randn(t, 32, d, dtype=DTYPE, device="cuda"), torch.randn(t, 8, d, dtype=DTYPE, device="cuda")
        qw, kw = torch.randn(d, dtype=DTYPE, device="cuda"), torch.randn(d, dtype=DTYPE, device="cuda")
        qa, ka = torch.randn(t, h, dtype=DTYPE, device="cuda"), torch.randn(t, h, dtype=DTYPE, device="cuda")  # the reference: equal widths
        cases = {
            "rmsnorm [T, 4096]": (lambda: rmsnorm(x, w, out), lambda: ref.rmsnorm(x, w, out)),
            "fused_add_rmsnorm [T, 4096]": (lambda: fused_add_rmsnorm(x, r, w), lambda: ref.fused_add_rmsnorm(x, r, w)),
            "fused_inplace_qknorm (32 + 8 heads of 128)": (lambda: fused_inplace_qknorm(q, k, qw, kw),
                                                           lambda: ref.fused_inplace_qknorm(q, k, qw, kw)),
        }
        if hasattr(ref, "fused_inplace_qknorm_across_heads"):  # (not in the reference's newer releases)
            cases["fused_inplace_qknorm_across_heads (q, k [T, 4096])"] = (lambda: fused_inplace_qknorm_across_heads(qa, ka, w, w),
                                                                           lambda: ref.fused_inplace_qknorm_across_heads(qa, ka, w, w))
        for op, (mine, theirs) in cases.items():
            m = interleaved({"jitkern": mine, "reference": theirs})
            print(f"| {op} | {t} | {m['jitkern']:.3f} | {m['reference']:.3f} | {m['reference'] / m['jitkern']:.2f}x |", flush=True)


# name -> bench_norm_widths' entry point (benchmarks/kernels/norm_width_schedules.cuh): the width kernel at 2 vectors a
# thread (the product below 4 rows an SM, and at 3584 the product before at any row count: the same bits) and at 4
# (other bits); the product's folded kernel at 2560 (the product folds 3584 only).
WIDTH_SCHEDULES = {"width kernel, 2 a thread": "static_rows<{E}, 2>", "width kernel, 4 a thread": "static_rows<{E}, 4>",
                   "folded": "folded_rows<{E}>"}
# (op, rows, width) timed, in this order (rows print as measured).
WIDTH_CASES = [("gemma", 4096, 3584), ("rmsnorm", 1024, 3584), ("rmsnorm", 16384, 3584), ("rmsnorm", 4096, 3584), ("rmsnorm", 4096, 2560)]


def width_modules():
    """The entry points of WIDTH_SCHEDULES (module attribute "rmsnorm_<k>", "gemma_<k>": the k-th schedule) and SGLang's
    rmsnorm and grouped_gemma_rmsnorm op modules (None where absent), each built on a thread of its own together with
    jitkern's rmsnorm and gemma_rmsnorm modules (the run's time is short)."""
    import jitkern
    from jitkern import ops
    from jitkern.jit import warmup as build_all

    kernels = Path(__file__).resolve().parent / "kernels"
    wrappers = [(f"{op}_{k}", f"bench_norm_widths::{fn.format(E=e)}") for op, e in (("rmsnorm", "bf16_t"), ("gemma", "bench_norm_widths::Gemma"))
                for k, fn in enumerate(WIDTH_SCHEDULES.values())]
    spec = jitkern.JitSpec("bench_norm_widths", cuda_files=[str(kernels / "norm_width_schedules.cuh")],
                           extra_include_paths=[str(kernels.parent.parent / "csrc")], host_without_nvcc=True, cuda_wrappers=wrappers)
    x = torch.randn(2, 512, dtype=DTYPE, device="cuda")
    w, out = torch.randn(512, dtype=DTYPE, device="cuda"), torch.empty_like(x)

    def reference(path, call):
        module = reference_ops_or_none(path)
        if module is not None:
            call(module)
        return module

    with ThreadPoolExecutor(3) as pool:
        mine = pool.submit(lambda: build_all(spec, *ops.specs(ops=["rmsnorm", "gemma_rmsnorm"], dtypes=[DTYPE]))[0])
        ref = pool.submit(reference, "layernorm.norm", lambda m: m.rmsnorm(x, w, out, EPS))
        gref = pool.submit(reference, "layernorm.grouped_gemma_rmsnorm", lambda m: m.grouped_gemma_rmsnorm(x, w, group_size=512, eps=EPS, out=out))
        module, ref, gref = mine.result(), ref.result(), gref.result()
    ops.warmup(dtypes=[DTYPE], ops=["rmsnorm", "gemma_rmsnorm"])
    return module, ref, gref


def width_cases(check_only: bool):
    """rmsnorm and gemma_rmsnorm at widths whose vectors fill whole warps at two a thread but not at four: the product
    beside each layout of WIDTH_SCHEDULES and SGLang's kernels; each output compared with the product's, bit for bit
    or within a rounding (printed)."""
    from jitkern.ops import gemma_rmsnorm

    module, ref, gref = width_modules()
    every = [(op, t, h) for h in (3584, 2560, 1536) for t in (1, 16, 64, 256, 4096) for op in ("rmsnorm", "gemma")]
    for op, t, h in every if check_only else WIDTH_CASES:
        x, w = torch.randn(t, h, dtype=DTYPE, device="cuda"), torch.randn(h, dtype=DTYPE, device="cuda")
        mine = torch.empty_like(x)
        fns = {"product": (lambda x=x, w=w, o=mine: rmsnorm(x, w, o, EPS)) if op == "rmsnorm" else
               (lambda x=x, w=w, o=mine: gemma_rmsnorm(x, w, EPS, o))}
        outs = {"product": mine}
        for k, name in enumerate(WIDTH_SCHEDULES):
            if name == "folded" and h != 2560:
                continue  # (built for 2560 only)
            o = torch.empty_like(x)
            fns[name], outs[name] = (lambda f=getattr(module, f"{op}_{k}"), x=x, w=w, o=o: f(x, w, o, EPS)), o
        o = torch.empty_like(x)
        if op == "rmsnorm" and ref is not None:
            fns["SGLang"], outs["SGLang"] = (lambda x=x, w=w, o=o: ref.rmsnorm(x, w, o, EPS)), o
        if op == "gemma" and gref is not None:
            fns["SGLang"], outs["SGLang"] = (lambda x=x, w=w, o=o, h=h: gref.grouped_gemma_rmsnorm(x, w, group_size=h, eps=EPS, out=o)), o
        for name, fn in list(fns.items()):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - a side that cannot take the shape is left out
                print(f"<!-- {name} {op} [{t}, {h}]: {type(e).__name__}: {str(e)[:200]} -->")
                del fns[name], outs[name]
        torch.cuda.synchronize()
        same = [name for name in outs if torch.equal(outs[name], mine)]
        near = [name for name in outs if name not in same and torch.allclose(outs[name].float(), mine.float(), atol=1e-2, rtol=8e-3)]
        bad = [name for name in outs if name not in same and name not in near]
        yield op, t, h, {name: fn for name, fn in fns.items() if name not in bad}, f"same bits: {same}; within a rounding: {near}; DIFFER: {bad}"


def width_table(check_only: bool) -> None:
    cases = width_cases(check_only)
    if check_only:
        for op, t, h, _, bits in cases:
            print(f"{op} [{t}, {h}]: {bits}", flush=True)
        return
    names = ["product", *WIDTH_SCHEDULES, "SGLang"]
    print(f"\n#### rmsnorm and gemma_rmsnorm wide-row layouts, bf16 (us, CUDA-graph medians, median of 3 interleaved rounds; {environment()})\n")
    print("| op | shape | " + " | ".join(names) + " | SGLang / product | outputs |")
    print("|---|---|" + "---|" * (len(names) + 2))
    for op, t, h, fns, bits in cases:
        m = interleaved(fns)
        ratio = f"{m['SGLang'] / m['product']:.2f}x" if "SGLang" in m else ""
        print(f"| {op} | [{t}, {h}] | " + " | ".join(f"{m[n]:.2f}" if n in m else "" for n in names) + f" | {ratio} | {bits} |", flush=True)


def main() -> None:
    if sys.argv[1:] == ["reference"]:
        return reference_table()
    if sys.argv[1:2] == ["widths"]:
        return width_table("--check" in sys.argv)
    compile_everything()
    ceilings = copy_ceilings(use_cudagraph=True)
    ceiling = max(ceilings.values())
    print(f"\n### RMSNorm family, bf16 ({environment()})\n")
    print(f"Measured copy ceiling: {copy_ceiling_text(ceilings)}. Times are CUDA-graph medians (p20-p80 in brackets).\n")
    rows, slower, tables = [], [], {}
    for op, shape, t, num_bytes, providers in cases():
        res = {}
        for name, fn in providers.items():
            try:
                res[name] = run_benchmark(fn)
            except Exception as e:  # noqa: BLE001 - a baseline that cannot run is reported, not fatal
                print(f"<!-- {name} failed on {op} {shape}: {type(e).__name__}: {e} -->")
                res[name] = None
        j = res["jitkern"]
        gbps = num_bytes / (j["median"] * 1e-6) / 1e9
        fmt = lambda r: "n/a" if r is None else f"{r['median']:.2f} [{r['p20']:.2f}-{r['p80']:.2f}]"
        eager = res["torch eager"]
        speedup = eager["median"] / j["median"] if eager else float("nan")
        if eager and j["median"] > eager["median"]:
            slower.append(f"{op} {shape}")
        tables.setdefault(op, []).append(
            f"| {shape} | {fmt(j)} | {gbps:.0f} | {100 * gbps / ceiling:.1f}% | {fmt(eager)} | {fmt(res['torch.compile'])} | {speedup:.2f}x |")
        rows.append((op, t, shape, j["median"], eager["median"] if eager else None,
                     res["torch.compile"]["median"] if res["torch.compile"] else None, gbps))
    for op, lines in tables.items():
        print(f"\n#### {op}\n")
        print("| shape | jitkern us | GB/s | % ceiling | torch eager us | torch.compile us | jitkern vs eager |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(lines))
    print("\nShapes where jitkern is slower than torch eager: " + (", ".join(slower) if slower else "none"))
    qknorm_pattern_table(ceiling)
    fused_add_pattern_table()
    decode_floor_table()
    reference_table()
    per_call_table()
    plot(rows, ceiling)


def per_call_table() -> None:
    """Host time per call at decode size (one token): what a model pays per norm when it is not in a
    CUDA graph. The exported function alone is the floor under the Python op (argument conversion,
    C++ validation, launch)."""
    x, w = torch.randn(1, 4096, dtype=DTYPE, device="cuda"), torch.randn(4096, dtype=DTYPE, device="cuda")
    out, r = torch.empty_like(x), torch.randn_like(x)
    q, k = torch.randn(1, 32, 128, dtype=DTYPE, device="cuda"), torch.randn(1, 8, 128, dtype=DTYPE, device="cuda")
    qw, kw = torch.randn(128, dtype=DTYPE, device="cuda"), torch.randn(128, dtype=DTYPE, device="cuda")
    qa, ka, kwa = torch.randn(1, 4096, dtype=DTYPE, device="cuda"), torch.randn(1, 1024, dtype=DTYPE, device="cuda"), w[:1024]
    m = _norm_module(DTYPE)
    exported = {op: getattr(m, op) for op in ("rmsnorm", "fused_add_rmsnorm", "qknorm", "qknorm_across_heads")}
    rows = {
        "rmsnorm [1, 4096]": {
            "jitkern, allocating": lambda: rmsnorm(x, w),
            "jitkern, output=": lambda: rmsnorm(x, w, out),
            "exported function alone": lambda: exported["rmsnorm"](x, w, out, EPS),
            "torch.ops.jitkern.rmsnorm_out.default (as torch.compile's code calls it)":
                lambda: torch.ops.jitkern.rmsnorm_out.default(x, w, out, EPS),
            "torch eager F.rms_norm": lambda: F.rms_norm(x, (4096,), w, EPS),
        },
        "fused_add_rmsnorm [1, 4096]": {
            "jitkern": lambda: fused_add_rmsnorm(x, r, w),
            "exported function alone": lambda: exported["fused_add_rmsnorm"](x, r, w, EPS),
            "torch eager (add_, rms_norm, copy_)": lambda: eager_fused_add(x, r, w),
        },
        "qknorm T = 1, 32 q + 8 k heads, d 128": {
            "jitkern": lambda: fused_inplace_qknorm(q, k, qw, kw),
            "exported function alone": lambda: exported["qknorm"](q, k, qw, kw, EPS, 0),
            "torch eager (2 x rms_norm, copy_)": lambda: eager_qknorm(q, k, qw, kw),
        },
        "qknorm across heads T = 1, q 4096, k 1024": {
            "jitkern": lambda: fused_inplace_qknorm_across_heads(qa, ka, w, kwa),
            "exported function alone": lambda: exported["qknorm_across_heads"](qa, ka, w, kwa, EPS),
        },
    }
    print(f"\n#### Per-call host time at decode size (us per call; median over {BATCHES} batches of {BATCH} calls)\n")
    print("| op | path | us per call |")
    print("|---|---|---|")
    for op, paths in rows.items():
        for path, fn in paths.items():
            print(f"| {op} | {path} | {per_call_us(fn):.2f} |")


def fused_add_pattern_table() -> None:
    """fused_add_rmsnorm against an in-place read and write-back of its two buffers (its bytes, nothing else)."""
    module = yardstick_module()
    print("\n#### fused_add_rmsnorm against its access pattern's ceiling\n")
    print("| shape | fused_add_rmsnorm us | GB/s | pattern ceiling (read both buffers, write both back), us | GB/s | % of pattern ceiling |")
    print("|---|---|---|---|---|---|")
    for t in get_benchmark_range([8192, 32768], [8192]):
        x = torch.randn(t, 4096, dtype=DTYPE, device="cuda")
        r = torch.randn(t, 4096, dtype=DTYPE, device="cuda")
        w = torch.randn(4096, dtype=DTYPE, device="cuda")
        a, b = x.view(-1).view(torch.int32), r.view(-1).view(torch.int32)
        a0, b0 = a.clone(), b.clone()
        module.rewrite_pair(a, b, 1)
        assert torch.equal(a[::4], a0[::4] ^ 1) and torch.equal(b[::4], b0[::4] ^ 1), "rewrite_pair missed a vector"
        module.rewrite_pair(a, b, 1)
        assert torch.equal(a, a0) and torch.equal(b, b0)
        num_bytes = 4 * x.numel() * 2
        fused = run_benchmark(lambda: fused_add_rmsnorm(x, r, w, EPS))["median"]
        pattern = run_benchmark(lambda: module.rewrite_pair(a, b, 0))["median"]
        gb = lambda us: num_bytes / (us * 1e-6) / 1e9  # noqa: E731
        print(f"| [{t}, 4096] | {fused:.2f} | {gb(fused):.0f} | {pattern:.2f} | {gb(pattern):.0f} | {100 * pattern / fused:.1f}% |")


def decode_floor_table() -> None:
    """Decode sizes against their dependency pattern, in the same run: one CTA per [T, 4096] row at the
    norms' launch shape (128 threads of four vectors), the row read and written back in place with 0, 1
    or 2 CTA-wide reductions in series between the loads and the stores (rmsnorm has one, dynamic
    rmsnorm_quant_fp8 two: the sum of squares, then the amax of the normalised row)."""
    module = yardstick_module()
    print("\n#### Decode sizes against their dependency pattern (us)\n")
    print("| T | rmsnorm | rmsnorm_quant_fp8 static | rmsnorm_quant_fp8 dynamic | fused_add_rmsnorm | "
          "rows rewritten, no reduction | one CTA reduction | two in series |")
    print("|---|---|---|---|---|---|---|---|")
    for t in get_benchmark_range([1, 4, 16, 64], [1, 64]):
        x = torch.randn(t, 4096, dtype=DTYPE, device="cuda")
        r = torch.randn(t, 4096, dtype=DTYPE, device="cuda")
        w = torch.randn(4096, dtype=DTYPE, device="cuda")
        scale = torch.tensor([0.01], device="cuda")
        out = torch.empty_like(x)
        as_int32 = x.view(torch.int32)
        before = as_int32.clone()
        for reductions in range(3):
            module.rewrite_rows(as_int32, reductions, 1)
            assert torch.equal(as_int32[:, ::4], before[:, ::4] ^ 1), f"rewrite_rows({reductions}) missed a vector"
            assert torch.equal(as_int32[:, 1::4], before[:, 1::4]), f"rewrite_rows({reductions}) changed a word it must keep"
            module.rewrite_rows(as_int32, reductions, 1)
        times = [run_benchmark(fn)["median"] for fn in (
            lambda: rmsnorm(x, w, out, EPS),
            lambda: rmsnorm_quant_fp8(x, w, EPS, scale=scale),
            lambda: rmsnorm_quant_fp8(x, w, EPS),
            lambda: fused_add_rmsnorm(x, r, w, EPS),
            lambda: module.rewrite_rows(as_int32, 0, 0),
            lambda: module.rewrite_rows(as_int32, 1, 0),
            lambda: module.rewrite_rows(as_int32, 2, 0),
        )]
        print(f"| {t} | " + " | ".join(f"{v:.2f}" for v in times) + " |")


def qknorm_pattern_table(ceiling: float) -> None:
    """qknorm against the ceiling of its own access pattern, and on separate contiguous q and k buffers.

    The pattern ceiling is an in-place read and write-back of exactly the bytes qknorm moves (the q and k
    columns, 40 of every 48 heads, of a [T, 48*128] qkv buffer) with nothing else: no kernel that reads
    and writes those bytes in place can beat it by much."""
    module = yardstick_module()
    print("\n#### qknorm against its access pattern's ceiling\n")
    print("| T | qknorm on fused qkv, us | GB/s | pattern ceiling (in-place rewrite of the q, k columns), us | GB/s | "
          "qknorm % of pattern ceiling | qknorm on separate contiguous q, k buffers, us | GB/s | % of copy ceiling |")
    print("|---|---|---|---|---|---|---|---|---|")
    for t in get_benchmark_range([256, 8192, 32768], [8192]):
        qkv = torch.randn(t, 48 * 128, dtype=DTYPE, device="cuda")
        q, k = qkv[:, : 32 * 128].view(t, 32, 128), qkv[:, 32 * 128 : 40 * 128].view(t, 8, 128)
        qw, kw = torch.randn(128, dtype=DTYPE, device="cuda"), torch.randn(128, dtype=DTYPE, device="cuda")
        num_bytes = 2 * (q.numel() + k.numel()) * 2
        as_int32, width = qkv.view(torch.int32), 40 * 128 // 2
        before = as_int32.clone()
        module.rewrite_columns(as_int32, width, 1)  # flips bit 0 of the first word of every 16-byte vector
        assert torch.equal(as_int32[:, :width:4], before[:, :width:4] ^ 1), "rewrite_columns missed a vector"
        assert torch.equal(as_int32[:, width:], before[:, width:]), "rewrite_columns wrote outside the columns"
        module.rewrite_columns(as_int32, width, 1)
        assert torch.equal(as_int32, before)
        fused = run_benchmark(lambda: fused_inplace_qknorm(q, k, qw, kw, EPS))["median"]
        pattern = run_benchmark(lambda: module.rewrite_columns(as_int32, width, 0))["median"]
        qs, ks = torch.randn(t, 32, 128, dtype=DTYPE, device="cuda"), torch.randn(t, 8, 128, dtype=DTYPE, device="cuda")
        separate = run_benchmark(lambda: fused_inplace_qknorm(qs, ks, qw, kw, EPS))["median"]
        gb = lambda us: num_bytes / (us * 1e-6) / 1e9  # noqa: E731
        print(f"| {t} | {fused:.2f} | {gb(fused):.0f} | {pattern:.2f} | {gb(pattern):.0f} | {100 * pattern / fused:.1f}% | "
              f"{separate:.2f} | {gb(separate):.0f} | {100 * gb(separate) / ceiling:.1f}% |")


def plot(rows, ceiling) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    ops = sorted({r[0] for r in rows}, key=lambda o: [r[0] for r in rows].index(o))
    fig, axes = plt.subplots(1, len(ops), figsize=(5 * len(ops), 4))
    for ax, op in zip(axes, ops):
        sel = [r for r in rows if r[0] == op and (op.startswith("q") or r[2].endswith("4096]"))]
        ts = [r[1] for r in sel]
        ax.plot(ts, [r[6] for r in sel], "o-", label="jitkern")
        for idx, name in ((4, "torch eager"), (5, "torch.compile")):
            gb = [sel_r[6] * sel_r[3] / sel_r[idx] if sel_r[idx] else float("nan") for sel_r in sel]
            ax.plot(ts, gb, "s--", label=name)
        ax.axhline(ceiling, color="gray", lw=0.8, label="copy ceiling")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens")
        ax.set_ylabel("GB/s")
        ax.set_title(op + (" (H=4096)" if not op.startswith("q") else ""), fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(os.environ.get("OUT", ".")) / "bench_norm.png"
    fig.savefig(out, dpi=110)
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
