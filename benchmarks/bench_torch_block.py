"""A toy decoder block under torch.compile: time per step, jitkern ops against the same block written with
torch-native ops, eager / compiled / compiled + CUDA graphs, at decode (T = 1..64) and prefill (T = 4096)
sizes, bf16, hidden 4096, 32 q + 8 kv heads of 128.

One step: embedding -> rmsnorm -> linear -> fused_add_rmsnorm (residual = the embedding output) -> qkv
linear -> per-head RMSNorm of the q and k column slices, in place -> output linear. The residual is an
intermediate, as in a model's first layer, so CUDA graph trees may capture the step (a mutated *input*
would make Inductor skip CUDA graphs, for torch-native in-place ops as for custom ops).

Time per step is host wall time over a loop of steps with one synchronisation at the end: what a serving
loop pays, launch overhead included. Prints markdown tables."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import environment, get_benchmark_range, is_in_ci, run_benchmark  # noqa: E402

import jitkern.ops  # noqa: E402
from jitkern.ops import fused_add_rmsnorm, fused_inplace_qknorm, rmsnorm  # noqa: E402

DTYPE = torch.bfloat16
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 4096, 32, 8, 128, 32000
EPS = 1e-6
TOKENS = get_benchmark_range([1, 2, 4, 8, 16, 32, 64, 4096], [1, 64])
STEPS = 20 if is_in_ci() else 200  # steps per timed loop
LOOPS = 5 if is_in_ci() else 15


class Block(torch.nn.Module):
    def __init__(self, native: bool):
        super().__init__()
        kw = dict(dtype=DTYPE, device="cuda")
        self.native = native
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN, **kw)
        self.w1, self.w2 = torch.nn.Parameter(torch.rand(HIDDEN, **kw) + 0.5), torch.nn.Parameter(torch.rand(HIDDEN, **kw) + 0.5)
        self.qw, self.kw = torch.nn.Parameter(torch.rand(HEAD_DIM, **kw) + 0.5), torch.nn.Parameter(torch.rand(HEAD_DIM, **kw) + 0.5)
        self.up = torch.nn.Linear(HIDDEN, HIDDEN, bias=False, **kw)
        self.qkv = torch.nn.Linear(HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM, bias=False, **kw)
        self.out = torch.nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False, **kw)

    def forward(self, ids):
        x = self.embed(ids)
        residual = x
        t = ids.shape[0]
        if self.native:
            h = self.up(F.rms_norm(x, (HIDDEN,), self.w1, EPS))
            residual = residual + h
            h = F.rms_norm(residual, (HIDDEN,), self.w2, EPS)
            qkv = self.qkv(h)
            q = F.rms_norm(qkv[:, : HEADS * HEAD_DIM].view(t, HEADS, HEAD_DIM), (HEAD_DIM,), self.qw, EPS)
            k = F.rms_norm(qkv[:, HEADS * HEAD_DIM : (HEADS + KV_HEADS) * HEAD_DIM].view(t, KV_HEADS, HEAD_DIM), (HEAD_DIM,), self.kw, EPS)
            return self.out(q.reshape(t, -1)), k, residual
        h = self.up(rmsnorm(x, self.w1, None, EPS))
        fused_add_rmsnorm(h, residual, self.w2, EPS)
        qkv = self.qkv(h)
        q, k = qkv[:, : HEADS * HEAD_DIM], qkv[:, HEADS * HEAD_DIM : (HEADS + KV_HEADS) * HEAD_DIM]
        fused_inplace_qknorm(q, k, self.qw, self.kw, EPS, head_dim=HEAD_DIM)
        return self.out(q), k.view(t, KV_HEADS, HEAD_DIM), residual


def step_times_us(variants: dict, ids) -> dict[str, float]:
    """Per variant, the median over LOOPS of (wall time of STEPS steps, then one synchronisation) / STEPS;
    the variants take turns within each loop so that clock drift hits them alike."""
    samples = {name: [] for name in variants}
    for loop in range(LOOPS + 1):
        for name, (fn, graphs) in variants.items():
            mark = torch.compiler.cudagraph_mark_step_begin if graphs else (lambda: None)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(STEPS):
                mark()
                fn(ids)
            torch.cuda.synchronize()
            if loop:  # the first loop warms up
                samples[name].append((time.perf_counter() - t0) / STEPS * 1e6)
    return {name: statistics.median(v) for name, v in samples.items()}


def main() -> None:
    from torch._dynamo.utils import counters

    jitkern.ops.warmup(dtypes=[DTYPE])
    torch.manual_seed(0)
    jit_block, native_block = Block(native=False).eval(), Block(native=True).eval()
    native_block.load_state_dict(jit_block.state_dict())
    variants = {
        "jitkern eager": (jit_block, False),
        "jitkern compiled": (torch.compile(jit_block, fullgraph=True, dynamic=True), False),
        "jitkern compiled + CUDA graphs": (torch.compile(jit_block, fullgraph=True, dynamic=True, mode="reduce-overhead"), True),
        "torch eager": (native_block, False),
        "torch compiled": (torch.compile(native_block, fullgraph=True, dynamic=True), False),
        "torch compiled + CUDA graphs": (torch.compile(native_block, fullgraph=True, dynamic=True, mode="reduce-overhead"), True),
    }
    print(f"\n### Toy decoder block under torch.compile ({environment()})\n")
    print(f"bf16, hidden {HIDDEN}, {HEADS} q + {KV_HEADS} kv heads of {HEAD_DIM}; torch {torch.__version__}. Microseconds per "
          f"step: host wall time of {STEPS} steps and one synchronisation, median of {LOOPS} loops.\n")
    skips_before = counters["inductor"]["cudagraph_skips"]
    names = list(variants)
    wall = ["| T | " + " | ".join(names) + " | jitkern graphs vs torch graphs |", "|" + "---|" * (len(names) + 2)]
    device_names = [n for n, (_, graphs) in variants.items() if not graphs]
    device = ["| T | " + " | ".join(device_names) + " |", "|" + "---|" * (len(device_names) + 1)]
    with torch.no_grad():
        for t in TOKENS:
            ids = torch.randint(0, VOCAB, (t,), device="cuda")
            ref_out, ref_k, ref_res = (v.float() for v in jit_block(ids))
            for name, (fn, graphs) in variants.items():
                if graphs:
                    torch.compiler.cudagraph_mark_step_begin()
                out, k, res = fn(ids)
                check = lambda m, name=name: f"{name}, T={t}: {m}"
                torch.testing.assert_close(out.float(), ref_out, rtol=5e-2, atol=0.5, msg=check)
                torch.testing.assert_close(k.float(), ref_k, rtol=5e-2, atol=5e-2, msg=check)
                torch.testing.assert_close(res.float(), ref_res, rtol=5e-2, atol=5e-2, msg=check)
            times = step_times_us(variants, ids)
            ratio = times["torch compiled + CUDA graphs"] / times["jitkern compiled + CUDA graphs"]
            wall.append(f"| {t} | " + " | ".join(f"{times[n]:.1f}" for n in names) + f" | {ratio:.2f}x |")
            # the kernels alone: one step captured in a CUDA graph by the timer, replayed
            gpu = {n: run_benchmark(lambda fn=variants[n][0]: fn(ids))["median"] for n in device_names}
            device.append(f"| {t} | " + " | ".join(f"{gpu[n]:.1f}" for n in device_names) + " |")
    print("#### Time per step, host wall time (us)\n")
    print("\n".join(wall))
    print("\n#### GPU time per step: one step captured in a CUDA graph and replayed (us, median)\n")
    print("\n".join(device))
    skips = counters["inductor"]["cudagraph_skips"] - skips_before
    print(f"\nInductor skipped CUDA graphs {skips} times while compiling these (0: every reduce-overhead step is a graph replay).")
    print_replay_host_work({n: fn for n, (fn, graphs) in variants.items() if graphs})


def print_replay_host_work(graphed: dict, steps: int = 20) -> None:
    """What one CUDA-graph step runs on the host (torch profiler, T = 1): us per step of the costliest
    host events, and how many of them are jitkern's (a replay should call none)."""
    from torch.profiler import ProfilerActivity, profile

    ids = torch.randint(0, VOCAB, (1,), device="cuda")
    rows = {}
    with torch.no_grad():
        for name, fn in graphed.items():
            for _ in range(3):
                torch.compiler.cudagraph_mark_step_begin()
                fn(ids)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(steps):
                    torch.compiler.cudagraph_mark_step_begin()
                    fn(ids)
                torch.cuda.synchronize()
            rows[name] = {e.key: e.self_cpu_time_total / steps for e in prof.key_averages()}
    names = list(rows)
    top = sorted({k for r in rows.values() for k in r}, key=lambda k: -max(r.get(k, 0.0) for r in rows.values()))[:6]
    print(f"\n#### Host work per CUDA-graph step, T = 1 (torch profiler, self CPU us per step over {steps} steps)\n")
    print("| event | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for k in top:
        print(f"| {k[:60]} | " + " | ".join(f"{rows[n].get(k, 0.0):.1f}" for n in names) + " |")
    print("| events of jitkern's ops | " + " | ".join(str(sum(1 for k in rows[n] if "jitkern" in k)) for n in names) + " |")


if __name__ == "__main__":
    main()
