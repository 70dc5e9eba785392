"""The MLA cache write (jitkern.ops.set_mla_kv_buffer, set_mla_kv_concat_q) against torch, jitkern's unfused
pair (set_mla_kv_buffer then concat_mla_absorb_q) and, where they import (REFERENCE_WHEEL, see
utils.reference_path), the reference framework's (SGLang's) kernels of the same names. DeepSeek-V3 shapes:
k_nope 512 + k_rope 64 bf16 per token, 16 query heads (128 over 8 GPUs), a paged cache of 64-token pages,
each token in its own random slot. Prints markdown tables: time (CUDA-graph medians, us), GB/s of the
bytes moved (the rows read and written) and % of the measured copy ceiling."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_rope  # noqa: E402
from bench_rope import in_turns  # noqa: E402
from utils import copy_ceiling_text, copy_ceilings, environment, get_benchmark_range, reference_ops  # noqa: E402

from jitkern.ops import concat_mla_absorb_q, set_mla_kv_buffer, set_mla_kv_concat_q, warmup  # noqa: E402

NOPE, ROPE, HEADS, PAGE = 512, 64, 16, 64
DTYPE = torch.bfloat16
DECODE = get_benchmark_range([1, 4, 16, 64, 256], [1, 64])
PREFILL = get_benchmark_range([4096, 16384, 32768], [4096])
SLOTS = 2 * max(PREFILL)


def references():
    """{name: fn(buf, loc, kn, kr, qn, qr)} of the reference's kernels that import here, and why the others do not."""
    found, missing = {}, []
    for name, module, attr in (("reference set_mla_kv_buffer", "kvcache.set_mla_kv_buffer", "set_mla_kv_buffer"),
                               ("reference set_mla_kv_concat_q", "attention.set_mla_kv_concat_q", "set_mla_kv_concat_q")):
        try:
            fn = getattr(reference_ops(module), attr)
            found[name] = ((lambda b, loc, kn, kr, qn, qr, fn=fn: fn(b.view(-1, NOPE + ROPE), loc, kn, kr)) if "buffer" in name else
                           (lambda b, loc, kn, kr, qn, qr, fn=fn: fn(b.view(-1, NOPE + ROPE), loc, kn, kr, qn, qr)))
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            missing.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")
    return found, missing


def inputs(t):
    kv = torch.randn(t, NOPE + ROPE, dtype=DTYPE, device="cuda")
    q = torch.randn(t, HEADS, NOPE + ROPE, dtype=DTYPE, device="cuda")
    loc = torch.randperm(SLOTS, device="cuda")[:t]
    return kv[:, :NOPE], kv[:, NOPE:], q[..., :NOPE], q[..., NOPE:], loc


def main() -> None:
    warmup(ops=["set_mla_kv_buffer", "set_mla_kv_concat_q", "concat_mla_absorb_q"], dtypes=[DTYPE])
    buf = torch.zeros(SLOTS // PAGE, PAGE, 1, NOPE + ROPE, dtype=DTYPE, device="cuda")
    refs, missing = references()
    kn, kr, qn, qr, loc = inputs(64)
    q = set_mla_kv_concat_q(buf, loc, kn, kr, qn, qr)
    assert torch.equal(buf.view(-1, NOPE + ROPE)[loc], torch.cat([kn, kr], -1)) and torch.equal(q, torch.cat([qn, qr], -1))
    ceilings = copy_ceilings(use_cudagraph=True)
    ceiling = max(ceilings.values())
    print(f"\n### MLA cache write, k {NOPE} + {ROPE}, {HEADS} query heads, bf16, pages of {PAGE} ({environment()})\n")
    print(f"Measured copy ceiling: {copy_ceiling_text(ceilings)}. CUDA-graph medians in us (p20-p80), the "
          f"median one of {bench_rope.ROUNDS} rounds in which the columns take turns.\n")
    for line in missing:
        print(f"- not run: {line}")
    rows = buf.view(-1, NOPE + ROPE)
    tables = {
        "set_mla_kv_buffer": ({"jitkern": lambda b, loc, kn, kr, qn, qr: set_mla_kv_buffer(b, loc, kn, kr, reserved_skip_index=-1),
                               "torch index_put_ of cat": lambda b, loc, kn, kr, qn, qr: rows.index_put_((loc,), torch.cat([kn, kr], -1)),
                               **{n: f for n, f in refs.items() if "buffer" in n}}, False, DECODE + PREFILL),
        "set_mla_kv_concat_q": ({"jitkern": lambda b, loc, kn, kr, qn, qr: set_mla_kv_concat_q(b, loc, kn, kr, qn, qr),
                                 "jitkern set_mla_kv_buffer, then concat_mla_absorb_q": lambda b, loc, kn, kr, qn, qr: (
                                     set_mla_kv_buffer(b, loc, kn, kr, reserved_skip_index=-1), concat_mla_absorb_q(qn, qr)),
                                 **{n: f for n, f in refs.items() if "concat" in n}}, True, DECODE),
    }
    for title, (fns, query, sizes) in tables.items():
        names = list(fns)
        print(f"\n#### {title}\n")
        print("| T | " + " | ".join(f"{n} us" for n in names) + " | jitkern GB/s | % of copy ceiling | " +
              " | ".join(f"{n} / jitkern" for n in names[1:]) + " |")
        print("|---|" + "---|" * (2 * len(names) + 1))
        for t in sizes:
            kn, kr, qn, qr, loc = inputs(t)
            res = in_turns({n: (lambda f=f: f(buf, loc, kn, kr, qn, qr)) for n, f in fns.items()}, t)
            mine = res["jitkern"]["median"]
            moved = t * (NOPE + ROPE) * 2 * 2 * (1 + (HEADS if query else 0)) + t * 8
            gbps = moved / (mine * 1e-6) / 1e9
            cells = " | ".join("n/a" if r is None else f"{r['median']:.2f} [{r['p20']:.2f}-{r['p80']:.2f}]" for r in res.values())
            ratios = " | ".join("n/a" if res[n] is None else f"{res[n]['median'] / mine:.2f}x" for n in names[1:])
            print(f"| {t} | {cells} | {gbps:.0f} | {100 * gbps / ceiling:.1f}% | {ratios} |")


if __name__ == "__main__":
    main()
