"""Runs hot ops of the reference framework (SGLang) through its own Python wrappers, on the GPU, with
fixed inputs, and saves their outputs and the seconds each first call took:
`python compat_sglang_ops.py {reference,jitkern} OUT.pt [OP ...]` (default: every op), or `run(...)` from
another process (empty caches, the reference from REFERENCE_WHEEL or installed). The op modules are
imported before any timing, through benchmarks/utils.py's reference_import (a wheel alone suffices).
With "jitkern", jitkern.compat.sglang.install() makes jitkern the engine first, and the file also records
which ops jitkern built. test_compat_current.py runs it once per engine and compares;
benchmarks/bench_compat_sglang.py times the first calls."""

import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from utils import compile_seconds, reference_import, reference_path  # noqa: E402

MODULES = ["sglang.kernels.jit.utils", "sglang.kernels.ops.layernorm.norm", "sglang.kernels.ops.activation.activation",
           "sglang.kernels.ops.kvcache.kvcache", "sglang.kernels.ops.quantization.per_token_group_quant", "sglang.kernels.ops.moe"]


def run(engine: str, out_path: str, ops=(), cache_root: str = "", timeout: float = 1800) -> subprocess.CompletedProcess:
    """This file in a child process for `engine`, with empty caches under `cache_root` and the reference
    (unpacked once here) on its path; None where the reference is absent."""
    path = reference_path()
    if path is None:
        return None
    env = {k: v for k, v in os.environ.items() if k != "REFERENCE_WHEEL"}
    env.update(JITKERN_CACHE_DIR=f"{cache_root}/jitkern", SGLANG_JIT_CACHE_DIR=f"{cache_root}/sglang-{engine}", TVM_FFI_CACHE_DIR=f"{cache_root}/tvm-ffi-{engine}")
    if path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, __file__, engine, out_path, *ops], env=env, capture_output=True, text=True, timeout=timeout)


def timing_table(runs: dict) -> str:
    """Markdown: each op's first-call seconds per engine and jitkern / reference, and their sum (the cold
    start of all of them); `runs` maps "reference"/"jitkern" to a list of run results (median taken).
    The device chain of jitkern's builds of the op (nvcc's device compile of the same source, which any
    engine building it from source runs) is the floor a first call cannot go under."""
    import statistics

    def median_of(values: list):  # of the runs' values, where every run has one
        return statistics.median(values) if values and None not in values else None

    def total(res: dict):
        return None if any("error" in r for r in res.values()) else sum(r["seconds"] for r in res.values())

    every = "all (cold start)"
    lines = ["| op | modules built | reference s | jitkern s | jitkern / reference | jitkern's builds s | nvcc's device chain alone s "
             "| device chain / reference |", "|---|---|---|---|---|---|---|---|"]
    for op in list(runs["reference"][0]) + [every]:
        seconds = {}
        for engine, results in runs.items():
            values = [total(res) if op == every else res.get(op, {}).get("seconds") for res in results]
            seconds[engine] = median_of(values)
        ref, ours = seconds["reference"], seconds["jitkern"]
        fmt = lambda s: f"{s:.2f}" if s is not None else "error"  # noqa: E731
        ratio = lambda a, b: f"{a / b:.2f}" if a and b else "n/a"  # noqa: E731
        first = runs["jitkern"][0]  # modules jitkern built (rmsnorm: one per hidden size)
        modules = sum(len(r.get("built", ())) for r in first.values()) if op == every else len(first.get(op, {}).get("built", ()))

        def jitkern_median(key):  # of jitkern's runs: the op's (or every op's) build or device seconds
            values = [sum(r.get(key, 0) for r in res.values()) if op == every else res.get(op, {}).get(key) for res in runs["jitkern"]]
            return median_of(values)

        builds, floor = jitkern_median("build_seconds"), jitkern_median("device_seconds")
        lines.append(f"| {op} | {modules} | {fmt(ref)} | {fmt(ours)} | {ratio(ours, ref)} | {fmt(builds)} | {fmt(floor)} | {ratio(floor, ref)} |")
    return "\n".join(lines)


import torch  # noqa: E402

dev = "cuda"
BF16 = torch.bfloat16
built: list[str] = []
compiled: list[tuple[float, float]] = []  # per jitkern build: its seconds, nvcc's device chain's (preprocess, cicc, ptxas, fatbinary)


