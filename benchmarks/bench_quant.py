"""The 8-bit quantization family (bf16 input): jitkern vs torch eager vs torch.compile of the same math, time,
GB/s and % of the op's access-pattern ceiling, measured in the same run; per-tensor fp8 beside the
reference framework's kernel, and RMSNorm + 1x128 group quantization beside the reference's closest op
(where its wheel is installed or REFERENCE_WHEEL names it). Prints markdown tables; `bench_quant.py
reference`: only the tables beside the reference; `bench_quant.py group`: only the norm + group tables, the product
beside other schedules of its kernels (benchmarks/kernels/norm_group_schedules.cuh, checked bit for bit against
the product first; `group schedules`: without the table beside the reference; `group prefill`: only the prefill
sizes).

Pattern ceilings (benchmarks/kernels/copy_ceiling.cuh): `halve` reads 16 bytes and writes 8 per thread,
the traffic of a 2-byte to 1-byte conversion; dynamic per-tensor adds one read of the input (`read_all`).
fused_add_rmsnorm + quantization moves 7 bytes an element (input and residual read, residual and q
written): its ceiling is the measured copy bandwidth."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import (copy_ceiling_text, copy_ceilings, environment, get_benchmark_range, interleaved, overhead_module,  # noqa: E402
                   reference_module, reference_ops_or_none, run_benchmark, yardstick_module)

import jitkern  # noqa: E402
from jitkern.jit import warmup as warmup_modules  # noqa: E402
from jitkern.ops import (fused_add_rmsnorm, fused_add_rmsnorm_group_quant_fp8, fused_add_rmsnorm_quant_fp8, group_scales_like,  # noqa: E402
                         per_tensor_quant_fp8, per_token_group_quant_8bit, per_token_quant_fp8, rmsnorm, rmsnorm_group_quant_fp8,
                         rmsnorm_quant_fp8, warmup)

DTYPE = torch.bfloat16
FP8 = torch.float8_e4m3fn
H = 4096
DECODE = get_benchmark_range([1, 2, 4, 8, 16, 32, 64, 128, 256], [1, 64])
EPS = 1e-6


def _finite_amax(x, dim=None):
    a = x.float().abs()
    a = torch.where(torch.isfinite(a), a, torch.zeros_like(a))
    return a.amax() if dim is None else a.amax(dim=dim, keepdim=True)


def torch_per_tensor_static(x, s):
    return (x.float() / s).clamp(-448, 448).to(FP8)


def torch_per_tensor_dynamic(x):
    s = _finite_amax(x).clamp(min=1e-10) / 448
    return (x.float() / s).clamp(-448, 448).to(FP8), s


def torch_per_token(x):
    s = _finite_amax(x, -1).clamp(min=1e-10) / 448
    return (x.float() / s).clamp(-448, 448).to(FP8), s


def torch_per_group(x, group=128):
    g = x.view(x.shape[0], -1, group)
    s = _finite_amax(g, -1).clamp(min=1e-10) / 448
    return (g.float() / s).clamp(-448, 448).to(FP8).view(x.shape), s.view(x.shape[0], -1)


def torch_rmsnorm_quant(x, w):
    y = torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS)
    return torch_per_token(y)


def torch_fused_add_rmsnorm_quant(x, r, w):
    r.add_(x)
    return torch_rmsnorm_quant(r, w)


COMPILED = {f.__name__: torch.compile(f) for f in (torch_per_tensor_static, torch_per_tensor_dynamic, torch_per_token, torch_per_group,
                                                    torch_rmsnorm_quant, torch_fused_add_rmsnorm_quant)}


def us(fn) -> dict:
    return run_benchmark(fn)


def fmt(r) -> str:
    return "n/a" if r is None else f"{r['median']:.2f} [{r['p20']:.2f}-{r['p80']:.2f}]"


def timed(providers: dict) -> dict:
    out = {}
    for name, fn in providers.items():
        try:
            out[name] = us(fn)
        except Exception as e:  # noqa: BLE001 - a baseline that cannot run is reported, not fatal
            print(f"<!-- {name} failed: {type(e).__name__}: {e} -->")
            out[name] = None
    return out


def pattern_us(module, rows: int, with_read: bool = False, h: int = H) -> float:
    """The ceiling of reading rows x h bf16 and writing rows x h bytes (plus, with_read, one more read)."""
    src = torch.randint(-(2**31), 2**31 - 1, (rows * h // 2,), dtype=torch.int32, device="cuda")
    dst = torch.empty(src.numel() // 2, dtype=torch.int32, device="cuda")
    module.halve(dst, src)
    assert torch.equal(dst, (src.view(-1, 2)[:, 0] ^ src.view(-1, 2)[:, 1])), "halve did not do its work"
    t = us(lambda: module.halve(dst, src))["median"]
    if with_read:
        acc = torch.zeros(1, dtype=torch.int32, device="cuda")
        t += us(lambda: module.read_all(acc, src))["median"]
    return t


def table(title: str, header: str, lines: list[str]) -> None:
    print(f"\n#### {title}\n")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    if lines:
        print("\n".join(lines))


def large_shapes(module, ceiling: float) -> None:
    rows = get_benchmark_range(32768, 8192)
    x = torch.randn(rows, H, dtype=DTYPE, device="cuda")
    moved = x.numel() * 3  # read 2 bytes, write 1 per element
    gb = lambda t, b=moved: b / (t * 1e-6) / 1e9  # noqa: E731
    halve = pattern_us(module, rows)
    halve_read = pattern_us(module, rows, with_read=True)
    s = torch.tensor([0.02], device="cuda")
    q = torch.empty(rows, H, dtype=FP8, device="cuda")
    s_out = torch.empty(1, device="cuda")
    cases = [
        ("per_tensor static", halve, moved, {
            "jitkern": lambda: per_tensor_quant_fp8(x, q, s, is_static=True),
            "torch eager": lambda: torch_per_tensor_static(x, s),
            "torch.compile": lambda: COMPILED["torch_per_tensor_static"](x, s)}),
        ("per_tensor dynamic", halve_read, moved + x.numel() * 2, {
            "jitkern": lambda: per_tensor_quant_fp8(x, q, s_out),
            "torch eager": lambda: torch_per_tensor_dynamic(x),
            "torch.compile": lambda: COMPILED["torch_per_tensor_dynamic"](x)}),
        ("per_token", halve, moved, {
            "jitkern": lambda: per_token_quant_fp8(x, q),
            "torch eager": lambda: torch_per_token(x),
            "torch.compile": lambda: COMPILED["torch_per_token"](x)}),
        ("per_token_group 128, row-major scales", halve, moved, {
            "jitkern": lambda: per_token_group_quant_8bit(x, 128, output_q=q),
            "torch eager": lambda: torch_per_group(x),
            "torch.compile": lambda: COMPILED["torch_per_group"](x)}),
        ("per_token_group 128, UE8M0 column-major TMA-aligned", halve, moved, {
            "jitkern": lambda: per_token_group_quant_8bit(x, 128, output_q=q, column_major_scales=True, scale_tma_aligned=True,
                                                          scale_ue8m0=True)}),
        ("per_token_group 128 -> int8", halve, moved, {
            "jitkern": lambda: per_token_group_quant_8bit(x, 128, torch.int8)}),
    ]
    lines = []
    for name, pattern, num_bytes, providers in cases:
        r = timed(providers)
        j = r["jitkern"]["median"]
        lines.append(f"| {name} | {fmt(r['jitkern'])} | {gb(j, num_bytes):.0f} | {pattern:.2f} | {100 * pattern / j:.1f}% | "
                     f"{fmt(r.get('torch eager'))} | {fmt(r.get('torch.compile'))} |")
    table(f"Quantization at [{rows}, {H}] bf16 -> fp8",
          "| op | jitkern us | GB/s | pattern ceiling us | % of pattern ceiling | torch eager us | torch.compile us |", lines)
    print(f"\nPattern ceiling: `halve` (read 2 B, write 1 B per element); dynamic per-tensor adds `read_all` (one more read). "
          f"Copy ceiling for reference: {copy_ceiling_text(ceiling)}.")


def decode_shapes() -> None:
    lines = []
    for t in DECODE:
        x = torch.randn(t, H, dtype=DTYPE, device="cuda")
        q = torch.empty(t, H, dtype=FP8, device="cuda")
        s = torch.empty(1, device="cuda")
        r = timed({
            "per_tensor dynamic": lambda: per_tensor_quant_fp8(x, q, s),
            "torch.compile per_tensor dynamic": lambda: COMPILED["torch_per_tensor_dynamic"](x),
            "per_token": lambda: per_token_quant_fp8(x, q),
            "per_token_group 128": lambda: per_token_group_quant_8bit(x, 128, output_q=q),
            "torch.compile per_token_group": lambda: COMPILED["torch_per_group"](x),
        })
        lines.append(f"| {t} | " + " | ".join(fmt(v) for v in r.values()) + " |")
    table(f"Decode sizes [T, {H}] bf16 -> fp8 (us, CUDA-graph medians)",
          "| T | per_tensor dynamic | torch.compile per_tensor dynamic | per_token | per_token_group 128 | "
          "torch.compile per_token_group |", lines)


def norm_quant(module) -> None:
    lines = []
    for t in get_benchmark_range([1, 4, 16, 64, 4096, 16384], [1, 16384]):
        x = torch.randn(t, H, dtype=DTYPE, device="cuda")
        r0 = torch.randn(t, H, dtype=DTYPE, device="cuda")
        w = torch.randn(H, dtype=DTYPE, device="cuda")
        q = torch.empty(t, H, dtype=FP8, device="cuda")
        s = torch.tensor([0.02], device="cuda")
        y = torch.empty_like(x)
        res = timed({
            "rmsnorm_quant_fp8 static": lambda: rmsnorm_quant_fp8(x, w, EPS, scale=s, output_q=q),
            "rmsnorm_quant_fp8 dynamic": lambda: rmsnorm_quant_fp8(x, w, EPS, output_q=q),
            "rmsnorm + per_token_quant_fp8": lambda: per_token_quant_fp8(rmsnorm(x, w, y, EPS), q),
            "torch.compile rmsnorm + quant": lambda: COMPILED["torch_rmsnorm_quant"](x, w),
            "fused_add_rmsnorm_quant_fp8 dynamic": lambda: fused_add_rmsnorm_quant_fp8(x, r0, w, EPS, output_q=q),
            "fused_add_rmsnorm + per_token_quant_fp8": lambda: (fused_add_rmsnorm(x, r0, w, EPS), per_token_quant_fp8(x, q)),
            "torch.compile fused add + rmsnorm + quant": lambda: COMPILED["torch_fused_add_rmsnorm_quant"](x, r0, w),
        })
        m = {k: (v["median"] if v else float("nan")) for k, v in res.items()}
        pattern = pattern_us(module, t) if t >= 4096 else float("nan")
        pct = f"{100 * pattern / m['rmsnorm_quant_fp8 dynamic']:.1f}%" if t >= 4096 else "-"
        lines.append(f"| {t} | {fmt(res['rmsnorm_quant_fp8 static'])} | {fmt(res['rmsnorm_quant_fp8 dynamic'])} | {pct} | "
                     f"{fmt(res['rmsnorm + per_token_quant_fp8'])} | {fmt(res['torch.compile rmsnorm + quant'])} | "
                     f"{fmt(res['fused_add_rmsnorm_quant_fp8 dynamic'])} | {fmt(res['fused_add_rmsnorm + per_token_quant_fp8'])} | "
                     f"{m['fused_add_rmsnorm + per_token_quant_fp8'] / m['fused_add_rmsnorm_quant_fp8 dynamic']:.2f}x | "
                     f"{fmt(res['torch.compile fused add + rmsnorm + quant'])} |")
    table(f"RMSNorm + fp8 quantization, [T, {H}] bf16 (us, CUDA-graph medians)",
          "| T | rmsnorm_quant_fp8 static | rmsnorm_quant_fp8 dynamic | dynamic % of pattern ceiling (halve) | rmsnorm + per_token_quant | "
          "torch.compile | fused_add_rmsnorm_quant_fp8 dynamic | fused_add_rmsnorm + per_token_quant | fused speed-up | torch.compile |",
          lines)


# DeepSeek-V3-style operands of fp8 block-scaled GEMMs: fp32 scales, column-major, TMA-aligned.
GROUP_FLAGS = dict(column_major_scales=True, scale_tma_aligned=True)


def _group_operands(t: int, h: int):
    """x, r0 (residual), y (rmsnorm's output), q, s (TMA-aligned column-major fp32 scales) for [t, h] bf16."""
    x, r0 = torch.randn(t, h, dtype=DTYPE, device="cuda"), torch.randn(t, h, dtype=DTYPE, device="cuda")
    return x, r0, torch.empty_like(x), torch.empty(t, h, dtype=FP8, device="cuda"), group_scales_like(x, 128, **GROUP_FLAGS)


ROUNDINGS = ("exact", "sglang")  # rounding= of the ops, each measured


def _group_providers(x, r0, w, y, q, s) -> dict:
    """The fused ops and their two-op sequences (rmsnorm or fused_add_rmsnorm, then per_token_group_quant_8bit),
    into q and s, with each rounding: "fused exact", "unfused exact", "fused add exact", "unfused add exact", ..."""
    out = {}
    for r in ROUNDINGS:
        out[f"fused {r}"] = lambda r=r: rmsnorm_group_quant_fp8(x, w, EPS, output_q=q, output_s=s, rounding=r, **GROUP_FLAGS)
        out[f"unfused {r}"] = lambda r=r: per_token_group_quant_8bit(rmsnorm(x, w, y, EPS), 128, output_q=q, output_s=s, rounding=r,
                                                                     **GROUP_FLAGS)
        out[f"fused add {r}"] = lambda r=r: fused_add_rmsnorm_group_quant_fp8(x, r0, w, EPS, output_q=q, output_s=s, rounding=r,
                                                                               **GROUP_FLAGS)
        out[f"unfused add {r}"] = lambda r=r: (fused_add_rmsnorm(x, r0, w, EPS),
                                               per_token_group_quant_8bit(x, 128, output_q=q, output_s=s, rounding=r, **GROUP_FLAGS))
    return out


# ---- the norm + group ops under other schedules (benchmarks/kernels/norm_group_schedules.cuh) ----------

# name -> bench_norm_group::Sched's arguments, NormGroupSchedule's members: vectors of one group a lane in
# norm_group_rows_kernel from 4 rows an SM on (plain, fused add), below it (0: the norm kernels' launch, one
# vector a thread), packed-pair arithmetic (PairMath), the early PDL trigger up to that many rows (plain, fused
# add), rows split over a cluster of 8 CTAs up to that many rows (plain, fused add; norm_group_cluster_kernel), the
# code and scale addresses computed before the wait (plain, fused add), 1 / hidden computed before the wait below 4
# rows an SM, the plain op's many-row launch bounds (threads, CTAs an SM, from this CTA width; 0: none), the plain op's
# rows a CTA below 4 rows an SM where there are more rows than SMs, from this CTA width; or a type of
# norm_group_schedules.cuh with those entry points.
NORM_GROUP_SCHEDULES = {
    "unbounded": (4, 2, 2, 1, 1, 8, 16, 0, 4, 1, 1, 1, 0, 0, 0, 2, 385),
    "bounded (the product's)": (4, 2, 2, 1, 1, 8, 16, 0, 4, 1, 1, 1, 224, 5, 128, 2, 385),
    "1 row a CTA": (4, 2, 2, 1, 1, 8, 16, 0, 4, 1, 1, 1, 224, 5, 128, 1, 385),
    "stream2": "StreamRows<2>",
}
DECODE_SCHEDULES = ["1 row a CTA"]  # beside the product at decode sizes: rmsnorm_group_quant_fp8
DECODE_FUSED_SCHEDULES = []  # ... the fused add
PREFILL_SCHEDULES = ["unbounded", "bounded (the product's)"]  # ... the plain op at prefill sizes
PREFILL_FUSED_SCHEDULES = []  # ... the fused add
KERNELS = Path(__file__).resolve().parent / "kernels"


def _schedule_spec(name: str, ops: str, wrappers: list) -> "jitkern.JitSpec":
    module = "bench_norm_group_" + re.sub(r"\W+", "_", name.replace("bench_norm_group::", "")).strip("_")
    return jitkern.JitSpec(module, cuda_files=[str(KERNELS / "norm_group_schedules.cuh")], extra_include_paths=[str(KERNELS.parent.parent / "csrc")],
                           host_without_nvcc=True, cuda_wrappers=wrappers)


def norm_group_schedule_modules(names) -> dict:
    """name -> the module of the norm + group ops (1x128 groups, fp32 scales) under that schedule: plain(input,
    weight, output_q, output_s, group_size, eps), fused(input, residual, weight, ...); and "pattern" -> the module of
    pattern(input, weight, output_q, output_s) (bench_norm_group::pattern_rows) and pattern_with(..., scales)
    (pattern_rows_with); built at once."""
    def spec(name):
        v = NORM_GROUP_SCHEDULES[name]
        ops = f"bench_norm_group::Ops<{', '.join(map(str, v))}>" if isinstance(v, tuple) else f"bench_norm_group::{v}"
        return _schedule_spec(ops, ops, [("plain", f"{ops}::rmsnorm_group_quant<128>"), ("fused", f"{ops}::fused_add_rmsnorm_group_quant<128>")])

    specs = [spec(n) for n in names] + [_schedule_spec("pattern", "", [("pattern", "bench_norm_group::pattern_rows"),
                                                                    ("pattern_with", "bench_norm_group::pattern_rows_with")])]
    return dict(zip([*names, "pattern"], warmup_modules(*specs)))


def _scales_2d(s):
    return s.view(-1, s.shape[-1]) if s.dim() != 2 else s


def scheduled(module, x, r, w, q, s):
    """The norm + group op (r None: rmsnorm_group_quant_fp8, else the fused add) of a schedule's module, into q and s."""
    s2 = _scales_2d(s)
    if r is None:
        module.plain(x, w, q.view(torch.uint8), s2, 128, EPS)
    else:
        module.fused(x, r, w, q.view(torch.uint8), s2, 128, EPS)


def norm_group_self_check(modules: dict) -> dict:
    """The schedules that give the product's codes, scales and residual, bit for bit (NaN and inf rows included), at
    decode and many-row sizes and at a width whose last warp is part-held; each other one is reported and left out
    (the "pattern" yardstick, whose output is not the op's, is passed on unchecked)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    many = 4 * sms + 5
    failed = {}
    yardsticks = {n: m for n, m in modules.items() if n == "pattern"}
    modules = {n: m for n, m in modules.items() if n != "pattern"}
    for h in (7168, 5248, 4096):
        w = torch.randn(h, dtype=DTYPE, device="cuda")
        for t in (1, 37, 2 * sms + 1, many, 8 * many):
            x, r0, _, q0, s0 = _group_operands(t, h)
            x[t // 2, 5] = float("nan")
            x[t - 1, 9] = float("inf")
            for fused in (False, True):
                res0 = r0.clone() if fused else None
                if fused:
                    fused_add_rmsnorm_group_quant_fp8(x, res0, w, EPS, output_q=q0, output_s=s0, **GROUP_FLAGS)
                else:
                    rmsnorm_group_quant_fp8(x, w, EPS, output_q=q0, output_s=s0, **GROUP_FLAGS)
                for name, module in modules.items():
                    if name in failed:
                        continue
                    q, s = torch.full_like(q0.view(torch.uint8), 0x7F).view(FP8), group_scales_like(x, 128, **GROUP_FLAGS).fill_(-1.0)
                    res = r0.clone() if fused else None
                    where = f"at [{t}, {h}] (fused add: {fused})"
                    try:
                        scheduled(module, x, res, w, q, s)
                        torch.cuda.synchronize()
                    except Exception as e:  # noqa: BLE001 - a schedule that cannot run is reported, not fatal
                        failed[name] = f"{where}: {type(e).__name__}: {e}"
                        continue
                    if not torch.equal(q.view(torch.uint8), q0.view(torch.uint8)):
                        failed[name] = f"{where}: codes differ from the product's"
                    elif not torch.equal(s.view(torch.int32), s0.view(torch.int32)):
                        failed[name] = f"{where}: scales differ"
                    elif fused and not torch.equal(res.view(torch.int16), res0.view(torch.int16)):
                        failed[name] = f"{where}: residual differs"
    passed = {n: m for n, m in modules.items() if n not in failed}
    print(f"\nSelf-check: {', '.join(passed) or 'none'} give the product's bits at [1 / 37 / {2 * sms + 1} / {many} / {8 * many}, 7168 / 5248 / "
          "4096], both ops.")
    for name, why in failed.items():
        print(f"Self-check FAILED, left out: {name} {why}")
    return {**passed, **yardsticks}


def norm_group_decode(modules: dict) -> None:
    """The fused ops against jitkern's unfused sequence (rmsnorm or fused_add_rmsnorm, then
    per_token_group_quant_8bit) at decode sizes, 1x128 groups, each rounding, beside the schedules (exact) and
    four yardsticks of the same run: rmsnorm alone (the fused op's floor: the pair's first launch), the plain op's
    access pattern without its arithmetic (the "pattern" module), the rows rewritten in place after one CTA reduction
    (rewrite_rows: the dependency pattern of a norm, no arithmetic) and an empty PDL launch; rows printed as measured."""
    plain_names, add_names = [n for n in DECODE_SCHEDULES if n in modules], [n for n in DECODE_FUSED_SCHEDULES if n in modules]
    columns, add_columns = "".join(f" {n} |" for n in plain_names), "".join(f" {n} |" for n in add_names)
    table("RMSNorm + 1x128 group fp8 at decode sizes, [T, H] bf16, fp32 scales column-major TMA-aligned (us, CUDA-graph medians, "
          "median of 3 interleaved rounds; fused ops: us (speed-up over their two ops of the same rounding))",
          f"| H | T | rmsnorm_group_quant_fp8 exact | sglang | rmsnorm + per_token_group_quant exact | sglang |{columns} "
          f"fused_add_rmsnorm_group_quant_fp8 exact | sglang | fused_add_rmsnorm + per_token_group_quant exact | sglang |{add_columns} "
          "rmsnorm alone | its access pattern without the arithmetic | rows rewritten after one CTA reduction | empty PDL launch |", [])
    module, empty, pattern = yardstick_module(), overhead_module().launch_empty_pdl, modules.get("pattern")
    scratch = torch.zeros(16, device="cuda", dtype=torch.int32)
    for h, sizes in ((7168, [1, 4, 16, 256, 512]), (6144, [256]), (5120, [256]), (4096, [1, 64, 256, 512])):
        w = torch.randn(h, dtype=DTYPE, device="cuda")
        for t in get_benchmark_range(sizes, [1]):
            x, r0, y, q, s = _group_operands(t, h)
            rows = torch.randn(t, h, dtype=DTYPE, device="cuda").view(torch.int32)
            m = interleaved({
                **_group_providers(x, r0, w, y, q, s),
                **{n: lambda n=n: scheduled(modules[n], x, None, w, q, s) for n in plain_names},
                **{f"add {n}": lambda n=n: scheduled(modules[n], x, r0, w, q, s) for n in add_names},
                "rmsnorm": lambda: rmsnorm(x, w, y, EPS),
                **({"pattern": lambda: pattern.pattern(x, w, q.view(torch.uint8), _scales_2d(s))} if pattern else {}),
                "rewrite": lambda: module.rewrite_rows(rows, 1, 0),
                "empty": lambda: empty(scratch, scratch),
            })
            cells = [f"{m[f'{op} {r}']:.2f} ({m[f'un{op} {r}'] / m[f'{op} {r}']:.2f}x)" for op in ("fused",) for r in ROUNDINGS]
            cells += [f"{m[f'unfused {r}']:.2f}" for r in ROUNDINGS]
            cells += [f"{m[n]:.2f} ({m['unfused exact'] / m[n]:.2f}x)" for n in plain_names]
            cells += [f"{m[f'fused add {r}']:.2f} ({m[f'unfused add {r}'] / m[f'fused add {r}']:.2f}x)" for r in ROUNDINGS]
            cells += [f"{m[f'unfused add {r}']:.2f}" for r in ROUNDINGS]
            cells += [f"{m[f'add {n}']:.2f} ({m['unfused add exact'] / m[f'add {n}']:.2f}x)" for n in add_names]
            cells += [f"{m[n]:.2f}" if n in m else "n/a" for n in ("rmsnorm", "pattern", "rewrite", "empty")]
            print(f"| {h} | {t} | " + " | ".join(cells) + " |", flush=True)


# SASS instructions a thread issues for a row of finite values on the fast path (cuobjdump -sass of an nvcc -arch=sm_90a
# build of csrc/quant.cuh, branches followed as a finite row takes them), 4 vectors (32 bf16) a thread: the many-row
# kernel of rmsnorm_group_quant_fp8 (norm_group_rows_kernel<bf16, 8, 128, 4, ...>) by rounding (exact: under its launch
# bounds, rows of 4096-7168).
PLAIN_MANY_ROW_SASS = {"exact": 530, "sglang": 436}


def issue_bound_us(t: int, h: int, rounding: str) -> float:
    """The time rmsnorm_group_quant_fp8's many-row kernel needs to issue its instructions, every SM issuing 4 a cycle
    (one a scheduler) at the device's clock: a floor beside the memory ceiling."""
    props = torch.cuda.get_device_properties(0)
    clock_hz = getattr(props, "clock_rate", 1980000) * 1e3  # kHz; H200's boost clock where torch does not say
    warp_instructions = t * (h // 8 // 4) / 32 * PLAIN_MANY_ROW_SASS[rounding]
    return warp_instructions / (props.multi_processor_count * 4 * clock_hz) * 1e6


# (H, T) of the prefill table; [16632, 5120]: 18 whole waves of the plain op's many-row kernel at that width (7 CTAs an SM,
# 132 SMs), beside 16384 (17.7).
PREFILL_SIZES = ((7168, [4096, 32768]), (6144, [16384]), (5120, [16384, 16632]), (4096, [32768]))


def norm_group_large(module, ceilings: dict, modules: dict, widths=None) -> None:
    """The fused ops at prefill sizes with each rounding: % of the `halve` pattern's ceiling (rmsnorm: 3 bytes an
    element) and of its own access pattern without the arithmetic (the "pattern" module), and of the copy ceiling
    (fused add: 7 bytes an element), beside PREFILL_SCHEDULES and PREFILL_FUSED_SCHEDULES (exact),
    the instruction-issue bound (issue_bound_us), the plain op's access pattern without its arithmetic (the "pattern"
    module: % of `halve`), that pattern without its scale stores, and the rows rewritten in place after one CTA
    reduction (rewrite_rows, 4 bytes an element: % of copy); median of 3 interleaved rounds; rows
    printed as measured. widths: the H measured (default every one)."""
    copy = max(ceilings.values())
    names, add_names = [n for n in PREFILL_SCHEDULES if n in modules], [n for n in PREFILL_FUSED_SCHEDULES if n in modules]
    columns, add_columns = "".join(f" {n} |" for n in names), "".join(f" {n} |" for n in add_names)
    table("RMSNorm + 1x128 group fp8 at prefill sizes, [T, H] bf16, fp32 scales column-major TMA-aligned (us, CUDA-graph medians, median "
          "of 3 interleaved rounds; rmsnorm_group_quant_fp8: (% of the `halve` pattern ceiling / % of its access pattern without the "
          "arithmetic), fused add: (% of the copy ceiling))",
          f"| H | T | rmsnorm_group_quant_fp8 exact | sglang |{columns} issue bound exact | sglang | its access pattern without the arithmetic | "
          "the pattern without its scale stores | "
          f"fused_add_rmsnorm_group_quant_fp8 exact | sglang |{add_columns} rows rewritten after one CTA reduction (% of copy) |", [])
    pattern = modules.get("pattern")
    for h, sizes in PREFILL_SIZES:
        if widths and h not in widths:
            continue
        w = torch.randn(h, dtype=DTYPE, device="cuda")
        for t in get_benchmark_range(sizes, [4096]):
            x, r0, y, q, s = _group_operands(t, h)
            rows = torch.randn(t, h, dtype=DTYPE, device="cuda").view(torch.int32)
            providers = _group_providers(x, r0, w, y, q, s)
            m = interleaved({**{k: providers[k] for r in ROUNDINGS for k in (f"fused {r}", f"fused add {r}")},
                             **{n: lambda n=n: scheduled(modules[n], x, None, w, q, s) for n in names},
                             **{f"add {n}": lambda n=n: scheduled(modules[n], x, r0, w, q, s) for n in add_names},
                             **({"pattern": lambda: pattern.pattern(x, w, q.view(torch.uint8), _scales_2d(s)),
                                 "pattern without scales": lambda: pattern.pattern_with(x, w, q.view(torch.uint8), _scales_2d(s), False)}
                                if pattern else {}),
                             "rewrite": lambda: module.rewrite_rows(rows, 1, 0)})
            halve = pattern_us(module, t, h=h)
            add = (7 * t * h + 4 * t * (h // 128)) / 1e3 / copy  # us at the copy ceiling (bytes / 1e3: GB/s from us)
            of_pattern = (lambda us: f" / {100 * m['pattern'] / us:.1f}%") if pattern else (lambda us: "")
            plain = " | ".join(f"{m[k]:.2f} ({100 * halve / m[k]:.1f}%{of_pattern(m[k])})" for k in [f"fused {r}" for r in ROUNDINGS] + names)
            bound = " | ".join(f"{issue_bound_us(t, h, r):.2f}" for r in ROUNDINGS)
            yardstick = " | ".join(f"{m[k]:.2f} ({100 * halve / m[k]:.1f}%)" if k in m else "n/a" for k in ("pattern", "pattern without scales"))
            fused = " | ".join([f"{m[f'fused add {r}']:.2f} ({100 * add / m[f'fused add {r}']:.1f}%)" for r in ROUNDINGS] +
                               [f"{m[f'add {n}']:.2f} ({100 * add / m[f'add {n}']:.1f}%)" for n in add_names])
            rewrite = f"{m['rewrite']:.2f} ({100 * 4 * t * h / 1e3 / copy / m['rewrite']:.1f}%)"
            print(f"| {h} | {t} | {plain} | {bound} | {yardstick} | {fused} | {rewrite} |", flush=True)
    print(f"\nCopy ceiling: {copy_ceiling_text(ceilings)}. Issue bound: PLAIN_MANY_ROW_SASS instructions a thread, "
          f"{torch.cuda.get_device_properties(0).multi_processor_count} SMs x 4 a cycle.")


def norm_group_reference_table() -> None:
    """Beside the reference's closest op: SGLang 0.5.23 has no fused rmsnorm + 1x128 quantization with fp32
    scales; its rmsnorm_fp8_e8m0_quant (Triton) quantizes with UE8M0 scales (one byte each, column-major)
    and also writes the bf16 normalised row, 2 bytes an element more. jitkern's op runs with UE8M0
    column-major scales (packed four to an int32)."""
    ref = reference_ops_or_none("layernorm.rmsnorm_fp8_e8m0")
    print(f"\n#### RMSNorm + 1x128 fp8 with UE8M0 scales beside the reference's rmsnorm_fp8_e8m0_quant, bf16 [T, H] (us, CUDA-graph "
          f"medians, median of 3 interleaved rounds; {environment()})\n")
    if ref is None:
        print("not run: the reference is not installed (REFERENCE_WHEEL=/path/to/sglang-*.whl)")
        return
    print("The reference's op also writes the normalised bf16 row (5 bytes an element against jitkern's 3).\n")
    print("| H | T | jitkern | reference | reference / jitkern |")
    print("|---|---|---|---|---|")
    for h in (2048, 7168):
        w = torch.randn(h, dtype=DTYPE, device="cuda")
        for t in get_benchmark_range([1, 4, 16, 64, 128, 256, 4096, 16384, 32768], [1, 64, 4096]):
            x = torch.randn(t, h, dtype=DTYPE, device="cuda")
            q = torch.empty(t, h, dtype=FP8, device="cuda")
            s = group_scales_like(x, 128, column_major_scales=True, scale_ue8m0=True)
            m = interleaved({"jitkern": lambda: rmsnorm_group_quant_fp8(x, w, EPS, output_q=q, output_s=s, column_major_scales=True,
                                                                        scale_ue8m0=True),
                             "reference": lambda: ref.rmsnorm_fp8_e8m0_quant(x, w, EPS, 128)})
            print(f"| {h} | {t} | {m['jitkern']:.3f} | {m['reference']:.3f} | {m['reference'] / m['jitkern']:.2f}x |", flush=True)


def reference_table() -> None:
    """Per-tensor fp8 at every size beside the reference framework's kernel (SGLang, from its wheel): same
    inputs, same process."""
    ref = reference_module("per_tensor_quant_fp8")
    print(f"\n#### Per-tensor fp8 beside the reference, bf16 [T, {H}] (us, CUDA-graph medians, median of 3 interleaved "
          f"rounds; {environment()})\n")
    if ref is None:
        print("not run: the reference is not installed (REFERENCE_WHEEL=/path/to/sglang-*.whl)")
        return
    print("| T | static: jitkern | static: reference | reference / jitkern | dynamic: jitkern | dynamic: reference | reference / jitkern |")
    print("|---|---|---|---|---|---|---|")
    for t in get_benchmark_range([1, 4, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 4096, 16384, 32768], [1, 64, 4096]):
        x = torch.randn(t, H, dtype=DTYPE, device="cuda")
        q, s = torch.empty(t, H, dtype=FP8, device="cuda"), torch.tensor([0.02], device="cuda")
        static = interleaved({"jitkern": lambda: per_tensor_quant_fp8(x, q, s, is_static=True),
                              "reference": lambda: ref.per_tensor_quant_fp8(x, q, s, True)})
        dynamic = interleaved({"jitkern": lambda: per_tensor_quant_fp8(x, q, s), "reference": lambda: ref.per_tensor_quant_fp8(x, q, s, False)})
        print(f"| {t} | {static['jitkern']:.3f} | {static['reference']:.3f} | {static['reference'] / static['jitkern']:.2f}x | "
              f"{dynamic['jitkern']:.3f} | {dynamic['reference']:.3f} | {dynamic['reference'] / dynamic['jitkern']:.2f}x |", flush=True)


def main() -> None:
    if sys.argv[1:] == ["reference"]:
        warmup(dtypes=[DTYPE], ops=["per_tensor_quant_fp8", "rmsnorm_group_quant_fp8"])
        reference_table()
        return norm_group_reference_table()
    if sys.argv[1:2] == ["group"]:  # group [schedules | prefill [H ...]]
        warmup(dtypes=[DTYPE], ops=["rmsnorm", "fused_add_rmsnorm", "per_token_group_quant_8bit", "rmsnorm_group_quant_fp8",
                                    "fused_add_rmsnorm_group_quant_fp8"])
        print(f"\n### RMSNorm + group fp8 ({environment()})")
        prefill = sys.argv[2:3] == ["prefill"]
        names = list(NORM_GROUP_SCHEDULES) if not prefill else PREFILL_SCHEDULES + PREFILL_FUSED_SCHEDULES
        modules = norm_group_self_check(norm_group_schedule_modules(names))
        norm_group_large(yardstick_module(), copy_ceilings(use_cudagraph=True), modules, [int(h) for h in sys.argv[3:]] if prefill else None)
        if not prefill:
            norm_group_decode(modules)
        if not sys.argv[2:]:  # `group schedules`, `group prefill`: without the reference
            norm_group_reference_table()
        return
    warmup(dtypes=[DTYPE])
    module = yardstick_module()
    x = torch.randn(64, H, dtype=DTYPE, device="cuda")
    r = torch.randn_like(x)
    w = torch.randn(H, dtype=DTYPE, device="cuda")
    s = torch.tensor([0.02], device="cuda")
    for name, f in COMPILED.items():  # trace before anything is timed
        args = {"torch_per_tensor_static": (x, s), "torch_rmsnorm_quant": (x, w), "torch_fused_add_rmsnorm_quant": (x, r, w)}.get(name, (x,))
        f(*args)
    torch.cuda.synchronize()
    ceilings = copy_ceilings(use_cudagraph=True)
    print(f"\n### 8-bit quantization ({environment()})\n")
    print("Times are CUDA-graph medians in us (p20-p80 in brackets); torch baselines compute the same math "
          "(finite amax, fp32 division, saturation).")
    large_shapes(module, ceilings)
    decode_shapes()
    norm_quant(module)
    modules = norm_group_self_check(norm_group_schedule_modules(list(NORM_GROUP_SCHEDULES)))
    norm_group_large(module, ceilings, modules)
    norm_group_decode(modules)
    reference_table()
    norm_group_reference_table()


if __name__ == "__main__":
    main()
