"""Benchmark helpers shared by bench_*.py (the reference framework's helpers, with correct labels)."""

from __future__ import annotations

import functools
import os
import statistics
import subprocess
import time
from datetime import date
from pathlib import Path


def is_in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def get_benchmark_range(full: list, ci: list) -> list:
    """The full sweep normally, a reduced one in CI."""
    return ci if is_in_ci() else full


BATCH = 200  # calls per timed batch: well under the launch queue depth
BATCHES = 20 if is_in_ci() else 200


def per_call_us(fn) -> float:
    """Host wall time per call of fn (us): the median over BATCHES timed loops of BATCH calls, with an
    untimed synchronisation between loops so that the launch queue never fills (a full queue would make
    the loop wait for the GPU and measure kernel throughput instead of host cost)."""
    import torch

    for _ in range(BATCH):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(BATCHES):
        t0 = time.perf_counter()
        for _ in range(BATCH):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        samples.append((t1 - t0) / BATCH * 1e6)
    return statistics.median(samples)


def run_benchmark(fn, *, quantiles=(0.5, 0.2, 0.8), use_cudagraph: bool = True) -> dict[str, float]:
    """Times fn on the GPU; returns microseconds as {"median", "p20", "p80"} (p20 is the faster one)."""
    import triton.testing

    if use_cudagraph:
        ms = triton.testing.do_bench_cudagraph(fn, quantiles=list(quantiles))
    else:
        ms = triton.testing.do_bench(fn, quantiles=list(quantiles))
    median, p20, p80 = (1000.0 * v for v in ms)
    return {"median": median, "p20": p20, "p80": p80}


def run_benchmark_or_none(fn) -> dict[str, float] | None:
    """run_benchmark(fn), or None with a note in the output: a baseline that cannot run is reported, not fatal."""
    try:
        return run_benchmark(fn)
    except Exception as e:  # noqa: BLE001 - any failure of the baseline
        print(f"<!-- failed: {type(e).__name__}: {e} -->")
        return None


def interleaved(fns: dict, rounds: int = 3) -> dict:
    """Median over `rounds` of each function's CUDA-graph median, the functions taking turns (so that a slow
    phase of the GPU does not fall on one of them only)."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(run_benchmark(fn)["median"])
    return {name: statistics.median(ts) for name, ts in times.items()}


def copy_ceilings(num_bytes: int = 1 << 30, use_cudagraph: bool = False) -> dict[str, float]:
    """Measured device-to-device copy bandwidth (bytes read + written), two ways: torch's copy_ and a plain
    16-byte-vector copy kernel (benchmarks/kernels/copy_ceiling.cuh). The higher one is the ceiling.

    torch's copy_ is always timed outside a CUDA graph (captured, it becomes a copy-engine memcpy node,
    which measured 2429 against 2964 GB/s); the copy kernel is timed like the kernels it is compared with.
    """
    import torch

    module = yardstick_module()
    n = num_bytes // 2 // 4 // (1 << 12) * (1 << 12)  # int32 elements per buffer, whole 16 KiB tiles
    src = torch.randint(-(2**31), 2**31 - 1, (n,), dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    module.copy(dst, src)
    assert torch.equal(dst, src), "the copy-ceiling kernel did not copy"
    moved = 2 * n * 4
    torch_copy = run_benchmark(lambda: dst.copy_(src), use_cudagraph=False)["median"]
    kernel_copy = run_benchmark(lambda: module.copy(dst, src), use_cudagraph=use_cudagraph)["median"]
    return {"torch copy_": moved / (torch_copy * 1e-6) / 1e9, "copy kernel": moved / (kernel_copy * 1e-6) / 1e9}


def yardstick_module():
    """benchmarks/kernels/copy_ceiling.cuh: copy(dst, src), rewrite_columns(buf, width, flip), rewrite_pair(a, b, flip),
    rewrite_rows(buf, reductions, flip), halve(dst, src), quarter(dst, src), read_all(out, src),
    rewrite_to_cache(rows, loc, kc, vc, rewrite, cached, flip),
    rewrite_to_cache_gathered(rows, loc, positions, table, kc, vc, rewrite, cached, flip),
    rewrite_gathered(rows, positions, table, rewrite, flip)."""
    import jitkern

    return jitkern.load_jit("bench_copy_ceiling", cuda_files=[str(Path(__file__).resolve().parent / "kernels" / "copy_ceiling.cuh")],
                            cuda_wrappers=[("copy", "copy_ceiling"), ("rewrite_columns", "rewrite_columns"), ("rewrite_pair", "rewrite_pair"),
                                           ("rewrite_rows", "rewrite_rows"), ("halve", "halve"), ("quarter", "quarter"),
                                           ("read_all", "read_all"),
                                           ("rewrite_to_cache", "rewrite_to_cache"),
                                           ("rewrite_to_cache_gathered", "rewrite_to_cache_gathered"),
                                           ("rewrite_gathered", "rewrite_gathered")])


@functools.cache
def overhead_module():
    """benchmarks/kernels/overhead.cuh: the stages of a call (call_only, verify_only, verify_and_stream, allocate_only)
    and the launch floor (launch_empty, launch_empty_bare, launch_empty_pdl: an empty one-warp kernel)."""
    import jitkern

    return jitkern.load_jit("overhead", cuda_files=[str(Path(__file__).resolve().parent / "kernels" / "overhead.cuh")],
                            cuda_wrappers=[("call_only", "call_only"), ("verify_only", "verify_only"),
                                           ("verify_and_stream", "verify_and_stream"), ("launch_empty", "launch_empty"),
                                           ("launch_empty_bare", "launch_empty_bare"), ("launch_empty_pdl", "launch_empty_pdl"),
                                           ("allocate_only", "allocate_only")])


def copy_ceiling_text(ceilings: dict[str, float]) -> str:
    return f"{max(ceilings.values()):.0f} GB/s (" + ", ".join(f"{k} {v:.0f}" for k, v in ceilings.items()) + ")"


def environment() -> str:
    try:
        import torch

        device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    except ImportError:
        device = "no GPU (torch not installed)"

    commit = os.environ.get("BENCH_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip() or "unknown"
    return f"{date.today().isoformat()}, {device}, commit {commit}"


def reference_ldflags() -> list[str]:
    """Link flags for reference-path modules that use jitkern's TensorMatcher (implemented in its runtime library)."""
    import jitkern

    lib = str(jitkern.PACKAGE_DIR / "lib")
    return [f"-L{lib}", "-ljitkern_runtime", f"-Wl,-rpath,{lib}"]