def gen(seed, *shape, dtype=BF16):
    g = torch.Generator(device=dev).manual_seed(seed)
    return torch.randn(*shape, generator=g, device=dev, dtype=torch.float32).to(dtype)


def rmsnorm():
    from sglang.kernels.ops.layernorm.norm import rmsnorm

    outs = []
    for d in (128, 4096, 8192):
        x, w = gen(1, 64, d), gen(2, d)
        out = torch.empty_like(x)
        rmsnorm(x, w, out, 1e-6)
        outs.append(out)
    return outs


def fused_add_rmsnorm():
    from sglang.kernels.ops.layernorm.norm import fused_add_rmsnorm

    x, r, w = gen(3, 64, 4096), gen(4, 64, 4096), gen(5, 4096)
    fused_add_rmsnorm(x, r, w, 1e-6)
    return [x, r]


def qknorm():
    from sglang.kernels.ops.layernorm.norm import fused_inplace_qknorm

    q, k, qw, kw = gen(6, 16, 8, 128), gen(7, 16, 2, 128), gen(8, 128), gen(9, 128)
    fused_inplace_qknorm(q, k, qw, kw, 1e-6)
    return [q, k]


def activations():
    from sglang.kernels.ops.activation.activation import gelu_and_mul, silu_and_mul

    x = gen(10, 64, 2 * 4096)
    return [silu_and_mul(x), gelu_and_mul(x)]


def store_cache():
    from sglang.kernels.ops.kvcache.kvcache import store_cache

    k, v = gen(11, 32, 8 * 128), gen(12, 32, 8 * 128)
    kc, vc = torch.zeros(256, 8 * 128, device=dev, dtype=BF16), torch.zeros(256, 8 * 128, device=dev, dtype=BF16)
    idx = torch.randperm(256, generator=torch.Generator().manual_seed(13))[:32].to(dev)
    store_cache(k, v, kc, vc, idx)
    return [kc, vc]


def per_token_group_quant():
    from sglang.kernels.ops.quantization.per_token_group_quant import per_token_group_quant

    q, s = per_token_group_quant(gen(14, 64, 4096), group_size=128)
    return [q.view(torch.uint8), s]


def topk_softmax():
    from sglang.kernels.ops.moe import topk_softmax

    weights, ids = torch.empty(64, 8, device=dev), torch.empty(64, 8, device=dev, dtype=torch.int32)
    topk_softmax(weights, ids, gen(15, 64, 64, dtype=torch.float32), True)
    return [weights, ids]


OPS = [rmsnorm, fused_add_rmsnorm, qknorm, activations, store_cache, per_token_group_quant, topk_softmax]


def main(engine: str, out_path: str, chosen: list[str]) -> None:
    for module in MODULES:  # imported before any timing, with either engine
        if reference_import(module) is None:
            sys.exit("the reference (sglang) is neither installed nor named by REFERENCE_WHEEL")
    if engine == "jitkern":
        from jitkern.compat import sglang as compat

        compat.install()
        spec_of = compat.jit_spec

        def counting_jit_spec(*args, **kwargs):  # every jitkern build goes through it
            built.append(str(args[0]) if args else "?")
            return spec_of(*args, **kwargs)

        compat.jit_spec = counting_jit_spec
        import logging

        class DeviceSeconds(logging.Handler):  # from the engine's "compiled NAME ..." lines
            def emit(self, record):
                seconds = compile_seconds(record.getMessage())
                if seconds is not None:
                    compiled.append(seconds)

        logging.getLogger("jitkern").setLevel(logging.INFO)
        logging.getLogger("jitkern").addHandler(DeviceSeconds())
    torch.zeros(1, device=dev)  # CUDA context first: not part of any op's first call
    results = {}
    for op in OPS:
        if chosen and op.__name__ not in chosen:
            continue
        before, compiled_before = len(built), len(compiled)
        try:
            start = time.perf_counter()
            outs = op()
            torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            results[op.__name__] = {"outputs": [t.cpu() for t in outs], "built": built[before:], "seconds": seconds,
                                    "build_seconds": sum(b for b, _ in compiled[compiled_before:]),
                                    "device_seconds": sum(d for _, d in compiled[compiled_before:])}
        except Exception:  # noqa: BLE001
            results[op.__name__] = {"error": traceback.format_exc(limit=3)}
    torch.save(results, out_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
