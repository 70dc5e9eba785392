"""A/B of two jitkern installs on the same GPU, in alternating fresh processes: per-call host time of
every op at decode size, and the warm load (first load_jit of a cached module in a fresh process, then a
second module's in the same process).

    python3 benchmarks/ab_installs.py A=/tmp/site-a B=/tmp/site-b [--rounds 5] [--cpu 3] [--warm-load-only] [--seconds S]

Each NAME=DIR is a --target install directory (put first on PYTHONPATH). Each round is one fresh process
per install and case (a torch import each: about 2 s on a GPU host); a line per round goes to stderr, and
--seconds starts no round after that many seconds, so a time limit still leaves a table of the rounds
done. Prints Markdown tables."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

PER_CALL = """
import sys, torch
sys.path.insert(0, {here!r})
from utils import per_call_us
from jitkern.ops import add_constant, fused_add_rmsnorm, fused_inplace_qknorm, fused_inplace_qknorm_across_heads, rmsnorm
x = torch.randn(1, 4096, dtype=torch.bfloat16, device="cuda"); w = torch.randn(4096, dtype=torch.bfloat16, device="cuda")
out = torch.empty_like(x); r = torch.randn_like(x)
q = torch.randn(1, 32, 128, dtype=torch.bfloat16, device="cuda"); k = torch.randn(1, 8, 128, dtype=torch.bfloat16, device="cuda")
hw = torch.randn(128, dtype=torch.bfloat16, device="cuda")
qa = torch.randn(1, 4096, dtype=torch.bfloat16, device="cuda"); ka = torch.randn(1, 4096, dtype=torch.bfloat16, device="cuda")
src = torch.zeros(8, dtype=torch.int32, device="cuda"); dst = torch.empty_like(src)
cases = {{
    "rmsnorm(x, w, out) [1, 4096]": lambda: rmsnorm(x, w, out),
    "fused_add_rmsnorm [1, 4096]": lambda: fused_add_rmsnorm(x, r, w),
    "fused_inplace_qknorm T=1, 32+8 heads": lambda: fused_inplace_qknorm(q, k, hw, hw),
    "fused_inplace_qknorm_across_heads [1, 4096]": lambda: fused_inplace_qknorm_across_heads(qa, ka, w, w),
    "add_constant(src, 5, out) 8 elements": lambda: add_constant(src, 5, dst),
}}
for name, fn in cases.items():
    fn()
for name, fn in cases.items():
    print("RESULT", name, "|", per_call_us(fn))
"""

WARM_LOAD = """
try:
    import torch  # as in serving: torch has loaded the CUDA runtime already, which a kernel module's load then skips
except ImportError:
    pass
import time
t0 = time.perf_counter()
import jitkern
from jitkern import load_jit  # the package's import (tvm-ffi's too) is not part of a load
t1 = time.perf_counter()
m = load_jit("add_constant", "5", cuda_files=["add_constant.cuh"], cuda_wrappers=[("add_constant", "add_constant<5>")])
m.add_constant
t2 = time.perf_counter()
m = load_jit("add_constant", "6", cuda_files=["add_constant.cuh"], cuda_wrappers=[("add_constant", "add_constant<6>")])
m.add_constant
t3 = time.perf_counter()
print("RESULT import jitkern and tvm-ffi (ms) |", (t1 - t0) * 1e3)
print("RESULT warm load_jit, fresh process (ms) |", (t2 - t1) * 1e3)
print("RESULT warm load_jit of a second module, same process (ms) |", (t3 - t2) * 1e3)  # without the process's one-time work
"""


def run(code: str, site: str, cache: str, cpu: int | None = None) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=site + os.pathsep + os.environ.get("PYTHONPATH", ""), JITKERN_CACHE_DIR=cache,
               JITKERN_QUIET="1")
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []  # one core: process-to-process placement noise out
    out = subprocess.run([*pin, sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{site}: " + out.stderr[-3000:])
    results = {}
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            name, value = line[7:].rsplit("|", 1)
            results[name.strip()] = float(value)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("installs", nargs="+", help="NAME=SITE_DIR")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cpu", type=int, default=None, help="pin every process to this CPU core")
    parser.add_argument("--warm-load-only", action="store_true", help="only the warm load (no per-call cases)")
    parser.add_argument("--seconds", type=float, default=None, help="start no round after this many seconds (at least one runs)")
    args = parser.parse_args()
    start = time.perf_counter()
    codes = [WARM_LOAD] if args.warm_load_only else [PER_CALL.format(here=str(HERE)), WARM_LOAD]
    installs = dict(item.split("=", 1) for item in args.installs)
    samples: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        caches = {name: os.path.join(tmp, name) for name in installs}
        for name, site in installs.items():  # compile everything once, outside the timings
            for code in codes:
                run(code, site, caches[name])
        rounds = 0
        while rounds < args.rounds and (rounds == 0 or args.seconds is None or time.perf_counter() - start < args.seconds):
            for name, site in installs.items():
                for code in codes:
                    for case, value in run(code, site, caches[name], args.cpu).items():
                        samples.setdefault((case, name), []).append(value)
            rounds += 1
            print(f"round {rounds}/{args.rounds} done at {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    names = list(installs)
    cases = list(dict.fromkeys(case for case, _ in samples))
    print(f"\n| case | " + " | ".join(f"{n}: median of {rounds} processes (min-max)" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for case in cases:
        cells = []
        for n in names:
            v = samples[(case, n)]
            cells.append(f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})")
        print(f"| {case} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