def compile_seconds(message: str) -> tuple[float, float] | None:
    """(the whole build's seconds, nvcc's device chain's) from an engine log line "compiled NAME in X s (...
    beside nvcc Y s ...)" (a build whose kernels nvcc compiled beside its host side); None for other lines."""
    import re

    found = re.search(r"^compiled \S+ in ([0-9.]+) s \(.* beside nvcc ([0-9.]+) s", message)
    return (float(found.group(1)), float(found.group(2))) if found else None


def empty_cache_env(cache: str, **settings: str) -> dict[str, str]:
    """The environment of a timed process whose JIT caches are all the empty directory `cache`: jitkern's,
    tvm-ffi's (the reference up to 0.5.9) and the reference's newer loader's (SGLANG_JIT_CACHE_DIR, else
    ~/.cache/sglang/jit, where a second trial would find the first's build); `settings` added."""
    return {**os.environ, "JITKERN_CACHE_DIR": cache, "TVM_FFI_CACHE_DIR": cache, "SGLANG_JIT_CACHE_DIR": cache, "JITKERN_QUIET": "1", **settings}


@functools.cache
def reference_path() -> str | None:
    """A directory from which the reference framework's `sglang` package imports: its wheel unpacked
    (REFERENCE_WHEEL=/path/to/sglang-*.whl; once per process), "" where it is installed, or None where
    it is absent."""
    import importlib.util
    import tempfile
    import zipfile

    wheel = os.environ.get("REFERENCE_WHEEL")
    if wheel:
        target = Path(tempfile.mkdtemp(prefix="reference-"))
        with zipfile.ZipFile(wheel) as z:
            z.extractall(target, [n for n in z.namelist() if n.startswith("sglang/")])
        return str(target)
    return "" if importlib.util.find_spec("sglang") else None


# The modules of the reference's releases up to 0.5.9 (sglang.jit_kernel.<name>) in its newer layout.
_NEWER_LAYOUT = {"norm": "layernorm.norm", "per_tensor_quant_fp8": "quantization.per_tensor_quant_fp8", "pos_enc": "attention.rope",
                 "rope": "attention.rope", "kvcache": "kvcache.kvcache"}


