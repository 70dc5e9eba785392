"""The RMSNorm family: jitkern vs torch eager vs torch.compile (bf16), time, GB/s and % of a measured
copy ceiling, over decode (T = 1..64) and prefill sizes. Prints markdown tables; writes a plot to
$OUT/bench_norm.png (or ./bench_norm.png)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import copy_ceiling_text, copy_ceilings, environment, get_benchmark_range, run_benchmark  # noqa: E402

from jitkern.ops import fused_add_rmsnorm, fused_inplace_qknorm, fused_inplace_qknorm_across_heads, rmsnorm  # noqa: E402

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


def main() -> None:
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
    for t in get_benchmark_range([256, 8192, 32768], [8192]):
        print(f"\nqknorm's access pattern as a plain copy, T={t}: the q+k columns of a [T, 48*128] qkv buffer copied into "
              f"another such buffer (torch copy_, CUDA graph): {strided_copy_gbps(t):.0f} GB/s")
    plot(rows, ceiling)


def strided_copy_gbps(tokens: int) -> float:
    """Bandwidth of a copy with qknorm's access pattern (40 of every 48 heads' rows), for context."""
    src = torch.randn(tokens, 48 * 128, dtype=DTYPE, device="cuda")
    dst = torch.empty_like(src)
    qk_src, qk_dst = src[:, : 40 * 128], dst[:, : 40 * 128]
    t = run_benchmark(lambda: qk_dst.copy_(qk_src))
    return 2 * qk_src.numel() * qk_src.element_size() / (t["median"] * 1e-6) / 1e9


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
