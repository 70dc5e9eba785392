"""First call of the reference framework's (SGLang's) hot ops with its own JIT engine against with jitkern
installed under it (jitkern.compat.sglang.install()): each op in a fresh process with empty caches (both
engines' caches), then a cold start that calls all of them in one process. Needs the reference installed
and a GPU. Prints a markdown table of seconds (median of TRIALS) and the ratio jitkern / reference.
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


if __name__ == "__main__":
    main()
