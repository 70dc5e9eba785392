"""First call of the reference framework's (SGLang's) hot ops with its own JIT engine against with jitkern
installed under it (jitkern.compat.sglang.install()): each op in a fresh process with empty caches (both
engines' caches), then a cold start that calls all of them in one process. Needs the reference installed
and a GPU. Prints a markdown table of seconds (median of TRIALS) and the ratio jitkern / reference.

`--compile-only KERNELS_DIR` (no GPU, no torch): cold compile of the hot-path kernel files of the
reference package at KERNELS_DIR (its sglang/kernels/jit) through jitkern, lean mode against tvm-ffi mode
(the reference's own build: its headers, tvm-ffi's, its export macro), each with an empty cache.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utils import environment, is_in_ci  # noqa: E402

TRIALS = 1 if is_in_ci() else 3
SCRIPT = Path(__file__).resolve().parents[1] / "tests" / "python" / "compat_sglang_ops.py"
OPS = ["rmsnorm", "fused_add_rmsnorm", "qknorm", "activations", "store_cache", "per_token_group_quant", "topk_softmax"]


def run(engine: str, ops: list[str]) -> dict:
    import torch

    with tempfile.TemporaryDirectory() as d:
        env = dict(__import__("os").environ, JITKERN_CACHE_DIR=f"{d}/jitkern", SGLANG_JIT_CACHE_DIR=f"{d}/sglang")
        out = f"{d}/out.pt"
        proc = subprocess.run([sys.executable, str(SCRIPT), engine, out, *ops], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-3000:])
        return torch.load(out)


def main() -> None:
    print(environment())
    print("| op | reference s | jitkern s | jitkern / reference |\n|---|---|---|---|")
    for op in OPS + ["all (cold start)"]:
        ops = OPS if op.startswith("all") else [op]
        seconds = {}
        for engine in ("reference", "jitkern"):
            trials = []
            for _ in range(TRIALS):
                res = run(engine, ops)
                if any("error" in r for r in res.values()):
                    trials = None
                    break
                trials.append(sum(r["seconds"] for r in res.values()))
            seconds[engine] = statistics.median(trials) if trials else None
        ref, ours = seconds["reference"], seconds["jitkern"]
        ratio = f"{ours / ref:.2f}" if ref and ours else "n/a"
        fmt = lambda s: f"{s:.2f}" if s is not None else "error"  # noqa: E731
        print(f"| {op} | {fmt(ref)} | {fmt(ours)} | {ratio} |", flush=True)


def compile_only(kernels: str) -> None:
    import time

    from jitkern.compat import check
    from jitkern.compat import sglang as compat

    hot = ["elementwise/rmsnorm.cuh", "elementwise/fused_add_rmsnorm.cuh", "elementwise/qknorm.cuh", "elementwise/activation.cuh",
           "elementwise/kvcache.cuh", "gemm/per_token_group_quant.cuh", "moe/moe_topk_softmax.cuh"]
    compat.set_kernel_root(kernels)
    found = {c.files[0]: c for c in check.representative(check.discover(compat.kernel_root())) if c.files and not c.problem}
    print(environment())
    print("| kernel file | lean s | tvm-ffi s | lean / tvm-ffi |\n|---|---|---|---|")
    with compat.override_jit_cuda_arch(9, 0, "a"):
        for f in hot:
            call, seconds = found[f], {}
            for mode in ("lean", "tvm-ffi"):
                trials = []
                for _ in range(TRIALS):
                    with tempfile.TemporaryDirectory() as d:
                        __import__("os").environ["JITKERN_CACHE_DIR"] = d
                        spec = compat.jit_spec(*call.args, **{k: v for k, v in call.kwargs.items() if k != "header_only"}, mode=mode)[0]
                        start = time.perf_counter()
                        spec.build()
                        trials.append(time.perf_counter() - start)
                seconds[mode] = statistics.median(trials)
            print(f"| {f} | {seconds['lean']:.2f} | {seconds['tvm-ffi']:.2f} | {seconds['lean'] / seconds['tvm-ffi']:.2f} |", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--compile-only":
        compile_only(sys.argv[2])
    else:
        main()
