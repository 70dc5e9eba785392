"""First call of the reference framework's (SGLang's) hot ops with its own JIT engine against with jitkern
installed under it (jitkern.compat.sglang.install()): per engine, one fresh process with empty caches
(both engines' caches) calls each op once (tests/python/compat_sglang_ops.py; the op modules are imported
before the clock starts); each op's first call and their sum (the cold start of all of them) are timed:
the seven ops of the published table, or with --twenty the twenty hottest (the cold start of a serving
engine's decode/prefill ops). Needs the reference (installed, or its wheel named by REFERENCE_WHEEL) and a
GPU. Prints a markdown table of seconds (median of --trials processes) and the ratio jitkern / reference.

`--compile-only KERNELS_DIR` (no GPU, no torch): cold compile of the hot-path kernel files (or --files) of
the reference package at KERNELS_DIR (its sglang/kernels/jit) through jitkern, each with an empty cache:
lean mode with its host side without cudafe++ (the default), lean mode through nvcc's host chain, and
tvm-ffi mode (the reference's own build: its headers, tvm-ffi's, its export macro); wall and CPU seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from utils import environment, is_in_ci  # noqa: E402

TRIALS = 1 if is_in_ci() else 3


def first_calls(engine: str, ops: list[str]) -> dict:
    """compat_sglang_ops' results of one fresh process calling `ops` (empty: its default seven): {op:
    {"seconds": ...} or {"error": ...}}."""
    import compat_sglang_ops
    import torch

    with tempfile.TemporaryDirectory() as d:
        proc = compat_sglang_ops.run(engine, f"{d}/out.pt", ops, cache_root=d)
        if proc is None:
            sys.exit("not run: the reference (sglang) is neither installed nor named by REFERENCE_WHEEL")
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-3000:])
        return torch.load(f"{d}/out.pt")


def main(trials: int, twenty: bool) -> None:
    import compat_sglang_ops

    print(environment())
    ops = compat_sglang_ops.TWENTY if twenty else []
    runs = {engine: [first_calls(engine, ops) for _ in range(trials)] for engine in ("reference", "jitkern")}
    print(compat_sglang_ops.timing_table(runs))
    for engine, results in runs.items():
        for op, r in results[0].items():
            if "error" in r:
                print(f"\n{engine}, {op}:\n{r['error']}")


def compile_only(kernels: str, trials: int, files: list[str]) -> None:
    import resource
    import time

    from jitkern.compat import check
    from jitkern.compat import sglang as compat

    compat.set_kernel_root(kernels)
    found = {c.files[0]: c for c in check.representative(check.discover(compat.kernel_root())) if c.files and not c.problem}
    variants = {"lean": dict(mode="lean"), "lean, cudafe++": dict(mode="lean", host_without_cudafe=False), "tvm-ffi": dict(mode="tvm-ffi")}
    print(environment())
    print("Cold build of each file (median of the trials): wall s / every compiler's CPU s. lean: the host side "
          "without cudafe++ (the default); lean, cudafe++: nvcc's host chain; tvm-ffi: the reference's own build.")
    print("| kernel file | " + " | ".join(variants) + " | lean / lean with cudafe++ (wall) |\n|---|---|---|---|---|")
    with compat.override_jit_cuda_arch(9, 0, "a"):
        for f in files:
            call, cells, wall = found[f], [], {}
            for name, v in variants.items():
                times, cpu = [], []
                for _ in range(trials):
                    with tempfile.TemporaryDirectory() as d:
                        os.environ["JITKERN_CACHE_DIR"] = d
                        kwargs = {k: x for k, x in check.load_jit_kwargs(call.kwargs).items() if k != "header_only"}
                        # Each build as a process's first: no shared host prefix precompiled by the builds before it.
                        spec = compat.jit_spec(*call.args, **kwargs, mode=v["mode"])[0].replace(host_shared_files=0)
                        if "host_without_cudafe" in v:
                            spec = spec.replace(host_without_cudafe=v["host_without_cudafe"])
                        before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
                        spec.build()
                        after = resource.getrusage(resource.RUSAGE_CHILDREN)
                        times.append(time.perf_counter() - start)
                        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
                wall[name] = statistics.median(times)
                cells.append(f"{wall[name]:.2f} / {statistics.median(cpu):.2f}")
            print(f"| {f} | {' | '.join(cells)} | {wall['lean'] / wall['lean, cudafe++']:.2f} |", flush=True)


HOT = ["elementwise/rmsnorm.cuh", "elementwise/fused_add_rmsnorm.cuh", "elementwise/qknorm.cuh", "elementwise/activation.cuh",
       "elementwise/kvcache.cuh", "gemm/per_token_group_quant.cuh", "moe/moe_topk_softmax.cuh"]


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=TRIALS, help="fresh processes per engine (median)")
    p.add_argument("--twenty", action="store_true", help="the twenty hottest ops in each process, not the published seven")
    p.add_argument("--compile-only", metavar="KERNELS_DIR", help="cold compiles (lean, lean through cudafe++, tvm-ffi), no GPU")
    p.add_argument("--files", nargs="+", default=HOT, help="--compile-only: the kernel files, relative to csrc/ (default: the hot ones)")
    a = p.parse_args()
    if a.compile_only:
        compile_only(a.compile_only, a.trials, a.files)
    else:
        main(a.trials, a.twenty)