def reference_module(name: str):
    """The reference's `sglang.jit_kernel.<name>` module (its releases up to 0.5.9; in a newer release the
    op module that took its place), or None where the reference is absent."""
    if _reference_has("jit_kernel"):
        return reference_import(f"sglang.jit_kernel.{name}", bare=("sglang", "sglang.srt", "sglang.srt.utils"))
    return reference_ops(_NEWER_LAYOUT[name]) if name in _NEWER_LAYOUT else None


def reference_ops(path: str):
    """The reference's `sglang.kernels.ops.<path>` op module (its newer releases, e.g. "layernorm.norm"),
    or None where the reference is absent."""
    return reference_import(f"sglang.kernels.ops.{path}") if _reference_has("kernels") else None


def _reference_has(package: str) -> bool:
    """Whether the reference's sglang package has the subpackage (found without importing sglang)."""
    import importlib.util
    import sys

    path = reference_path()
    if path is None:
        return False
    if path and path not in sys.path:
        sys.path.insert(0, path)
    found = importlib.util.find_spec("sglang") if "sglang" not in sys.modules else sys.modules["sglang"].__spec__
    return found is not None and any((Path(p) / package).is_dir() for p in found.submodule_search_locations or [])


def reference_version() -> str:
    """The version of the reference: its wheel's (REFERENCE_WHEEL) or the installed package's, or "absent"."""
    import importlib.metadata

    wheel = os.environ.get("REFERENCE_WHEEL")
    if wheel:
        return Path(wheel).name.split("-")[1]
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def reference_import(module: str, bare: tuple = ("sglang",)):
    """The reference's module `module` (e.g. sglang.kernels.ops.layernorm.norm), or None where the
    reference is absent. Its package __init__ needs the whole serving stack, so the packages named in
    `bare` are bare namespace modules, and the third-party modules its helpers import but its kernels
    never use get reference_stand_ins' where they are missing."""
    import importlib
    import importlib.util
    import sys
    import types

    import reference_stand_ins

    path = reference_path()
    if path is None:
        return None
    if path and path not in sys.path:
        sys.path.insert(0, path)
    for package in bare:
        if package not in sys.modules:
            found = importlib.util.find_spec(package)
            stub = types.ModuleType(package)
            stub.__path__, stub.__spec__ = list(found.submodule_search_locations), found
            sys.modules[package] = stub
    before = set(sys.modules)
    for _ in range(40):
        try:
            return importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name is None or e.name.startswith("sglang"):
                raise
            if e.name in ("msgspec", "msgspec.structs"):
                sys.modules["msgspec"] = reference_stand_ins.msgspec_module()
                sys.modules["msgspec.structs"] = sys.modules["msgspec"].structs
            else:
                sys.modules[e.name] = reference_stand_ins.absent_module(e.name)
            for partial in [m for m in sys.modules if m.startswith("sglang.") and m not in before]:
                del sys.modules[partial]
    raise ImportError(f"the reference's {module} needs too many absent modules")


def reference_ops_or_none(path: str):
    """reference_ops(path), or None (with a note in the output) where it is absent or does not load, so that
    a table is printed without its reference column rather than not at all. Where its own JIT loader cannot
    build (it needs the `ninja` executable), jitkern.compat.sglang builds its kernels from the same sources."""
    try:
        module = reference_ops(path)
    except Exception as e:  # noqa: BLE001 - any failure of the reference's import
        print(f"<!-- the reference's {path} did not load: {type(e).__name__}: {str(e)[:300]} -->")
        return None
    if module is not None:
        reference_builder()
    return module


def reference_builder() -> str:
    """What builds the reference's kernels here: its own JIT loader, or, where that loader's build tool (the
    `ninja` executable) is missing, jitkern.compat.sglang from the same sources (installed by this call)."""
    import shutil

    if shutil.which("ninja") is not None:
        return "its own JIT loader"
    from jitkern.compat import sglang as compat

    compat.install()
    return "jitkern.compat.sglang from its sources (its own loader needs ninja, absent here)"


def call_each(fns: dict) -> dict:
    """Calls each function once (builds, warm-up); a "reference" entry that fails is left out with a note."""
    for name, fn in list(fns.items()):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the reference's JIT build or launch
            if name != "reference":
                raise
            print(f"<!-- the reference failed: {type(e).__name__}: {str(e)[:300]} -->")
            del fns[name]
    return fns
